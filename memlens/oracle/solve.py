"""Solve the oracle for one (trace, budget, demand_fetch): both bounds, per stream and summed.

Per stream:

* both bounds at once where the stream is short enough (method ``auto``; no alternatives, or
  alternatives without demand fetch; at most ``exact_max_states`` states): the integer program's optimum from the dynamic program
  of ``memlens.oracle.exact``, and its schedule; reported as ``exact``.  Otherwise:
* ``upper``: the LP bound (``memlens.oracle.bounds.lp_upper``) when the stream has at most
  ``lp_max_references`` references (or ``method: lp``), else the time-averaged relaxation
  (``relaxed_upper``).  Small streams (at most ``milp_max_gaps`` gaps) whose best replayed
  plan still falls short of the LP bound then run an integer program (:func:`close_gaps`):
  more rounds of cuts (``memlens.oracle.proofs``) or else HiGHS first proves, where it
  can, that no schedule plans one hit more than the replay scored (then the bounds meet;
  reported as ``milp`` either way), else HiGHS runs its branch and bound, whose dual bound replaces the
  LP bound when lower (the LP's integrality gap is most of the gap between the bounds).  Every
  LP is re-solved ``cut_rounds`` times with the cover cuts its optimum violates
  (``memlens.oracle.cuts``), which closes most of that integrality gap on long streams.  Which
  bound was used is reported as ``upper_method`` (``lp``, ``milp`` or ``relaxed``; ``milp``
  means closed after the LP stage, by HiGHS or by one more round of cuts: ``close_gaps``).
* ``lower``: the hits the simulator really gets replaying ``policy=oracle`` with the best of
  its plans: the rounded LP schedules, the empty plan (pure Belady-Size) and the branch and
  bound's incumbent where it ran.  The replay is done here with the
  reference simulator, so ``oracle_lower`` is by construction what ``policy=oracle`` scores.

Results are memoised in the process and cached on disk (``memlens.oracle.cache``), keyed by
the trace's content hash, its pins, the budget, demand fetch and the settings.
"""

from __future__ import annotations

import time
from dataclasses import replace
from functools import partial

import numpy as np

from memlens.oracle import cache
from memlens.oracle.bounds import (
    OracleSolveError,
    lp_candidates,
    lp_candidates_many,
    milp_schedule,
    none_reaches,
    none_reaches_chain,
    relaxed_upper,
)
from memlens.oracle.exact import exact_schedule
from memlens.oracle.model import build_model, keep_pairs, schedule_load_ok
from memlens.oracle.proofs import proof_window, settle
from memlens.oracle.quiet import silenced
from memlens.oracle.result import OracleResult, StreamBound
from memlens.oracle.rounding import round_schedule
from memlens.oracle.segments import segmented_lp_upper
from memlens.oracle.settings import METHODS, OracleSettings  # noqa: F401 - re-exported
from memlens.trace.model import Trace

_MEMO: dict[str, OracleResult] = {}


def clear_memo() -> None:
    """Forget the results memoised in this process (the disk cache is kept)."""
    _MEMO.clear()


def solve(
    trace: Trace, budget: int, demand_fetch: bool, settings: OracleSettings | None = None
) -> OracleResult:
    """Both bounds for every stream (memoised, then disk-cached, then computed)."""
    settings = settings or OracleSettings()
    key = cache.key(trace, int(budget), bool(demand_fetch), settings.solver_key())
    where = cache.directory(settings.cache_dir) if settings.cache else None
    if key in _MEMO:
        result = _MEMO[key]
        if where and not cache.exists(where, key):
            cache.store(where, key, result)
        return replace(result, from_cache=True)
    result = cache.load(where, key) if where else None
    if result is None:
        result = _compute(trace, int(budget), bool(demand_fetch), settings)
        if where:
            cache.store(where, key, result)
    _MEMO[key] = result
    return result


def _stream_hits(trace: Trace, need_hit: np.ndarray) -> np.ndarray:
    stream_of_ref = trace.req_stream[trace.need_request]
    return np.bincount(stream_of_ref, weights=need_hit, minlength=trace.n_streams).astype(np.int64)


def _replay(trace: Trace, plans: list[np.ndarray], budget: int, demand_fetch: bool) -> np.ndarray:
    from memlens.kernels.oracle import replay_plans  # compiled on first use

    res = replay_plans(trace, plans, budget, demand_fetch)
    return _stream_hits(trace, res.need_hit)


