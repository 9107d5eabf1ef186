"""Throughput and peak memory of the synthetic archetypes, written streaming to disk.

Each case runs in a fresh subprocess so that its peak RSS (``VmHWM``) is its own.  The claim
under test: memory stays flat as the number of events grows (episodes are dropped when they
finish), so a 10,000,000-event trace costs about the same RSS as a 100,000-event one.  A case of
``n`` events is ``streams = n / events_per_stream`` at the archetype's default episode length.

    .venv/bin/python benchmarks/bench_generate.py                 # 1e5 and 1e6 per archetype
    .venv/bin/python benchmarks/bench_generate.py --big           # plus one 1e7 case
    .venv/bin/python benchmarks/bench_generate.py --out benchmarks/results/generate.md

Output traces go to a temporary directory and are deleted after each case.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

CHILD = r"""
import json, os, sys, time
from memlens.datasets.archetypes import GENERATORS
from memlens.trace.io import write_trace
name, n, out = sys.argv[1], int(sys.argv[2]), sys.argv[3]
per = GENERATORS[name]().events_per_stream  # default episode length; n events = streams x per
knobs = GENERATORS[name](seed=0, streams=max(1, n // per))
t0 = time.perf_counter()
lines = write_trace(out, knobs.events(), header={"generator": name})
wall = time.perf_counter() - t0
hwm = next(int(l.split()[1]) for l in open("/proc/self/status") if l.startswith("VmHWM"))
print(json.dumps({"lines": lines, "wall_s": wall, "peak_rss_kb": hwm, "bytes": os.path.getsize(out)}))
"""


def run_case(name: str, n: int, suffix: str) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, f"{name}.jsonl{suffix}")
        res = subprocess.run([sys.executable, "-c", CHILD, name, str(n), out],
                             capture_output=True, text=True, check=True)  # fmt: skip
        return {
            "archetype": name,
            "events": n,
            "format": f"jsonl{suffix}",
            **json.loads(res.stdout),
        }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="100000,1000000")
    ap.add_argument("--archetypes", default="support,coding,analysis")
    ap.add_argument("--big", action="store_true", help="also run one 10,000,000-event case")
    ap.add_argument("--big-archetype", default="coding")
    ap.add_argument("--out", default=None, help="write a markdown table here")
    args = ap.parse_args()
    cases = [(a, int(n), ".gz") for n in args.sizes.split(",") for a in args.archetypes.split(",")]
    if args.big:
        cases.append((args.big_archetype, 10_000_000, ".gz"))
    rows = []
    for name, n, suffix in cases:
        row = run_case(name, n, suffix)
        row["events_per_s"] = row["lines"] / row["wall_s"]
        rows.append(row)
        print(json.dumps(row), flush=True)
    header = ("| archetype | events | format | wall s | events/s | peak RSS MiB | file MiB |\n"
              "|---|---:|---|---:|---:|---:|---:|")  # fmt: skip
    lines = [
        f"| {r['archetype']} | {r['events']:,} | {r['format']} | {r['wall_s']:.1f} | "
        f"{r['events_per_s']:,.0f} | {r['peak_rss_kb'] / 1024:.0f} | {r['bytes'] / 2**20:.1f} |"
        for r in rows
    ]
    table = "\n".join([header, *lines])
    print(table)
    if args.out:
        from memlens._util.atomic import write_text

        cmd = " ".join(["python", "benchmarks/bench_generate.py", *sys.argv[1:]])
        text = (
            "# Synthetic trace generation: throughput and peak memory\n\n"
            f"Command: `{cmd}`  \n"
            f"Machine: {platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}, "
            f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}  \n"
            "Each case is a fresh process (peak RSS = its VmHWM) writing a gzip trace (level 9, "
            "`memlens.trace.io.write_trace`) with seed 0 and default knobs.\n\n"
            f"{table}\n"
        )
        write_text(Path(args.out), text)


if __name__ == "__main__":
    main()
