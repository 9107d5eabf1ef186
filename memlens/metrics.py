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

Request-time retrieval (``memlens.retrieval``; with it off, the first three equal ``hit_rate``
and the WM context figures):

``context_recall``            needed references present, in a usable form, in the assembled
                              context (WM plus retrieved items) / all needed references.
``retrieval_precision``       retrieved items the request needed / all retrieved items.
``mean_context_tokens_total`` mean over requests of WM tokens plus retrieved tokens (``p95_``
                              likewise); ``cost_usd_total`` prices them.
``retrieved_tokens_mean``     mean retrieved tokens per request.
``needs_lost_to_compression`` references retrieved only in a lossy form that does not serve them.
``compression_context_tokens_saved``  full minus stored tokens over retrieved compressed items.
``compression_stored_tokens_saved``   full minus stored tokens over the LTS at the end.
``prefetch_served_share``     with prefetch: share of requests needing something beyond WM whose
                              every such need the prefetched set served.
``retrieval_latency_modeled_ms_p50/p95``  configured tier latencies on the critical path.

Timing figures (``events_per_s``, ``wall_s``, measured retrieval and index latencies) are the only
ones that may differ between two runs of the same config and seed; they are kept apart in
``timing``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from memlens.registry import Metric, computed, metric, register
from memlens.simulator import SimResult
from memlens.trace import Trace


def _ratio(num: float, den: float) -> float | None:
    return None if den == 0 else float(num) / float(den)


def request_hits(trace: Trace, result: SimResult) -> np.ndarray:
    """Hits per request."""
    return np.bincount(
        trace.need_request, weights=result.need_hit, minlength=trace.n_requests
    ).astype(np.int64)


@dataclass
class RequestGroup:
    """The requests of one run or one stream: what every per-group metric is a function of."""

    n_events: int
    needs_count: np.ndarray  # per request
    hits: np.ndarray  # per request
    ctx: np.ndarray  # WM tokens per request
    pinned: np.ndarray  # pinned tokens per request
    evictions: int
    false_evictions: int
    budget: int
    price_per_mtok: float


# ------------------------------------------------------- core metrics, declared once
@metric("hit_rate", "needed references present in working memory / all needed references",
        True, summary=True)  # fmt: skip
def hit_rate(g: RequestGroup):
    return _ratio(int(g.hits.sum()), int(g.needs_count.sum()))


register(Metric("oracle_upper", "best hit rate any policy of the class can reach (upper bound)",
                True, group="oracle", summary=True))  # fmt: skip
register(Metric("regret", "oracle_upper - hit_rate: hit rate left on the table, at most",
                False, group="oracle", summary=True))  # fmt: skip


@metric("request_success", "share of requests (with a need) whose every need was present",
        True, summary=True)  # fmt: skip
def request_success(g: RequestGroup):
    with_needs = g.needs_count > 0
    full = int((g.hits[with_needs] == g.needs_count[with_needs]).sum())
    return _ratio(full, int(with_needs.sum()))


@metric("mean_context_tokens", "mean WM tokens at a request", None, fmt=",.1f", summary=True)
def mean_context_tokens(g: RequestGroup):
    return float(g.ctx.mean()) if g.ctx.size else None


@metric("p95_context_tokens", "95th percentile of WM tokens at a request (linear)", None,
        fmt=",.1f", summary=True)  # fmt: skip
def p95_context_tokens(g: RequestGroup):
    return float(np.percentile(g.ctx, 95)) if g.ctx.size else None


@metric("false_eviction_rate", "evictions of items a later request needs / all evictions",
        False, summary=True)  # fmt: skip
def false_eviction_rate(g: RequestGroup):
    return _ratio(g.false_evictions, g.evictions)


@metric("evictions", "evictions from working memory", None, fmt="d", summary=True)
def evictions(g: RequestGroup):
    return int(g.evictions)


@metric("false_evictions", "evictions of items a later request needs", False, fmt="d")
def false_evictions(g: RequestGroup):
    return int(g.false_evictions)


@metric("cost_usd", "sum over requests of context tokens x price_per_mtok / 1e6", False,
        summary=True)  # fmt: skip
def cost_usd(g: RequestGroup):
    return float(g.ctx.sum()) * float(g.price_per_mtok) / 1e6


@metric("events", "events replayed", None, fmt="d")
def events(g: RequestGroup):
    return int(g.n_events)


@metric("requests", "requests replayed", None, fmt="d")
def requests(g: RequestGroup):
    return int(g.ctx.size)


@metric("references", "needed references", None, fmt="d")
def references(g: RequestGroup):
    return int(g.needs_count.sum())