def _one_lp(model, settings: OracleSettings) -> bool:
    """Whether the stream's upper bound is one LP (not cut into segments)."""
    whole = model.n_references <= 4 * settings.segment_references and settings.method == "auto"
    return settings.method == "lp" or settings.segment_references == 0 or whole


def _fits(model, settings: OracleSettings) -> bool:
    """Whether the stream's LP is solved in closed form: every gap kept at once respects the
    capacity (so keeping everything is feasible, hence the LP's unique optimum: every chain
    interval is worth its depth, a strictly better use of its one unit than any shorter one).
    Its bound is then ``forced_hits + gaps`` and its rounding keeps every gap, exactly what
    HiGHS and ``round_schedule`` give (tests/oracle/test_oracle_fits.py), in microseconds
    instead of milliseconds: on many short streams at a large budget most streams fit.  Not
    for needs with alternatives (where keeping every alternative is one optimum of several)."""
    if model.has_groups or not _one_lp(model, settings):
        return False
    return schedule_load_ok(model, np.ones(model.n_gaps, dtype=bool))


def _upper(model, settings: OracleSettings, lp=None) -> tuple[int, list[np.ndarray], str, int]:
    """The stream's LP-based upper bound, the rounding's candidate priorities (the LP's
    fractional gap values, and for a cut stream a second set: ``memlens.oracle.segments``),
    its method and its number of segments.  ``lp``: its LP's (bound, values), already solved
    in a batch (:func:`_batched_lps`)."""
    solver = partial(lp_candidates, cut_rounds=settings.cut_rounds)
    if _one_lp(model, settings):
        upper, y = lp if lp is not None else solver(model)
        return upper, list(y), "lp", 1
    upper, priorities, n = segmented_lp_upper(model, settings.segment_references, solver,
                                              settings.n_jobs)  # fmt: skip
    return upper, priorities, ("lp" if n == 1 else "lp-segments"), n


def _uses_lp(model, settings: OracleSettings) -> bool:
    return settings.method in ("lp", "segmented") or (
        settings.method == "auto" and model.n_references <= settings.lp_max_references
    )


def _exact(model, settings: OracleSettings) -> np.ndarray | None:
    """The stream's integer optimum from ``memlens.oracle.exact`` (method ``auto`` only, where
    its dynamic program stays within ``exact_max_states``), or None: then the LP path."""
    if settings.method != "auto" or _fits(model, settings):
        return None
    return exact_schedule(model, settings.exact_max_states)


def _stream_bound(model, settings: OracleSettings, lp=None,
                  exact=None) -> tuple[StreamBound, list[np.ndarray]]:  # fmt: skip
    """Both bounds of one stream's model (the lower one as planned; replayed afterwards) and
    two candidate schedules: the best rounding of the uncut LP's values (what ``cut_rounds=0``
    plans) and the best of all; ``_compute`` keeps the second only where it replays better.
    ``lp``: the stream's LP (bound, values) when a batch solved it; ``exact``: its integer
    optimum's selection (:func:`_exact`), which makes both bounds that optimum."""
    use_lp = _uses_lp(model, settings)
    selected = np.zeros(model.n_gaps, dtype=bool)
    base = selected
    lower_method, upper_method, segments = "belady", "relaxed", 1
    if exact is not None:
        bound = model.planned_hits(exact)
        return StreamBound(upper=bound, lower=bound, references=model.n_references,
                           upper_method="exact", lower_method="exact", gaps=model.n_gaps,
                           solve_s=0.0, segments=1), [exact, exact]  # fmt: skip
    if use_lp and _fits(model, settings):
        everything = np.ones(model.n_gaps, dtype=bool)
        bound = model.planned_hits(everything)
        return StreamBound(upper=bound, lower=bound, references=model.n_references,
                           upper_method="lp", lower_method="lp-round", gaps=model.n_gaps,
                           solve_s=0.0, segments=1), [everything, everything]  # fmt: skip
    if use_lp:
        upper, priorities, upper_method, segments = _upper(model, settings, lp)
        rounded = []  # a stream whose cut round changed nothing has two equal candidates
        for k, p in enumerate(priorities):
            same = next((j for j in range(k) if np.array_equal(priorities[j], p)), None)
            rounded.append(round_schedule(model, p) if same is None else rounded[same])
        n_base = len(rounded) // 2 if settings.cut_rounds > 0 else len(rounded)
        base = max(rounded[:n_base], key=model.planned_hits)  # the first of equals
        selected = max(rounded, key=model.planned_hits)
        lower_method = "lp-round"
        if not (schedule_load_ok(model, selected) and schedule_load_ok(model, base)):
            raise OracleSolveError(
                f"stream {model.stream}: rounded schedule infeasible (oracle bug)"
            )
    else:
        upper = relaxed_upper(model)
    return StreamBound(upper=int(upper), lower=model.planned_hits(selected),
                        references=model.n_references, upper_method=upper_method,
                        lower_method=lower_method, gaps=model.n_gaps, solve_s=0.0,
                        segments=segments), [base, selected]  # fmt: skip


