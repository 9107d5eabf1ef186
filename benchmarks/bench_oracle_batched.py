"""The oracle's per-stream bounds with small LPs batched (``oracle.batch_streams``) and alone.

    .venv/bin/python benchmarks/bench_oracle_batched.py TRACE --streams 640 --budgets 512 1024 4096

For the first ``--streams`` streams of TRACE, at each budget: the wall time of
``memlens.oracle.solve.stream_bounds`` with ``batch_streams=0`` (each stream's LP alone, as
before) and the default (windows of 64), and how many streams' upper and planned lower bounds
differ between the two.  The trace is read through the parsed-trace cache.
"""

from __future__ import annotations

import argparse
import os
import time

from memlens.oracle import OracleSettings
from memlens.oracle.solve import stream_bounds
from memlens.trace.cache import load_trace_cached


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("trace")
    p.add_argument("--streams", type=int, default=640)
    p.add_argument("--budgets", type=int, nargs="+", default=[512, 1024, 4096])
    args = p.parse_args()
    trace = load_trace_cached(args.trace, enabled=True)
    streams = range(0, min(args.streams, trace.n_streams))
    print(f"{len(streams)} streams of {args.trace}; load average {os.getloadavg()[0]:.1f}")
    print(
        "| budget | alone s | batched s | upper differs | lower differs | sum upper | sum lower |"
    )
    print("|---:|---:|---:|---:|---:|---:|---:|")
    for budget in args.budgets:
        runs = {}
        for width in (0, OracleSettings().batch_streams):
            start = time.perf_counter()
            bounds, _, _ = stream_bounds(trace, budget, False,
                                         OracleSettings(batch_streams=width, cache=False), streams)  # fmt: skip
            runs[width] = (time.perf_counter() - start, bounds)
        (t0, alone), (t1, batched) = runs.values()
        up = sum(a.upper != b.upper for a, b in zip(alone, batched, strict=True))
        lo = sum(a.lower != b.lower for a, b in zip(alone, batched, strict=True))
        print(f"| {budget} | {t0:.1f} | {t1:.1f} | {up} | {lo} | "
              f"{sum(a.upper for a in alone)} / {sum(b.upper for b in batched)} | "
              f"{sum(a.lower for a in alone)} / {sum(b.lower for b in batched)} |")  # fmt: skip


if __name__ == "__main__":
    main()
