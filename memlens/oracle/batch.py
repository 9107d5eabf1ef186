"""Solve the oracle for every budget of a sweep once, before its jobs, on every core.

Every job of ``memlens compare`` reports the oracle's bounds at its budget, and the ``oracle``
row replays its plan; ten policies at one budget all need the same solve.  Left to the jobs,
two workers starting jobs of the same budget at once would both solve it.  So the sweep calls
:func:`presolve` first: one task per (trace, budget), spread over the worker processes, each
storing its result in the on-disk oracle cache (``memlens.oracle.cache``), where every job then
finds it; the results also go into this process's memo.  With ``oracle.cache: false`` there is
nothing the workers could share, so the jobs solve for themselves as before.
"""

from __future__ import annotations

from dataclasses import replace

from memlens._util.parallel import run_parallel
from memlens.oracle import cache
from memlens.oracle.solve import _MEMO, OracleSettings, solve


def _solve_one(task: tuple) -> object:
    path, trace_cache, budget, demand_fetch, settings = task
    from memlens.trace.cache import load_trace_cached

    trace = load_trace_cached(path, enabled=trace_cache)
    return solve(trace, budget, demand_fetch, settings)


def presolve(traces: dict[str, object], trace_cache: bool, budgets: list[int],
             demand_fetch: bool, settings: OracleSettings, n_workers: int,
             progress: bool | None = None) -> int:  # fmt: skip
    """Solve every (trace path -> Trace, budget) not cached yet; returns how many were solved."""
    if not settings.enabled or not settings.cache:
        return 0
    where = cache.directory(settings.cache_dir)
    todo = []
    for path, trace in traces.items():
        for budget in budgets:
            key = cache.key(trace, int(budget), bool(demand_fetch), settings.solver_key())
            if key not in _MEMO and not cache.exists(where, key):
                todo.append(((path, trace_cache, int(budget), bool(demand_fetch), settings), key))
    tasks = [t for t, _ in todo]
    workers = max(1, min(n_workers, len(tasks)))
    for i, result in run_parallel(_solve_one, tasks, workers, progress, label="oracle"):
        _MEMO[todo[i][1]] = replace(result, from_cache=False)
    return len(tasks)