def _check_promises(trace: Trace, hits: np.ndarray, planned: list[int]) -> None:
    """A version 1 plan's replay scores at least what it planned (the oracle policy only adds
    hits to it); with alternatives the plan may count on a fetch of a non-first alternative
    (a relaxation, ``memlens.oracle.model``), so it is no promise there."""
    if trace.has_alternatives:
        return
    for s, promised in enumerate(planned):
        if hits[s] < promised:
            raise OracleSolveError(f"stream {s}: replay scored below its plan (oracle bug)")


def _lower_bounds(
    trace: Trace,
    bounds: list[StreamBound],
    candidates: list[list[np.ndarray]],
    planned: list[list[int]],
    budget: int,
    demand_fetch: bool,
) -> list[np.ndarray]:
    """Replay the plans and set each stream's ``lower`` to the best replay; returns the plans.

    Per stream, in this order, a plan replaces the kept one only where it scores strictly more:
    the uncut LP's schedule (``candidates[s][0]``), the empty plan (pure Belady-Size), the
    schedule from the cut LP's values (``candidates[s][1]``).  So cover cuts can only raise
    the replayed lower bound, and where they do not, the plan is the one ``cut_rounds=0``
    keeps."""
    empty = np.zeros((0, 2), dtype=np.int64)
    plans = [c[0] for c in candidates]
    hits = _replay(trace, plans, budget, demand_fetch)
    _check_promises(trace, hits, [p[0] for p in planned])
    if any(hits[s] < b.upper for s, b in enumerate(bounds)):
        belady = _replay(trace, [empty] * trace.n_streams, budget, demand_fetch)
        for s, b in enumerate(bounds):
            if belady[s] > hits[s]:
                hits[s], plans[s], b.lower_method = belady[s], empty, "belady"
    changed = [s for s, c in enumerate(candidates) if not np.array_equal(c[0], c[1])]
    if changed:
        other = _replay(trace, [c[1] for c in candidates], budget, demand_fetch)
        _check_promises(trace, other, [p[1] for p in planned])
        for s in changed:
            if other[s] > hits[s]:
                hits[s], plans[s], bounds[s].lower_method = other[s], candidates[s][1], "lp-round"
    for s, b in enumerate(bounds):
        b.lower = int(hits[s])
        if b.lower > b.upper:
            raise OracleSolveError(
                f"stream {s}: oracle_lower {b.lower} > oracle_upper {b.upper} (oracle bug)"
            )
    return plans


#: A stream's LP joins its window's batch when it has at most this many columns (gaps and
#: check points); a larger one is solved alone, where HiGHS's set-up is small beside its solve.
BATCH_MAX_COLUMNS = 4_000