@metric("hits", "needed references present in working memory", True, fmt="d")
def hits(g: RequestGroup):
    return int(g.hits.sum())


@metric("pins_over_budget_requests", "requests at which pinned tokens alone exceeded the budget",
        None, fmt="d")  # fmt: skip
def pins_over_budget_requests(g: RequestGroup):
    return int((g.pinned > g.budget).sum())


def _summary(g: RequestGroup) -> dict:
    return {m.key: m.compute(g) for m in computed()}


# ------------------------------------------- retrieval metrics (memlens.retrieval)
_RETRIEVAL = [
    ("context_recall", "needed references present, usable, in WM + retrieved context", True),
    ("retrieval_precision", "retrieved items the request needed / retrieved items", True),
    ("mean_context_tokens_total", "mean of WM + retrieved tokens per request", None),
    ("p95_context_tokens_total", "95th percentile of WM + retrieved tokens", None),
    ("cost_usd_total", "cost of WM + retrieved tokens", False),
    ("retrieved_items", "items retrieved over all requests", None),
    ("retrieved_tokens_mean", "mean retrieved tokens per request", None),
    ("needs_lost_to_compression", "needs retrieved only in a lossy form that fails them", False),
    ("compression_context_tokens_saved", "full - stored tokens over retrieved items", None),
    ("compression_stored_tokens_saved", "full - stored tokens over the LTS at the end", None),
    ("prefetch_served_share", "requests whose beyond-WM needs the prefetched set served", True),
    (
        "retrieval_latency_modeled_ms_p50",
        "configured tier latency on the critical path, p50",
        False,
    ),
    (
        "retrieval_latency_modeled_ms_p95",
        "configured tier latency on the critical path, p95",
        False,
    ),
    ("promoted", "retrieved items promoted into working memory", None),
]
_RETRIEVAL_SUMMARY = {"context_recall", "retrieval_precision", "mean_context_tokens_total",
                      "cost_usd_total"}  # fmt: skip
_COUNTS = {"retrieved_items", "needs_lost_to_compression", "compression_context_tokens_saved",
           "compression_stored_tokens_saved", "promoted"}  # fmt: skip
for _key, _desc, _hib in _RETRIEVAL:
    _fmt = "d" if _key in _COUNTS else ",.1f" if "tokens" in _key or "_ms_" in _key else ".4f"
    register(Metric(_key, _desc, _hib, fmt=_fmt, group="retrieval",
                    summary=_key in _RETRIEVAL_SUMMARY))  # fmt: skip

# ------------------------------------------------------------------ timing figures
_TIMING = [
    ("events_per_s", "events replayed per second of replay (not trace loading)", True, ",.0f"),
    ("wall_s", "replay wall time, seconds", False, ".3f"),
    ("engine", "the engine that replayed (reference or fast)", None, "s"),
    ("oracle_solve_s", "time to solve (or fetch) the oracle bounds", False, ".3f"),
    ("oracle_cached", "the bounds came from a cache", None, "s"),
    ("retrieval_latency_ms_p50", "measured retrieval latency, p50", False, ".3f"),
    ("retrieval_latency_ms_p95", "measured retrieval latency, p95", False, ".3f"),
    ("index_query_ms_p50", "measured LTS index query time, p50", False, ".3f"),
    ("index_query_ms_p95", "measured LTS index query time, p95", False, ".3f"),
    ("index_build_s", "LTS index build time", False, ".3f"),
]
for _key, _desc, _hib, _fmt in _TIMING:
    register(Metric(_key, _desc, _hib, fmt=_fmt, kind="timing", group="timing",
                    summary=_key == "events_per_s"))  # fmt: skip


def _pct(x: np.ndarray, q: float) -> float | None:
    return float(np.percentile(x, q)) if x.size else None


