"""Solve the oracle for every budget of a sweep once, before its jobs, on every core.

Every job of ``memlens compare`` reports the oracle's bounds at its budget, and the ``oracle``
row replays its plan; ten policies at one budget all need the same solve.  Left to the jobs,
two workers starting jobs of the same budget at once would both solve it.  So the sweep calls
:func:`presolve` first, spread over the worker processes.  The streams of one (trace, budget)
are solved independently (``memlens.oracle.solve.stream_bounds``), so each (trace, budget) is
cut into chunks of consecutive streams, one task each: on many short streams one budget (the
smallest, where most streams need HiGHS) no longer holds one core while the other waits
(issue 34).  This process joins each budget's chunks in stream order, replays the plans
(``finish``); a second round spreads the integer programs of the streams whose replay fell short
of the LP bound (``close_gaps``) over the workers the same way; then it stores the result in the on-disk oracle cache (``memlens.oracle.cache``), where
every job then finds it, and in its memo.  The numbers do not depend on the chunks: every
stream's solve is the same deterministic computation (batched by windows of streams that a
chunk or piece never splits).  With ``oracle.cache: false`` there is
nothing the workers could share, so the jobs solve for themselves as before.
"""

from __future__ import annotations

import time

from memlens._util.parallel import run_parallel
from memlens.oracle import cache
from memlens.oracle.proofs import proof_window
from memlens.oracle.solve import (
    _MEMO,
    OracleSettings,
    apply_closed,
    close_gaps,
    finish,
    open_gaps,
    stream_bounds,
)

#: Chunks per worker and (trace, budget): small enough to balance uneven budgets, large enough
#: that a task's trace load and start-up stay small beside its solves.
CHUNKS_PER_WORKER = 4
_TRACE: dict[tuple[str, bool], object] = {}  # a worker's last trace, for its next chunk


def _trace(path: str, trace_cache: bool):
    from memlens.trace.cache import load_trace_cached

    if (path, trace_cache) not in _TRACE:
        _TRACE.clear()
        _TRACE[(path, trace_cache)] = load_trace_cached(path, enabled=trace_cache)
    return _TRACE[(path, trace_cache)]


def keep_trace(path: str, trace_cache: bool, trace) -> None:
    """Give this worker's chunks a trace it holds already (a sweep's worker started ahead has
    parsed it: ``memlens.runs.sweep.warm_worker``), rather than read it a second time and
    hold two copies of it (1.1 s and 200 MB per worker on 5,800 streams)."""
    _TRACE.clear()
    _TRACE[(path, trace_cache)] = trace


def _solve_chunk(task: tuple) -> tuple:
    path, trace_cache, budget, demand_fetch, settings, lo, hi = task
    start = time.perf_counter()
    trace = _trace(path, trace_cache)
    parts = stream_bounds(trace, budget, demand_fetch, settings, range(lo, hi))
    return parts, time.perf_counter() - start