def stream_bounds(trace: Trace, budget: int, demand_fetch: bool, settings: OracleSettings,
                  streams: range | None = None) -> tuple[list, list, list]:  # fmt: skip
    """Per stream of ``streams`` (default: every one), its bound, its two candidate plans and
    what they plan: the part of a solve that is independent per stream, so a sweep can spread
    one budget's streams over its workers (``memlens.oracle.batch``) and :func:`finish` them.

    Streams are taken in windows of ``settings.batch_streams`` consecutive streams counted from
    stream 0 (not from ``streams.start``), the small LPs of a window solved as one
    (``memlens.oracle.bounds.lp_candidates_many``): a window is the same whichever range it
    is asked in, as long as ranges start and end on windows (``memlens.oracle.batch.chunks``
    cuts them so), so the numbers never depend on how many workers shared the work."""
    streams = streams if streams is not None else range(trace.n_streams)
    width = settings.batch_streams or 1
    bounds: list[StreamBound] = []
    candidates: list[list[np.ndarray]] = []
    planned: list[list[int]] = []
    with silenced(settings.solver_log):
        lo = streams.start
        while lo < streams.stop:
            hi = min(streams.stop, (lo // width + 1) * width)
            for model, bound, chosen in _window(trace, budget, demand_fetch, settings, lo, hi):
                bounds.append(bound)
                candidates.append([keep_pairs(model, c) for c in chosen])
                planned.append([model.planned_hits(c) for c in chosen])
            lo = hi
    return bounds, candidates, planned


def _window(trace: Trace, budget: int, demand_fetch: bool, settings: OracleSettings,
            lo: int, hi: int) -> list:  # fmt: skip
    """(model, bound, chosen plans) of streams ``lo..hi``, their small LPs solved together."""
    t0 = time.perf_counter()
    models = [build_model(trace, s, budget, demand_fetch) for s in range(lo, hi)]
    build_s = (time.perf_counter() - t0) / max(len(models), 1)
    exact, exact_s = [], []
    for model in models:
        t1 = time.perf_counter()
        exact.append(_exact(model, settings))
        exact_s.append(time.perf_counter() - t1)
    lps, shared_s = _batched_lps(models, settings, exact) if settings.batch_streams else ({}, 0.0)
    share = shared_s / max(len(lps), 1)
    out = []
    for k, model in enumerate(models):
        t1 = time.perf_counter()
        bound, chosen = _stream_bound(model, settings, lps.get(k), exact[k])
        bound.solve_s = (time.perf_counter() - t1 + build_s + exact_s[k]
                         + (share if k in lps else 0.0))  # fmt: skip
        out.append((model, bound, chosen))
    return out


def _batched_lps(models: list, settings: OracleSettings, exact: list) -> tuple[dict, float]:
    """{index in ``models``: (bound, values)} for the streams whose one small chain LP
    ``_stream_bound`` would solve (not closed-form, not solved exactly, no alternatives, not
    segmented), solved as one batch; and the batch's time."""
    t0 = time.perf_counter()
    small = [k for k, m in enumerate(models)
             if 0 < m.n_gaps and not m.has_groups and _uses_lp(m, settings)
             and _one_lp(m, settings) and m.n_gaps + m.points.shape[0] <= BATCH_MAX_COLUMNS
             and exact[k] is None and not _fits(m, settings)]  # fmt: skip
    if len(small) < 2:
        return {}, 0.0
    solved = lp_candidates_many([models[k] for k in small], settings.cut_rounds)
    return dict(zip(small, solved, strict=True)), time.perf_counter() - t0


def finish(trace: Trace, budget: int, demand_fetch: bool, parts: tuple[list, list, list],
           wall_s: float) -> OracleResult:  # fmt: skip
    """The result from every stream's :func:`stream_bounds` (in stream order): the LP plans
    replayed for the lower bounds.  :func:`open_gaps` then says where an integer program may
    close what is left between the bounds."""
    bounds, candidates, planned = parts
    plans = _lower_bounds(trace, bounds, candidates, planned, budget, demand_fetch)
    return OracleResult(budget, demand_fetch, bounds, plans, wall_s)


def open_gaps(result: OracleResult, settings: OracleSettings) -> list[int]:
    """The streams whose best replayed plan scores below their LP bound and whose integer
    program is small enough to try (``milp_max_gaps``).

    Asked after the replay, not before: a replay often scores more than its plan promised (the
    oracle policy adds hits of its own), and where it reaches the LP bound both bounds are
    already exact, so on many short streams about half the integer programs a plan-based test
    would start are never needed."""
    return [s for s, b in enumerate(result.streams)
            if b.lower < b.upper and b.upper_method == "lp"
            and 0 < b.gaps <= settings.milp_max_gaps]  # fmt: skip


def close_gaps(trace: Trace, budget: int, demand_fetch: bool, settings: OracleSettings,
               streams: list[int], lowers: list[int]) -> list[tuple]:  # fmt: skip
    """Per stream of ``streams`` (whose best replay scored ``lowers``): ``(stream, upper or
    None, keep pairs of an integer schedule or None, its planned hits, seconds)``.

    First a few more rounds of cover cuts (``memlens.oracle.proofs``), which settle most of
    them for a share of a few batched LPs each, then, for the rest, a feasibility problem:
    can any schedule plan one hit more than the replay scored
    (``memlens.oracle.bounds.none_reaches``)?  Where either proves not, the replayed score is
    the stream's upper bound too, proven, and nothing more is solved.  Otherwise (or where
    the cut rounds rounded a schedule planning one hit more: no proof to look for) HiGHS's
    branch and bound (``milp_schedule``) gives its dual bound and its best schedule, to be
    replayed (:func:`apply_closed`).  Independent per stream but for the LP proofs' batches
    (by proof window: ``memlens.oracle.proofs.proof_window``), so a sweep spreads them over
    its workers, cut between proof windows (``memlens.oracle.batch``)."""
    out = []
    with silenced(settings.solver_log):
        t0 = time.perf_counter()
        models = {s: build_model(trace, s, budget, demand_fetch) for s in streams}
        build_s = (time.perf_counter() - t0) / max(len(streams), 1)
        settled = settle(models, dict(zip(streams, lowers, strict=True)), settings.cut_rounds,
                         proof_window(settings.batch_streams))  # fmt: skip
        proven, improvable = settled.proven, settled.improvable
        for s, lower in zip(streams, lowers, strict=True):
            model, t1 = models[s], time.perf_counter()
            if s in proven:
                out.append((s, lower, None, 0, build_s + proven[s]))
                continue
            # a stream with a schedule planning lower + 1 has no proof for HiGHS to find
            if s not in improvable and _none_reaches(model, settled.lps.get(s), lower + 1,
                                                     settings.milp_node_limit):  # fmt: skip
                out.append((s, lower, None, 0, build_s + time.perf_counter() - t1))
                continue
            t1 -= improvable.get(s, 0.0)
            exact, dual_bound = milp_schedule(model, settings.milp_node_limit)
            pairs, planned = None, 0
            if exact is not None and schedule_load_ok(model, exact):
                pairs, planned = keep_pairs(model, exact), model.planned_hits(exact)
            out.append((s, dual_bound, pairs, planned, build_s + time.perf_counter() - t1))
    return out


def _none_reaches(model, lp, hits: int, node_limit: int) -> bool:
    """HiGHS's feasibility problem for ``hits``: on the stream's cut chain-form LP from the
    proofs' rounds where there is one (``bounds.none_reaches_chain``), else on its model."""
    if lp is not None:
        return none_reaches_chain(lp, hits, node_limit)
    return none_reaches(model, hits, node_limit)


def apply_closed(trace: Trace, result: OracleResult, closed: list[tuple]) -> OracleResult:
    """Lower upper bounds to what :func:`close_gaps` proved, and replay its schedules: one
    keeps the stream's plan where it scores more than the LP plans did."""
    bounds = result.streams
    for s, upper, _, _, seconds in closed:
        bounds[s].solve_s += seconds
        if upper is not None and upper < bounds[s].upper:
            bounds[s].upper, bounds[s].upper_method = int(upper), "milp"
    tried = [(s, pairs, planned) for s, _, pairs, planned, _ in closed if pairs is not None]
    if tried:
        empty = np.zeros((0, 2), dtype=np.int64)
        plans = [empty] * trace.n_streams
        for s, pairs, _ in tried:
            plans[s] = pairs
        hits = _replay(trace, plans, result.budget, result.demand_fetch)
        for s, pairs, planned in tried:
            if not trace.has_alternatives and hits[s] < planned:
                raise OracleSolveError(f"stream {s}: replay scored below its plan (oracle bug)")
            if hits[s] > bounds[s].lower:
                bounds[s].lower, bounds[s].lower_method = int(hits[s]), "milp"
                result.plans[s] = pairs
    for s, b in enumerate(bounds):
        if b.lower > b.upper:
            raise OracleSolveError(
                f"stream {s}: oracle_lower {b.lower} > oracle_upper {b.upper} (oracle bug)"
            )
    return result


def _compute(trace: Trace, budget: int, demand_fetch: bool, settings: OracleSettings):
    t_all = time.perf_counter()
    parts = stream_bounds(trace, budget, demand_fetch, settings)
    result = finish(trace, budget, demand_fetch, parts, 0.0)
    gaps = open_gaps(result, settings)
    lowers = [result.streams[s].lower for s in gaps]
    apply_closed(trace, result, close_gaps(trace, budget, demand_fetch, settings, gaps, lowers))
    result.wall_s = time.perf_counter() - t_all
    return result
