"""Metrics of a replay: per run, per stream and per request.

Definitions (the README repeats them; tests check each on hand-computed traces):

``hit_rate``             needed references present in working memory / all needed references
                         (micro-averaged over requests and streams).
``request_success``      share of requests (with at least one need) whose every need was present.
``mean_context_tokens``  mean over requests of the tokens in working memory at the request.
``p95_context_tokens``   95th percentile of the same (numpy's default linear interpolation).
``false_eviction_rate``  evictions from working memory of items a later request needs / all
                         evictions from working memory (``None`` when nothing was evicted).
``evictions``            evictions from working memory.
``cost_usd``             sum over requests of context tokens x ``price_per_mtok`` / 1e6.
``events``               events replayed; ``events_per_s`` = events / replay wall time.

Timing figures (``events_per_s``, ``wall_s``) are the only ones that may differ between two
runs of the same config and seed; they are kept apart in ``timing``.
"""

from __future__ import annotations

import math

import numpy as np

from memlens.simulator import SimResult
from memlens.trace import Trace

DETERMINISTIC_KEYS = (
    "hit_rate",
    "request_success",
    "mean_context_tokens",
    "p95_context_tokens",
    "false_eviction_rate",
    "evictions",
    "false_evictions",
    "cost_usd",
    "events",
    "requests",
    "references",
    "hits",
    "pins_over_budget_requests",
)


def _ratio(num: float, den: float) -> float | None:
    return None if den == 0 else float(num) / float(den)


def request_hits(trace: Trace, result: SimResult) -> np.ndarray:
    """Hits per request."""
    return np.bincount(
        trace.need_request, weights=result.need_hit, minlength=trace.n_requests
    ).astype(np.int64)


def _summary(
    n_events: int,
    needs_count: np.ndarray,
    hits: np.ndarray,
    ctx: np.ndarray,
    pinned: np.ndarray,
    evictions: int,
    false_evictions: int,
    budget: int,
    price_per_mtok: float,
) -> dict:
    with_needs = needs_count > 0
    n_refs = int(needs_count.sum())
    n_hits = int(hits.sum())
    return {
        "hit_rate": _ratio(n_hits, n_refs),
        "request_success": _ratio(int((hits[with_needs] == needs_count[with_needs]).sum()),
                                  int(with_needs.sum())),
        "mean_context_tokens": float(ctx.mean()) if ctx.size else None,
        "p95_context_tokens": float(np.percentile(ctx, 95)) if ctx.size else None,
        "false_eviction_rate": _ratio(false_evictions, evictions),
        "evictions": int(evictions),
        "false_evictions": int(false_evictions),
        "cost_usd": float(ctx.sum()) * float(price_per_mtok) / 1e6,
        "events": int(n_events),
        "requests": int(ctx.size),
        "references": n_refs,
        "hits": n_hits,
        "pins_over_budget_requests": int((pinned > budget).sum()),
    }


def compute_metrics(trace: Trace, result: SimResult, price_per_mtok: float = 3.0) -> dict:
    """Overall metrics, per-stream metrics and timing for one replay."""
    needs_count = trace.req_needs_count
    hits = request_hits(trace, result)
    ctx = result.context_tokens
    overall = _summary(
        trace.n_events, needs_count, hits, ctx, result.pinned_tokens,
        int(result.evictions.sum()), int(result.false_evictions.sum()),
        result.budget, price_per_mtok,
    )  # fmt: skip
    streams = {}
    ev_counts = np.bincount(trace.ev_stream, minlength=trace.n_streams)
    for s, name in enumerate(trace.stream_names):
        mask = trace.req_stream == s
        streams[name] = _summary(
            int(ev_counts[s]), needs_count[mask], hits[mask], ctx[mask],
            result.pinned_tokens[mask], int(result.evictions[s]),
            int(result.false_evictions[s]), result.budget, price_per_mtok,
        )  # fmt: skip
    wall = result.wall_s
    timing = {
        "wall_s": wall,
        "events_per_s": trace.n_events / wall if wall > 0 else math.inf,
        "engine": result.engine,
    }
    return {"overall": overall, "streams": streams, "timing": timing}


def per_request_table(trace: Trace, result: SimResult) -> dict[str, np.ndarray | list]:
    """Columns of the per-request record (written as Parquet by ``memlens.run``)."""
    hits = request_hits(trace, result)
    needs_count = trace.req_needs_count
    return {
        "request_id": trace.req_id,
        "stream": [trace.stream_names[s] for s in trace.req_stream.tolist()],
        "event": trace.req_event,
        "t": trace.req_t,
        "needs": needs_count,
        "hits": hits,
        "misses": needs_count - hits,
        "context_tokens": result.context_tokens,
        "pinned_tokens": result.pinned_tokens,
    }
