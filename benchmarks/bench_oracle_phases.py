"""Where the oracle's time goes on one trace, phase by phase, and its bounds for an A/B diff.

    .venv/bin/python benchmarks/bench_oracle_phases.py TRACE --streams 1500 --budgets 512 1024 \
        --out /tmp/orc-bench/before.json
    .venv/bin/python benchmarks/bench_oracle_phases.py TRACE --streams 1500 --budgets 512 1024 \
        --out /tmp/orc-bench/after.json --against /tmp/orc-bench/before.json

For the first ``--streams`` streams of TRACE (read through the parsed-trace cache), at each
budget, what ``memlens.oracle.solve`` does without its disk cache, timed per phase: the LP
stage (``stream_bounds``), the replays (``finish``), and the integer programs
(``close_gaps``: its ``none_reaches`` / ``none_reaches_chain`` proofs and ``milp_schedule``
branch and bounds, counted and timed separately), then the replay of their schedules (``apply_closed``).  ``--out``
writes every stream's bounds and methods; ``--against`` counts the streams whose bounds or
methods differ from an earlier run's file (an optimisation that must not change the numbers
must print 0 there).  Warmed up first on 64 streams, untimed (scipy's import, the compiled
kernels' first calls).  The machine is shared: the load average is printed with each budget.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import time
from contextlib import contextmanager
from pathlib import Path

import numpy as np

from memlens.oracle import OracleSettings, bounds
from memlens.oracle.result import StreamBound
from memlens.trace.cache import load_trace_cached

solve = importlib.import_module("memlens.oracle.solve")  # the package re-exports solve()


@contextmanager
def timed(name: str, totals: dict):
    """Count and time every call of ``bounds.<name>`` as ``solve`` makes it."""
    inner = getattr(bounds, name)
    totals[name] = [0, 0.0]

    def wrapper(*args, **kwargs):
        t0 = time.perf_counter()
        try:
            return inner(*args, **kwargs)
        finally:
            totals[name][0] += 1
            totals[name][1] += time.perf_counter() - t0

    setattr(solve, name, wrapper)
    try:
        yield
    finally:
        setattr(solve, name, inner)


def one_budget(trace, budget: int, streams: range, settings: OracleSettings) -> tuple[dict, list]:
    """The phases' seconds and call counts, and every stream's (upper, lower, methods)."""
    totals: dict = {}
    t0 = time.perf_counter()
    parts = solve.stream_bounds(trace, budget, False, settings, streams)
    t1 = time.perf_counter()
    # finish replays every stream of the trace: the streams outside the range get the empty
    # plan and a bound no replay reaches, which keeps them out of open_gaps (method relaxed)
    bounds_, cands, planned = parts
    pad = trace.n_streams - len(bounds_)
    empty = np.zeros((0, 2), dtype=np.int64)
    outside = [StreamBound(upper=2**62, lower=0, references=0, upper_method="relaxed",
                           lower_method="belady", gaps=0, solve_s=0.0) for _ in range(pad)]  # fmt: skip
    parts = (bounds_ + outside, cands + [[empty, empty]] * pad, planned + [[0, 0]] * pad)
    result = solve.finish(trace, budget, False, parts, 0.0)
    t2 = time.perf_counter()
    gaps = [s for s in solve.open_gaps(result, settings) if s < streams.stop]
    lowers = [result.streams[s].lower for s in gaps]
    with timed("none_reaches", totals), timed("none_reaches_chain", totals), \
            timed("milp_schedule", totals):  # fmt: skip
        closed = solve.close_gaps(trace, budget, False, settings, gaps, lowers)
    t3 = time.perf_counter()
    solve.apply_closed(trace, result, closed)
    t4 = time.perf_counter()
    phases = {"lp_stage_s": t1 - t0, "replay_s": t2 - t1, "close_gaps_s": t3 - t2,
              "apply_closed_s": t4 - t3, "total_s": t4 - t0}  # fmt: skip
    for name, (n, s) in totals.items():
        phases[f"{name}_n"], phases[f"{name}_s"] = n, s
    rows = [
        [b.upper, b.lower, b.upper_method, b.lower_method] for b in result.streams[: len(streams)]
    ]
    return phases, rows


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("trace")
    p.add_argument("--streams", type=int, default=1500)
    p.add_argument("--budgets", type=int, nargs="+", default=[512, 1024])
    p.add_argument("--out", type=Path, help="write every stream's bounds here (JSON)")
    p.add_argument("--against", type=Path, help="an earlier --out file to compare bounds with")
    args = p.parse_args()
    trace = load_trace_cached(args.trace, enabled=True)
    streams = range(0, min(args.streams, trace.n_streams))
    settings = OracleSettings(cache=False)
    before = json.loads(args.against.read_text()) if args.against else None
    out = {}
    # not timed: scipy's import and the compiled kernels' first calls
    one_budget(trace, args.budgets[0], range(0, min(64, trace.n_streams)), settings)
    print(f"{len(streams)} streams of {args.trace}")
    for budget in args.budgets:
        load = os.getloadavg()[0]
        phases, rows = one_budget(trace, budget, streams, settings)
        out[str(budget)] = {"phases": phases, "bounds": rows, "load": load}
        line = ", ".join(f"{k} {v:.2f}" if isinstance(v, float) else f"{k} {v}"
                         for k, v in phases.items())  # fmt: skip
        sums = sum(r[0] for r in rows), sum(r[1] for r in rows)
        print(f"budget {budget} (load {load:.1f}): {line}; sum upper {sums[0]}, lower {sums[1]}")
        if before and str(budget) in before:
            old = before[str(budget)]["bounds"]
            differ = sum(a != b for a, b in zip(old, rows, strict=True))
            print(f"  streams whose bounds or methods differ from {args.against}: {differ}")
    if args.out:
        args.out.write_text(json.dumps(out))


if __name__ == "__main__":
    main()
