"""One trace replayed whole vs split by stream on Ray: peak memory and throughput (issue 32).

    python benchmarks/bench_shard.py --events 1000000 5000000 [--shards 2] [--streams 500]

For each size, on a generated ``simple`` trace (``--streams`` streams, seeded), in fresh
processes and with an empty trace cache (kernels compiled beforehand, as any second run has
them):

* ``single``: today's one-process run (``memlens.runs.pipeline.run`` + ``write_run``: parse,
  replay, metrics, per_request.parquet, events.parquet, report.html); peak RSS of the process;
* ``sharded``: ``simulate shards=N backend=ray`` (``memlens.runs.sharded.simulate_sharded``,
  the CLI's code path) on a Ray started on 127.0.0.1 with N CPUs: peak RSS of the driver and,
  per worker process, the highest peak any of its tasks reached (each task resets the count,
  ``/proc/self/clear_refs``); seconds per phase (split, Ray start, prepare = parse, replay,
  merge = summaries and Parquet parts), and the driver's peak RSS in each phase.

Both runs use ``policy=lru budget=2048 oracle.enabled=false`` (the LP bounds would dominate
either) and must give the same metrics.json (checked: ``same_metrics``).  Throughput is events
per second of wall time, end to end.  Results go to ``benchmarks/results/bench_shard.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
SETTINGS = ["policy=lru", "budget=2048", "oracle.enabled=false", "mlflow.enabled=false"]

SINGLE = """
import json, sys, time
from memlens.config.compose import run_settings
from memlens.runs.pipeline import run
from memlens.runs.writers import write_run
from memlens.runs.sharded import rss_kib
from pathlib import Path
s = run_settings(sys.argv[2:])
t0 = time.perf_counter()
done, report = run(s, record_values=s.events.enabled)
out = Path(sys.argv[1]); out.mkdir()
write_run(out, done, report, "")
print(json.dumps({"wall_s": time.perf_counter() - t0, "peak_kib": rss_kib("VmHWM")}))
"""

SHARDED = """
import json, sys, time
from memlens.config.compose import run_settings
from memlens.runs.sharded import rss_kib, simulate_sharded
from pathlib import Path
s = run_settings(sys.argv[2:])
out = Path(sys.argv[1]); out.mkdir()
stats = {}
t0 = time.perf_counter()
simulate_sharded(s, out, "", stats)
stats["wall_s"] = time.perf_counter() - t0
print(json.dumps(stats))
"""


def run_python(code: str, args: list[str], cache: str) -> dict:
    env = {**os.environ, "MEMLENS_CACHE": cache, "PYTHONWARNINGS": "ignore"}
    proc = subprocess.run([sys.executable, "-c", code, *args], env=env, capture_output=True,
                          text=True)  # fmt: skip
    if proc.returncode:
        raise RuntimeError(proc.stderr[-3000:])
    return json.loads(proc.stdout.strip().splitlines()[-1])


def worker_peaks(stats: dict) -> dict[int, float]:
    """Per worker process: the highest peak RSS (MiB) any of its tasks reached."""
    out: dict[int, float] = {}
    for m in stats["prepare_memory"] + stats["replay_memory"]:
        out[m["pid"]] = max(out.get(m["pid"], 0.0), m["rss_peak_kib"] / 1024)
    return out


def measure(events: int, streams: int, shards: int, folder: Path) -> dict:
    from memlens.trace.generate import generate_simple
    from memlens.trace.io import write_trace

    trace = folder / f"t{events}.jsonl"
    if not trace.exists():
        write_trace(trace, generate_simple(seed=0, streams=streams,
                                           events_per_stream=events // streams))  # fmt: skip
    args = [f"trace={trace}", *SETTINGS]
    one = run_python(SINGLE, [str(folder / f"one{events}"), *args],
                     tempfile.mkdtemp(dir=folder))  # fmt: skip
    many = run_python(SHARDED, [str(folder / f"ray{events}"), *args, f"shards={shards}",
                                "backend=ray"], tempfile.mkdtemp(dir=folder))  # fmt: skip
    a = json.loads((folder / f"one{events}" / "metrics.json").read_text())
    b = json.loads((folder / f"ray{events}" / "metrics.json").read_text())
    same = all(a[k] == b[k] for k in a if k not in ("timing", "git_commit"))
    phases = {k: round(v, 2) for k, v in many.items() if k.endswith("_s")}
    return {
        "events": events, "streams": streams, "shards": shards, "same_metrics": same,
        "single": {"wall_s": round(one["wall_s"], 2), "peak_mib": round(one["peak_kib"] / 1024),
                   "events_per_s": round(events / one["wall_s"])},
        "sharded": {"phases_s": phases,
                    "driver_peak_mib": {k: round(v / 1024) for k, v in
                                        many["driver_peak_kib"].items()},
                    "worker_peak_mib": sorted(round(v) for v in worker_peaks(many).values()),
                    "events_per_s": round(events / many["wall_s"])},
    }  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--events", type=int, nargs="+", default=[1_000_000])
    ap.add_argument("--streams", type=int, default=500)
    ap.add_argument("--shards", type=int, default=2)
    ap.add_argument("--folder", default=None, help="where traces and runs go (default: a temp)")
    ap.add_argument("--out", default=str(HERE / "results" / "bench_shard.json"))
    args = ap.parse_args()
    folder = Path(args.folder or tempfile.mkdtemp(prefix="bench-shard-", dir="/tmp"))
    folder.mkdir(parents=True, exist_ok=True)
    rows = []
    for n in args.events:
        started = time.perf_counter()
        rows.append(measure(n, args.streams, args.shards, folder))
        rows[-1]["bench_s"] = round(time.perf_counter() - started)
        print(json.dumps(rows[-1]), flush=True)
    Path(args.out).write_text(json.dumps(rows, indent=1) + "\n")


if __name__ == "__main__":
    main()