def _retrieval_summary(trace: Trace, result: SimResult, rec, req_mask: np.ndarray,
                       price_per_mtok: float) -> dict:  # fmt: skip
    """Retrieval metrics over the requests in ``req_mask`` (``rec`` None: retrieval off)."""
    ref_mask = req_mask[trace.need_request]
    ctx = result.context_tokens[req_mask]
    if rec is None:
        n_refs = int(ref_mask.sum())
        return {
            "context_recall": _ratio(int(result.need_hit[ref_mask].sum()), n_refs),
            "mean_context_tokens_total": float(ctx.mean()) if ctx.size else None,
            "p95_context_tokens_total": _pct(ctx, 95),
            "cost_usd_total": float(ctx.sum()) * float(price_per_mtok) / 1e6,
        }
    total = ctx + rec.retrieved_tokens[req_mask]
    counts = np.diff(rec.ret_ptr)
    ent_mask = np.repeat(req_mask, counts)
    needed = rec.ret_needed[ent_mask]
    lossy = np.isin(rec.ret_form[ent_mask], (1, 2))  # summary, entities
    full = trace.item_tokens[rec.ret_item[ent_mask].astype(np.int64)]
    served = rec.prefetch_served[req_mask]
    served = served[served >= 0]
    modeled = rec.modeled_ms[req_mask]
    return {
        "context_recall": _ratio(int(rec.need_ctx[ref_mask].sum()), int(ref_mask.sum())),
        "retrieval_precision": _ratio(int(needed.sum()), int(needed.size)),
        "mean_context_tokens_total": float(total.mean()) if total.size else None,
        "p95_context_tokens_total": _pct(total, 95),
        "cost_usd_total": float(total.sum()) * float(price_per_mtok) / 1e6,
        "retrieved_items": int(needed.size),
        "retrieved_tokens_mean": float(rec.retrieved_tokens[req_mask].mean()) if ctx.size else None,
        "needs_lost_to_compression": int(rec.need_lost[ref_mask].sum()),
        "compression_context_tokens_saved": int(
            (full[lossy] - rec.ret_tokens[ent_mask][lossy]).sum()
        ),
        "prefetch_served_share": _ratio(int((served == 1).sum()), int(served.size)),
        "retrieval_latency_modeled_ms_p50": _pct(modeled, 50),
        "retrieval_latency_modeled_ms_p95": _pct(modeled, 95),
    }


def compute_metrics(
    trace: Trace, result: SimResult, price_per_mtok: float = 3.0, retrieval=None
) -> dict:
    """Overall metrics, per-stream metrics and timing for one replay.

    ``retrieval``: a ``memlens.retrieval.RetrievalRecord`` when request-time retrieval ran.
    """
    needs_count = trace.req_needs_count
    hits = request_hits(trace, result)
    ctx = result.context_tokens
    overall = _summary(RequestGroup(
        trace.n_events, needs_count, hits, ctx, result.pinned_tokens,
        int(result.evictions.sum()), int(result.false_evictions.sum()),
        result.budget, price_per_mtok,
    ))  # fmt: skip
    streams = {}
    ev_counts = np.bincount(trace.ev_stream, minlength=trace.n_streams)
    for s, name in enumerate(trace.stream_names):
        mask = trace.req_stream == s
        streams[name] = _summary(RequestGroup(
            int(ev_counts[s]), needs_count[mask], hits[mask], ctx[mask],
            result.pinned_tokens[mask], int(result.evictions[s]),
            int(result.false_evictions[s]), result.budget, price_per_mtok,
        ))  # fmt: skip
    everything = np.ones(trace.n_requests, dtype=bool)
    overall.update(_retrieval_summary(trace, result, retrieval, everything, price_per_mtok))
    for s, name in enumerate(trace.stream_names):
        mask = trace.req_stream == s
        streams[name].update(_retrieval_summary(trace, result, retrieval, mask, price_per_mtok))
    wall = result.wall_s
    timing = {
        "wall_s": wall,
        "events_per_s": trace.n_events / wall if wall > 0 else None,
        "engine": result.engine,
    }
    if retrieval is not None:
        overall["compression_stored_tokens_saved"] = retrieval.stored_tokens_saved
        overall["promoted"] = retrieval.promoted
        timing.update({
            "retrieval_latency_ms_p50": _pct(retrieval.measured_ms, 50),
            "retrieval_latency_ms_p95": _pct(retrieval.measured_ms, 95),
            "index_query_ms_p50": _pct(retrieval.index_ms[retrieval.index_ms > 0], 50),
            "index_query_ms_p95": _pct(retrieval.index_ms[retrieval.index_ms > 0], 95),
            "index_build_s": retrieval.build_s,
        })  # fmt: skip
    return {"overall": overall, "streams": streams, "timing": timing}


def per_request_table(
    trace: Trace, result: SimResult, retrieval=None
) -> dict[str, np.ndarray | list]:
    """Columns of the per-request record (written as Parquet by ``memlens.writers``)."""
    hits = request_hits(trace, result)
    needs_count = trace.req_needs_count
    extra = {}
    if retrieval is not None:
        extra = {
            "context_hits": np.bincount(trace.need_request, weights=retrieval.need_ctx,
                                        minlength=trace.n_requests).astype(np.int64),
            "retrieved_items": np.diff(retrieval.ret_ptr),
            "retrieved_tokens": retrieval.retrieved_tokens,
            "retrieval_latency_ms": retrieval.measured_ms,
        }  # fmt: skip
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
        **extra,
    }
