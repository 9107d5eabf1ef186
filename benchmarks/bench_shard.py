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


def run_python(code: str, args: list[str], cache: str, limit_gib: float = 0) -> dict:
    """Run ``code`` in a fresh process; with ``limit_gib`` its address space is capped there
    (RLIMIT_AS), so a run that cannot fit this machine fails with a MemoryError instead of
    taking the machine down: the result then says so and how long it ran."""
    env = {**os.environ, "MEMLENS_CACHE": cache, "PYTHONWARNINGS": "ignore"}
    cap = int(limit_gib * 2**30)

    def limit() -> None:
        import resource

        resource.setrlimit(resource.RLIMIT_AS, (cap, cap))

    started = time.perf_counter()
    proc = subprocess.run([sys.executable, "-c", code, *args], env=env, capture_output=True,
                          text=True, preexec_fn=limit if cap else None)  # fmt: skip
    if proc.returncode and cap and "MemoryError" in proc.stderr:
        return {"did_not_fit_gib": limit_gib, "failed_after_s": time.perf_counter() - started,
                "error": proc.stderr.strip().splitlines()[-1][-300:]}  # fmt: skip
    if proc.returncode:
        raise RuntimeError(proc.stderr[-3000:])
    return json.loads(proc.stdout.strip().splitlines()[-1])


def worker_peaks(stats: dict) -> dict[int, float]:
    """Per worker process: the highest peak RSS (MiB) any of its tasks reached."""
    out: dict[int, float] = {}
    for m in stats["prepare_memory"] + stats["replay_memory"]:
        out[m["pid"]] = max(out.get(m["pid"], 0.0), m["rss_peak_kib"] / 1024)
    return out


def single_row(one: dict, events: int) -> dict:
    if "did_not_fit_gib" in one:
        return {k: round(v, 2) if isinstance(v, float) else v for k, v in one.items()}
    return {"wall_s": round(one["wall_s"], 2), "peak_mib": round(one["peak_kib"] / 1024),
            "events_per_s": round(events / one["wall_s"])}  # fmt: skip


def rename(block: bytes, k: int) -> bytes:
    """Copy ``k``'s names in a block of ``simple`` trace lines: every string value that starts
    with ``s`` (stream names ``sN``, ids and needs ``sN-...``) gets the prefix ``ck_``, and
    ``task-sN`` becomes ``task-ck_sN``.  Plain byte replacements (a regular expression
    here ran at 2 MB/s): the one key that starts with ``s`` and the texts are put back."""
    tag = b"c%d_s" % k
    block = block.replace(b'"s', b'"' + tag).replace(b'"' + tag + b'tream":', b'"stream":')
    block = block.replace(b'"text":"' + tag, b'"text":"s')
    return block.replace(b'"task-s', b'"task-' + tag)


def replicate(base: Path, copies: int, out: Path) -> None:
    """Write ``copies`` copies of the trace ``base`` one after another into ``out``, copy k's
    streams, ids, needs and tasks renamed ``ck_sN`` (:func:`rename`: no two copies share a
    stream or an id).  Generating 50M events takes the Python generator about an hour on one
    core; renamed copies of a 5M-event draw give the same per-stream shape with ``copies``
    times the streams, in minutes."""
    tmp = out.with_suffix(".part")
    with open(tmp, "wb") as dst:
        for k in range(copies):
            with open(base, "rb") as src:
                while block := src.readlines(1 << 26):
                    dst.write(rename(b"".join(block), k))
    tmp.replace(out)


def make_trace(folder: Path, events: int, streams: int, copies: int) -> Path:
    from memlens.trace.generate import generate_simple
    from memlens.trace.io import write_trace

    trace = folder / f"t{events}.jsonl"
    if trace.exists():
        return trace
    base = folder / f"t{events // copies}.jsonl" if copies > 1 else trace
    if not base.exists():
        write_trace(base, generate_simple(seed=0, streams=streams,
                                          events_per_stream=events // copies // streams))  # fmt: skip
    if copies > 1:
        replicate(base, copies, trace)
    return trace


def measure(events: int, streams: int, shards: int, folder: Path, limit_gib: float,
            copies: int = 1) -> dict:  # fmt: skip
    trace = make_trace(folder, events, streams, copies)
    args = [f"trace={trace}", *SETTINGS]
    many = run_python(SHARDED, [str(folder / f"ray{events}"), *args, f"shards={shards}",
                                "backend=ray"], tempfile.mkdtemp(dir=folder))  # fmt: skip
    print(json.dumps({"sharded": many.get("wall_s")}), flush=True)
    one = run_python(SINGLE, [str(folder / f"one{events}"), *args],
                     tempfile.mkdtemp(dir=folder), limit_gib)  # fmt: skip
    same = None  # no single-process metrics to compare with when it did not fit
    if "did_not_fit_gib" not in one:
        a = json.loads((folder / f"one{events}" / "metrics.json").read_text())
        b = json.loads((folder / f"ray{events}" / "metrics.json").read_text())
        same = all(a[k] == b[k] for k in a if k not in ("timing", "git_commit"))
    phases = {k: round(v, 2) for k, v in many.items() if k.endswith("_s")}
    return {
        "events": events, "streams": streams * copies, "copies": copies, "shards": shards,
        "same_metrics": same,
        "single": single_row(one, events),
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
    ap.add_argument("--copies", type=int, default=1,
                    help="draw events/COPIES and write COPIES renamed copies (see replicate)")  # fmt: skip
    ap.add_argument(
        "--single-limit-gib",
        type=float,
        default=0,
        help="cap the single-process run's address space (0: no cap)",
    )
    ap.add_argument("--folder", default=None, help="where traces and runs go (default: a temp)")
    ap.add_argument("--out", default=str(HERE / "results" / "bench_shard.json"))
    args = ap.parse_args()
    folder = Path(args.folder or tempfile.mkdtemp(prefix="bench-shard-", dir="/tmp"))
    folder.mkdir(parents=True, exist_ok=True)
    rows = []
    for n in args.events:
        started = time.perf_counter()
        rows.append(measure(n, args.streams, args.shards, folder, args.single_limit_gib,
                            args.copies))  # fmt: skip
        rows[-1]["bench_s"] = round(time.perf_counter() - started)
        print(json.dumps(rows[-1]), flush=True)
        Path(args.out).write_text(json.dumps(rows, indent=1) + "\n")


if __name__ == "__main__":
    main()
