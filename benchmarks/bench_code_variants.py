"""The two code variants that gained a compiled kernel (issue 28): reference engine and kernel.

    .venv/bin/python benchmarks/bench_code_variants.py --events-per-stream 20000 --budgets 1024 8192

MemoryBank ``variant=code`` (whole days; a day of 24 h and, so that the day changes within
the trace, of 36 s) and Generative Agents ``variant=code`` (the rank recency), on a trace of
``memlens.trace.generate.generate_simple`` (two streams).  Per budget: the wall time of the
whole ``simulate`` call on each engine, each after a warm-up replay (no compilation, no
per-trace preparation), the compiled loop alone (``SimResult.wall_s``), the evictions, and
whether the two results are the same (``memlens.testing.same_result``: every field, the move
log included).
Wall clock on a shared machine: the load average is printed.
"""

from __future__ import annotations

import argparse
import os
import time

from memlens.policies.generative_agents import GenerativeAgents
from memlens.policies.memorybank import MemoryBank

from memlens.simulator import simulate
from memlens.testing import same_result
from memlens.trace.generate import generate_simple
from memlens.trace.io import trace_from_events

POLICIES = {
    "memorybank code, day 24 h": lambda: MemoryBank(variant="code"),
    "memorybank code, day 36 s": lambda: MemoryBank(variant="code", time_unit_hours=0.01),
    "generative_agents code (rank)": lambda: GenerativeAgents(variant="code"),
}


def timed(trace, make, budget: int, engine: str):
    """(result, wall seconds of the whole ``simulate`` call)."""
    start = time.perf_counter()
    res = simulate(trace, make(), budget, engine=engine, progress=False)
    return res, time.perf_counter() - start


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--events-per-stream", type=int, default=20000)
    p.add_argument("--budgets", type=int, nargs="+", default=[1024, 8192])
    args = p.parse_args()
    events = generate_simple(streams=2, events_per_stream=args.events_per_stream, pin_rate=0.02,
                             seed=7)  # fmt: skip
    trace = trace_from_events(list(events))
    print(f"{len(trace.ev_t)} events; load average {os.getloadavg()[0]:.1f}")
    print("| policy | budget | reference s | kernel s | loop s | evictions | same |")
    print("|---|---:|---:|---:|---:|---:|---|")
    for name, make in POLICIES.items():
        for budget in args.budgets:
            timed(trace, make, budget, "reference")  # warm-up: per-trace TF-IDF, say
            ref, ref_s = timed(trace, make, budget, "reference")
            timed(trace, make, budget, "fast")  # warm-up: compilation, per-trace arrays
            fast, fast_s = timed(trace, make, budget, "fast")
            same = same_result(ref, fast) is None
            print(f"| {name} | {budget} | {ref_s:.2f} | {fast_s:.3f} | {fast.wall_s:.3f} | "
                  f"{int(fast.evictions.sum())} | {same} |")  # fmt: skip


if __name__ == "__main__":
    main()
