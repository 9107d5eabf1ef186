"""Peak memory of a window/LRU ``memlens simulate`` on large traces: bytes per event.

The claim under test: a replay with a queue policy holds the trace in compact columns, so its
peak RSS grows by at most ~150 bytes per event and a 50,000,000-event trace replays in under
8 GB.  Each case is a fresh ``memlens`` process (its peak RSS is its own ``ru_maxrss``, read
with ``os.wait4``), on a ``simple`` trace of ``n`` events (8 streams, seed 0) written
uncompressed by ``memlens data generate`` (that process's peak RSS is reported too: the
generator streams).  For every policy a case runs three ways:

* ``off``: ``trace_cache=false``, the trace parsed from JSON Lines;
* ``cold``: cache on (``MEMLENS_CACHE`` a fresh temporary folder), parse and store the entry;
* ``warm``: the same cache again, the trace served from the entry.

The oracle analysis is switched off (``oracle.enabled=false``; ``--oracle`` keeps it): it solves
a linear program per stream whose memory and time (hundreds of bytes and of microseconds per
event) are the oracle's, not the replay's, and would hide what this benchmark measures.

    .venv/bin/python benchmarks/bench_memory.py                        # 1e4, 1e6, 5e6 events
    .venv/bin/python benchmarks/bench_memory.py --big                  # plus 5e7 (minutes)
    .venv/bin/python benchmarks/bench_memory.py --traces /tmp/mt       # keep/reuse the traces
    .venv/bin/python benchmarks/bench_memory.py --save after.json --before before.json \\
        --out benchmarks/results/memory.md

``bytes/event`` is peak RSS divided by events (interpreter and libraries included, ~150 MB).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

MEMLENS = str(Path(sys.executable).parent / "memlens")
MODES = ("off", "cold", "warm")
STREAMS = 8
BUDGET = 4096


def child_rss(cmd: list[str], env: dict | None = None, cwd: str | None = None) -> dict:
    """Run ``cmd``; its wall time and its own peak RSS (``ru_maxrss`` from ``os.wait4``)."""
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        t0 = time.perf_counter()
        proc = subprocess.Popen(cmd, env=env, cwd=cwd, stdout=out, stderr=err)
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - t0
        proc.returncode = code = os.waitstatus_to_exitcode(status)
        if code:
            out.seek(0)
            err.seek(0)
            raise SystemExit(f"{' '.join(cmd)} failed ({code}):\n{out.read().decode()}\n"
                             f"{err.read().decode()[-4000:]}")  # fmt: skip
    return {"wall_s": wall, "peak_rss_kb": usage.ru_maxrss}


def generate(path: Path, n: int) -> dict:
    """The ``simple`` trace of ``n`` events at ``path`` (reused if it is already there)."""
    if path.exists():
        return {"wall_s": None, "peak_rss_kb": None, "reused": True}
    cmd = [MEMLENS, "data", "generate", "archetype=simple", "seed=0", f"streams={STREAMS}",
           f"events_per_stream={n // STREAMS}", f"out={path}"]  # fmt: skip
    return child_rss(cmd, cwd=str(path.parent))


def simulate(trace: Path, policy: str, cache: Path | None, run_dir: Path, extra: list[str]):
    env = {**os.environ, "PYTHONWARNINGS": "ignore"}
    if cache is not None:
        env["MEMLENS_CACHE"] = str(cache)
    cmd = [MEMLENS, "simulate", f"trace={trace}", f"policy={policy}", f"budget={BUDGET}",
           "mlflow.enabled=false", "progress=false", f"trace_cache={cache is not None}",
           f"hydra.run.dir={run_dir}", *extra]  # fmt: skip
    return child_rss(cmd, env=env, cwd=str(run_dir.parent))


def run_size(n: int, traces: Path, policies: list[str], extra: list[str],
             modes: tuple[str, ...] = MODES) -> list[dict]:  # fmt: skip
    trace = traces / f"simple-{n}.jsonl"
    gen = generate(trace, n)
    print(json.dumps({"generate": n, **gen}), flush=True)
    rows = []
    with tempfile.TemporaryDirectory(dir=traces) as tmp:
        cache = Path(tmp) / "cache"
        for policy in policies:
            for mode in modes:
                if mode == "cold":
                    shutil.rmtree(cache, ignore_errors=True)
                run_dir = Path(tmp) / f"run-{policy}-{mode}"
                res = simulate(trace, policy, None if mode == "off" else cache, run_dir, extra)
                shutil.rmtree(run_dir, ignore_errors=True)
                row = {"events": n, "policy": policy, "cache": mode, **res,
                       "bytes_per_event": res["peak_rss_kb"] * 1024 / n,
                       "generate_rss_kb": gen["peak_rss_kb"], "trace_mb": trace.stat().st_size / 2**20}  # fmt: skip
                rows.append(row)
                print(json.dumps(row), flush=True)
    return rows


def table(rows: list[dict]) -> str:
    """One row per case; ``marginal`` = (RSS - RSS of the smallest case) / (events - its events),
    the cost of one more event without the interpreter's and libraries' fixed ~400 MB."""
    base = {}
    for r in sorted(rows, key=lambda r: r["events"]):
        base.setdefault((r["policy"], r["cache"]), r)
    head = ("| events | policy | trace cache | wall s | peak RSS MiB | bytes/event | marginal "
            "bytes/event |\n|---:|---|---|---:|---:|---:|---:|")  # fmt: skip
    body = []
    for r in rows:
        b = base[(r["policy"], r["cache"])]
        extra = r["events"] - b["events"]
        marginal = f"{(r['peak_rss_kb'] - b['peak_rss_kb']) * 1024 / extra:,.0f}" if extra else "-"
        body.append(f"| {r['events']:,} | {r['policy']} | {r['cache']} | {r['wall_s']:.1f} | "
                    f"{r['peak_rss_kb'] / 1024:,.0f} | {r['bytes_per_event']:,.0f} | {marginal} |")  # fmt: skip
    return "\n".join([head, *body])


def render(rows: list[dict], before: list[dict] | None, cmd: str, extra: list[str]) -> str:
    parts = [
        "# Peak memory of a window/LRU replay (benchmarks/bench_memory.py)\n",
        f"Command: `{cmd}`  ",
        f"Machine: {platform.machine()}, {os.cpu_count()} cores (shared), Python "
        f"{platform.python_version()}, {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}  ",
        f"Trace: `memlens data generate archetype=simple seed=0 streams={STREAMS}` "
        f"(uncompressed JSON Lines); `memlens simulate policy=P budget={BUDGET} "
        f"mlflow.enabled=false {' '.join(extra)}`; peak RSS of the `memlens` process (`ru_maxrss` from `os.wait4`).  "
        "off = `trace_cache=false` (parse), cold = cache on, parse and store, warm = served "
        "from the cache.\n",
    ]
    if before:
        parts += ["## Before\n", table(before), "", "## After\n"]
    parts += [table(rows), ""]
    gens = {r["events"]: r["generate_rss_kb"] for r in rows if r.get("generate_rss_kb")}
    if gens:
        parts += ["Peak RSS of `memlens data generate archetype=simple` (this run): "
                  + ", ".join(f"{n:,} events: {kb / 1024:,.0f} MiB" for n, kb in gens.items())
                  + "\n"]  # fmt: skip
    return "\n".join(parts)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="10000,1000000,5000000")
    ap.add_argument("--big", action="store_true", help="also run one 50,000,000-event case")
    ap.add_argument("--policies", default="window,lru")
    ap.add_argument("--caches", default=",".join(MODES), help="which of off,cold,warm to run")
    ap.add_argument("--traces", default=None, help="keep (and reuse) generated traces here")
    ap.add_argument("--save", default=None, help="write this run's rows as JSON here")
    ap.add_argument("--before", default=None, help="rows (JSON) of an earlier run to show too")
    ap.add_argument("--out", default=None, help="write a markdown report here")
    ap.add_argument("--oracle", action="store_true", help="keep the oracle analysis on")
    ap.add_argument("extra", nargs="*", help="more overrides for memlens simulate")
    args = ap.parse_args()
    extra = args.extra if args.oracle else ["oracle.enabled=false", *args.extra]
    sizes = [int(n) for n in args.sizes.split(",")] + ([50_000_000] if args.big else [])
    keep = args.traces is not None
    traces = Path(args.traces or tempfile.mkdtemp(prefix="memlens-bench-"))
    traces.mkdir(parents=True, exist_ok=True)
    rows: list[dict] = []
    try:
        for n in sizes:
            rows += run_size(n, traces, args.policies.split(","), extra,
                             tuple(args.caches.split(",")))  # fmt: skip
    finally:
        if not keep:
            shutil.rmtree(traces, ignore_errors=True)
    if args.save:
        Path(args.save).write_text(json.dumps(rows, indent=1))
    before = json.loads(Path(args.before).read_text()) if args.before else None
    cmd = " ".join(["python", "benchmarks/bench_memory.py", *sys.argv[1:]])
    text = render(rows, before, cmd, extra)
    print(text)
    if args.out:
        Path(args.out).write_text(text)


if __name__ == "__main__":
    main()
