"""The ``oracle`` section of metrics.json, and the ``oracle_upper`` / ``regret`` columns.

Rates are hit rates (hits / needed references, as ``hit_rate``), so ``regret = oracle_upper -
hit_rate`` reads as "hit rate left on the table at this budget, at most".  A policy that can
bring items into working memory outside writes, pins and demand fetch
(``Policy.outside_oracle_class``) is not bounded by the oracle: it gets ``applies: false`` and
no regret rather than a regret that could be negative.
"""

from __future__ import annotations

from memlens.analyze.report import Section
from memlens.oracle.result import OracleResult
from memlens.oracle.settings import OracleSettings
from memlens.trace.model import Trace


def _rate(hits: int, refs: int) -> float | None:
    return None if refs == 0 else hits / refs


def _stream_bounds(result: OracleResult, trace: Trace) -> dict:
    """Each stream's bounds, as rates and as counts."""
    streams = {}
    for name, b in zip(trace.stream_names, result.streams, strict=True):
        streams[name] = {
            "oracle_upper": _rate(b.upper, b.references),
            "oracle_lower": _rate(b.lower, b.references),
            "upper_hits": b.upper,
            "lower_hits": b.lower,
            "references": b.references,
            "upper_method": b.upper_method,
            "lower_method": b.lower_method,
        }
    return streams


def section(result: OracleResult, trace: Trace, hits: int, hit_rate, applies: bool,
            stream_rows: bool = True) -> dict:  # fmt: skip
    """The section's block (``stream_rows``: with each stream's bounds; a compare job's
    report, which shows none of them, goes without)."""
    refs = result.references
    upper = _rate(result.upper, refs)
    regret = None
    if applies and upper is not None and hit_rate is not None:
        regret = upper - hit_rate
    out = {
        "enabled": True,
        "applies": applies,
        "oracle_upper": upper,
        "oracle_lower": _rate(result.lower, refs),
        "regret": regret,
        "gap": _rate(result.upper - result.lower, refs),
        "upper_hits": result.upper,
        "lower_hits": result.lower,
        "hits": int(hits),
        "references": refs,
        "upper_method": result.upper_method,
    }
    if stream_rows:
        out["streams"] = _stream_bounds(result, trace)
    if not applies:
        out["note"] = (
            "this policy can bring items into working memory outside writes, pins and demand "
            "fetch, so the oracle bound does not apply to it; no regret is reported"
        )
    return out


def analyze(trace: Trace, budget: int, demand_fetch: bool, settings: OracleSettings,
            hits: int, applies: bool, stream_rows: bool = True) -> Section:  # fmt: skip
    """The ``oracle`` section, with ``oracle_upper`` and ``regret`` for ``overall``.

    ``applies`` is false for a replay that can place items outside writes, pins and demand
    fetch (a policy declaring ``outside_oracle_class``, or retrieval with promotion);
    ``stream_rows``: :func:`section`'s.
    """
    if not settings.enabled:
        return Section("oracle", {"enabled": False}, {"oracle_upper": None, "regret": None})
    from memlens.oracle.solve import solve  # HiGHS, through scipy: only when the oracle is on

    bounds = solve(trace, budget, demand_fetch, settings)
    refs = trace.n_references
    sec = section(bounds, trace, hits, _rate(hits, refs), applies, stream_rows)
    return Section(
        "oracle",
        sec,
        overall={
            "oracle_upper": sec["oracle_upper"] if applies else None,
            "regret": sec["regret"],
        },  # fmt: skip
        # how long it took and whether it was cached differ between identical runs: timing
        timing={"oracle_solve_s": bounds.wall_s, "oracle_cached": bounds.from_cache},
    )
