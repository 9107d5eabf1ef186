"""The oracle's whole solve on many short streams, with its integer programs counted (issue 34).

    .venv/bin/python benchmarks/bench_oracle_gaps.py TRACE --budgets 512 1024

For each budget: the wall time of ``memlens.oracle.solve`` (no cache), the summed upper and
lower bounds, and how many HiGHS integer programs ran: branch and bound
(``milp_schedule``) and, where this code has it, the feasibility proof (``none_reaches``).
Run it on an older checkout (``git archive``, the same command) for the "before" row: the
bounds must be equal or, for the upper one, tighter.  The trace is read whole (keep it to a
few hundred streams: ``memlens data generate archetype=agent streams=640
events_per_stream=150 seed=340 out=agent640.jsonl.gz``).
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import time

from memlens.oracle import OracleSettings, clear_memo, solve
from memlens.trace.io import load_trace


def counting() -> dict[str, int]:
    """Wrap the solver's integer programs (whichever this checkout has) with call counters."""
    module = importlib.import_module("memlens.oracle.solve")
    calls: dict[str, int] = {}
    for name in ("milp_schedule", "none_reaches"):
        real = getattr(module, name, None)
        if real is None:
            continue
        calls[name] = 0

        def counted(*args, _real=real, _name=name):
            calls[_name] += 1
            return _real(*args)

        setattr(module, name, counted)
    return calls


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("trace")
    p.add_argument("--budgets", type=int, nargs="+", default=[512, 1024])
    args = p.parse_args()
    trace = load_trace(args.trace)
    solve(trace, max(args.budgets), False, OracleSettings(cache=False))  # compile, import HiGHS
    calls = counting()
    print(f"{trace.n_streams} streams; load average {os.getloadavg()[0]:.1f}")
    for budget in args.budgets:
        clear_memo()
        for name in calls:
            calls[name] = 0
        start = time.perf_counter()
        r = solve(trace, budget, False, OracleSettings(cache=False))
        row = {"budget": budget, "wall_s": round(time.perf_counter() - start, 2),
               "upper": r.upper, "lower": r.lower, **calls}  # fmt: skip
        print(json.dumps(row), flush=True)


if __name__ == "__main__":
    main()