def chunks(n_streams: int, n_workers: int, window: int = 1) -> list[tuple[int, int]]:
    """Consecutive stream ranges covering ``0..n_streams`` (one when there is one worker),
    each starting and ending on a multiple of ``window`` (or at the end): the oracle batches
    small streams' LPs by windows (``memlens.oracle.solve.stream_bounds``), so a window must
    never be split between two chunks."""
    window = max(1, int(window))
    n_windows = -(-n_streams // window)
    n = 1 if n_workers <= 1 else max(1, min(n_windows, n_workers * CHUNKS_PER_WORKER))
    bounds = [min(n_streams, round(k * n_windows / n) * window) for k in range(n + 1)]
    return [(a, b) for a, b in zip(bounds, bounds[1:], strict=False) if b > a] or [(0, 0)]


def _close_chunk(task: tuple) -> tuple:
    path, trace_cache, budget, demand_fetch, settings, streams, lowers = task
    start = time.perf_counter()
    trace = _trace(path, trace_cache)
    closed = close_gaps(trace, budget, demand_fetch, settings, streams, lowers)
    return closed, time.perf_counter() - start


def _pieces(items: list[int], n_workers: int, window: int = 1) -> list[list[int]]:
    """Streams ``items`` (ascending) cut into at most ``n_workers * CHUNKS_PER_WORKER`` runs
    of consecutive ones, never between two streams of one window of ``window`` (``close_gaps``
    batches its LP proofs by proof window: ``memlens.oracle.proofs.proof_window``)."""
    if not items:
        return []
    window = max(1, int(window))
    starts = [k for k, s in enumerate(items) if k == 0 or s // window != items[k - 1] // window]
    n = max(1, min(len(starts), n_workers * CHUNKS_PER_WORKER))
    cuts = [starts[round(k * len(starts) / n)] for k in range(n)] + [len(items)]
    return [items[a:b] for a, b in zip(cuts, cuts[1:], strict=False) if b > a]


def _todo(traces: dict, budgets: list[int], demand_fetch: bool, settings, where) -> list:
    out = []  # (path, budget, key)
    for path, trace in traces.items():
        for budget in budgets:
            key = cache.key(trace, int(budget), bool(demand_fetch), settings.solver_key())
            if key not in _MEMO and not cache.exists(where, key):
                out.append((path, int(budget), key))
    return out


def _lp_round(traces, trace_cache, todo, demand_fetch, settings, n_workers, progress) -> list:
    """Every (trace, budget)'s LP bounds and replayed plans (``finish``), its streams cut into
    chunks over the workers; one OracleResult per entry of ``todo``."""
    tasks, owner = [], []
    for k, (path, budget, _) in enumerate(todo):
        for lo, hi in chunks(traces[path].n_streams, n_workers, settings.batch_streams or 1):
            tasks.append((path, trace_cache, budget, bool(demand_fetch), settings, lo, hi))
            owner.append(k)
    parts: dict[int, dict[int, tuple]] = {k: {} for k in range(len(todo))}
    results: list = [None] * len(todo)
    workers = max(1, min(n_workers, len(tasks)))
    for i, (chunk, wall) in run_parallel(_solve_chunk, tasks, workers, progress, label="oracle"):
        parts[owner[i]][i] = (chunk, wall)
        if len(parts[owner[i]]) == owner.count(owner[i]):  # every chunk of this budget is in
            path, budget, _ = todo[owner[i]]
            done = [parts[owner[i]][j] for j in sorted(parts[owner[i]])]
            joined = tuple([x for c, _ in done for x in c[f]] for f in range(3))
            start = time.perf_counter()
            result = finish(traces[path], budget, bool(demand_fetch), joined, 0.0)
            result.wall_s = sum(w for _, w in done) + time.perf_counter() - start
            results[owner[i]] = result
            parts[owner[i]] = {}  # free the chunks' plans
    return results


def _milp_round(traces, trace_cache, todo, results, demand_fetch, settings, n_workers,
                progress) -> None:  # fmt: skip
    """The integer programs (``close_gaps``) of every result's open gaps, over the workers,
    each result then completed by ``apply_closed``."""
    tasks, owner = [], []
    for k, ((path, budget, _), result) in enumerate(zip(todo, results, strict=True)):
        window = proof_window(settings.batch_streams)
        for piece in _pieces(open_gaps(result, settings), n_workers, window):
            lowers = [result.streams[s].lower for s in piece]
            tasks.append((path, trace_cache, budget, bool(demand_fetch), settings, piece, lowers))
            owner.append(k)
    closed: dict[int, list] = {k: [] for k in range(len(todo))}
    workers = max(1, min(n_workers, len(tasks)))
    for i, (part, wall) in run_parallel(_close_chunk, tasks, workers, progress, label="oracle"):
        closed[owner[i]].extend(part)
        results[owner[i]].wall_s += wall
    for k, (path, _, _) in enumerate(todo):
        start = time.perf_counter()
        apply_closed(traces[path], results[k], sorted(closed[k], key=lambda c: c[0]))
        results[k].wall_s += time.perf_counter() - start


def presolve(traces: dict[str, object], trace_cache: bool, budgets: list[int],
             demand_fetch: bool, settings: OracleSettings, n_workers: int,
             progress: bool | None = None) -> int:  # fmt: skip
    """Solve every (trace path -> Trace, budget) not cached yet; returns how many were solved.

    Two rounds over the workers: every budget's LPs and replays first, then the integer
    programs of the streams the replays left short of their LP bound (``open_gaps``)."""
    if not settings.enabled or not settings.cache:
        return 0
    where = cache.directory(settings.cache_dir)
    todo = _todo(traces, budgets, demand_fetch, settings, where)
    results = _lp_round(traces, trace_cache, todo, demand_fetch, settings, n_workers, progress)
    _milp_round(traces, trace_cache, todo, results, demand_fetch, settings, n_workers, progress)
    for (_, _, key), result in zip(todo, results, strict=True):
        cache.store(where, key, result)
        _MEMO[key] = result
    return len(todo)
