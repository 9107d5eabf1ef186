"""Metrics of a replay: per run, per stream and per request.

Definitions (docs/concepts/metrics.md repeats them; tests check each on hand-computed traces):

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

What a miss costs and what a hit is worth (settings: ``costs.*``, ``memlens.analyze.costs.CostsConfig``).
A *reference* is one (request r, needed item i) pair; it is *missed* when i was not in working
memory at r (the ``hit_rate`` definition; with request-time retrieval still the WM figure).
A need that lists alternatives (trace format 1.1) is one reference, hit when any alternative
was in working memory; its i (for costs, values and the ``*_ids`` columns) is its first-listed
alternative, the item a demand fetch brings back (``memlens.simulator``).  Need counts, hits,
``request_success`` and miss costs are therefore per need group, never per alternative id.

``miss_cost_usd``        sum over missed references (r, i) of
                           reget(i) + miss_penalty_usd[type(i)],
                         reget(i) = cost(i) when the trace gives cost(i) > 0 (what producing it
                         cost, read as USD), else tokens(i) x ``price_per_mtok`` / 1e6 (reading
                         it back into the context once).
``miss_latency_s``       sum over missed references (r, i) of miss_latency_s[type(i)].
``total_cost_usd``       ``cost_usd`` + ``miss_cost_usd``.
``value_weighted_hit_rate``  sum over references of hit(r, i) x value(r, i) / sum of value(r, i)
                         (``None`` when the values sum to 0), where value(r, i) is the ``value``
                         of the last ``annotate`` event that targets i, carries a value and comes
                         before r in the file (note-only annotations are ignored; a later
                         annotation replaces an earlier one from the next request on), else
                         value_weight[type(i)].

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

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from memlens.analyze.costs import CostsConfig
from memlens.analyze.quantiles import grouped_percentile
from memlens.analyze.registry import (
    Metric,
    StreamParts,
    combine,
    computed,
    declared,
    metric,
    register,
)
from memlens.simulator import SimResult
from memlens.trace.features import type_array
from memlens.trace.model import Trace
from memlens.trace.packed import StringLists, TakenStrings


def _ratio(num: float, den: float) -> float | None:
    return None if den == 0 else float(num) / float(den)


def request_hits(trace: Trace, result: SimResult) -> np.ndarray:
    """Hits per request."""
    return np.bincount(
        trace.need_request, weights=result.need_hit, minlength=trace.n_requests
    ).astype(np.int64)


@dataclass
class References:
    """Per needed reference (one (request, item) pair, in ``trace.needs`` order): the item, whether
    it was a hit, what missing it costs (USD, seconds) and what it is worth."""

    item: np.ndarray  # int item index
    hit: np.ndarray  # bool
    miss_usd: np.ndarray  # reget(i) + miss_penalty_usd[type(i)]
    miss_s: np.ndarray  # miss_latency_s[type(i)]
    value: np.ndarray  # annotated value before the request, else value_weight[type(i)]

    @classmethod
    def empty(cls) -> References:
        z = np.zeros(0)
        return cls(np.zeros(0, dtype=np.int64), np.zeros(0, dtype=bool), z, z, z)

    def select(self, mask: np.ndarray) -> References:
        return References(self.item[mask], self.hit[mask], self.miss_usd[mask],
                          self.miss_s[mask], self.value[mask])  # fmt: skip


def annotated_values(trace: Trace) -> np.ndarray:
    """Per reference: the value of the item's last valued ``annotate`` before the request (NaN if
    none).  Annotations and requests are events, so "before" is file (event) order."""
    valued = [(e, v) for e, (v, _) in trace.annotations.items() if v is not None]
    out = np.full(trace.n_references, np.nan)
    if not valued or not trace.n_references:
        return out
    ann_e = np.asarray([e for e, _ in valued], dtype=np.int64)
    ann_v = np.asarray([v for _, v in valued], dtype=np.float64)
    ann_i = trace.ev_ref[ann_e].astype(np.int64)
    span = np.int64(trace.n_events + 1)
    key = ann_i * span + ann_e  # sorted by item, then event
    order = np.argsort(key, kind="stable")
    key, ann_i, ann_v = key[order], ann_i[order], ann_v[order]
    ref_i = trace.needs.astype(np.int64)
    at = np.searchsorted(key, ref_i * span + trace.req_event[trace.need_request], "left") - 1
    ok = at >= 0
    ok[ok] = ann_i[at[ok]] == ref_i[ok]  # the latest earlier annotation is of this very item
    out[ok] = ann_v[at[ok]]
    return out


def needed_references(trace: Trace, result: SimResult, price_per_mtok: float,
                      costs: CostsConfig) -> References:  # fmt: skip
    """Every needed reference of a replay with its miss cost, miss latency and value."""
    miss_usd, miss_s, value = reference_prices(trace, price_per_mtok, costs)
    return References(trace.needs, result.need_hit.astype(bool), miss_usd, miss_s, value)


#: Per-trace values every replay of a trace shares, kept in ``trace.__dict__`` under this key
#: (the trace is memoised per process, so a compare's jobs on one trace compute them once).
PER_TRACE_KEY = "_memlens_metrics_per_trace"
_PER_TRACE_KEY = PER_TRACE_KEY  # the earlier name
_PRICES_KEPT = 4  # (price, costs) settings whose reference prices are kept per trace


def _per_trace(trace: Trace) -> dict:
    return trace.__dict__.setdefault(PER_TRACE_KEY, {})


def _frozen(*arrays: np.ndarray) -> tuple[np.ndarray, ...]:
    for a in arrays:
        a.flags.writeable = False  # shared by every replay: nobody may change them
    return arrays


def reference_prices(trace: Trace, price_per_mtok: float, costs: CostsConfig
                     ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:  # fmt: skip
    """Per needed reference: miss cost (USD), miss latency (s) and value.  They depend on the
    trace and the settings only, not on the replay, so they are computed once per trace and
    settings (read-only arrays) instead of once per compare job."""
    key = ("prices", float(price_per_mtok), repr(costs))
    cache = _per_trace(trace)
    if key not in cache:
        miss_usd, miss_s = miss_costs(trace, price_per_mtok, costs)
        value = annotated_values(trace)  # NaN where no annotation: the type's weight
        unvalued = np.isnan(value)
        kind = trace.item_type[trace.needs[unvalued]]
        value[unvalued] = type_array(costs.value_weight, "costs.value_weight")[kind]
        kept = [k for k in cache if k[0] == "prices"]
        for old in kept[: max(0, len(kept) - _PRICES_KEPT + 1)]:
            del cache[old]
        cache[key] = _frozen(miss_usd, miss_s, value)
    return cache[key]


@dataclass(frozen=True)
class StreamIndex:
    """Where each stream's requests and references are, and its event count (per trace)."""

    requests: list[np.ndarray]  # per stream: its request indices, in request order
    references: list[np.ndarray]  # per stream: its reference indices, in ``needs`` order
    events: np.ndarray  # events per stream


def stream_index(trace: Trace) -> StreamIndex:
    """The trace's :class:`StreamIndex`, built once per trace: selecting a stream's rows by
    index picks the same rows, in the same order, as the boolean mask it replaces, without a
    pass over every request per stream and per job."""
    cache = _per_trace(trace)
    if "streams" not in cache:
        req_order = np.argsort(trace.req_stream, kind="stable")
        req_bounds = np.searchsorted(trace.req_stream[req_order], np.arange(trace.n_streams + 1))
        ref_stream = trace.req_stream[trace.need_request]
        ref_order = np.argsort(ref_stream, kind="stable")
        ref_bounds = np.searchsorted(ref_stream[ref_order], np.arange(trace.n_streams + 1))
        split = lambda order, b: [order[b[s] : b[s + 1]] for s in range(trace.n_streams)]  # noqa: E731
        cache["streams"] = StreamIndex(
            list(_frozen(*split(req_order, req_bounds))),
            list(_frozen(*split(ref_order, ref_bounds))),
            _frozen(np.bincount(trace.ev_stream, minlength=trace.n_streams))[0],
        )  # fmt: skip
    return cache["streams"]


def miss_costs(trace: Trace, price_per_mtok: float, costs: CostsConfig, lo: int = 0,
               hi: int | None = None) -> tuple[np.ndarray, np.ndarray]:  # fmt: skip
    """Per needed reference (``lo:hi``): what missing it costs in USD (re-getting the item, its
    cost or re-reading its tokens, plus the type's penalty) and in seconds.

    Built in place (same values as ``np.where``): a large run has tens of millions of
    references, and every temporary column costs 8 bytes per reference."""
    item = trace.needs[lo:hi]
    kind = trace.item_type[item]
    miss_usd = trace.item_cost[item]  # reget: the item's cost, or re-reading it when it has none
    reread = trace.item_tokens[item] * float(price_per_mtok) / 1e6
    np.copyto(miss_usd, reread, where=~(miss_usd > 0))
    del reread
    miss_usd += type_array(costs.miss_penalty_usd, "costs.miss_penalty_usd")[kind]
    miss_s = type_array(costs.miss_latency_s, "costs.miss_latency_s")[kind]
    return miss_usd, miss_s


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
    refs: References = field(default_factory=References.empty)  # the group's needed references
    costs: CostsConfig = field(default_factory=CostsConfig)  # what ``refs`` was computed with
    # ``np.percentile(ctx, 95)`` computed beforehand (memlens.analyze.quantiles: every stream's
    # at once, the same value); None: computed from ``ctx`` when asked
    ctx_p95: float | None = None


# ------------------------------------------------------- core metrics, declared once
@metric("hit_rate", "needed references present in working memory / all needed references",
        True, summary=True, parts=lambda g: (g.hits.sum(), g.needs_count.sum()),
        by_stream=lambda c: (c.hits, c.needs))  # fmt: skip
def hit_rate(g: RequestGroup):
    return _ratio(int(g.hits.sum()), int(g.needs_count.sum()))


register(Metric("oracle_upper", "best hit rate any policy of the class can reach (upper bound)",
                True, group="oracle", summary=True))  # fmt: skip
register(Metric("regret", "oracle_upper - hit_rate: hit rate left on the table, at most",
                False, group="oracle", summary=True))  # fmt: skip


@metric("request_success", "share of requests (with a need) whose every need was present",
        True, summary=True, parts=lambda g: _success_parts(g),
        by_stream=lambda c: (c.complete, c.with_needs))  # fmt: skip
def request_success(g: RequestGroup):
    return _ratio(*_success_parts(g))


def _success_parts(g: RequestGroup) -> tuple[int, int]:
    """(requests whose every need was present, requests with a need)."""
    with_needs = g.needs_count > 0
    return int((g.hits[with_needs] == g.needs_count[with_needs]).sum()), int(with_needs.sum())


@metric("mean_context_tokens", "mean WM tokens at a request", None, fmt=",.1f", summary=True,
        parts=lambda g: (g.ctx.sum(), g.ctx.size), by_stream=lambda c: (c.ctx, c.requests))  # fmt: skip
def mean_context_tokens(g: RequestGroup):
    return float(g.ctx.mean()) if g.ctx.size else None


@metric("p95_context_tokens", "95th percentile of WM tokens at a request (linear)", None,
        fmt=",.1f", summary=True, by_stream=lambda c: (c.ctx_p95, None))  # fmt: skip
def p95_context_tokens(g: RequestGroup):
    if not g.ctx.size:
        return None
    return g.ctx_p95 if g.ctx_p95 is not None else float(np.percentile(g.ctx, 95))


@metric("false_eviction_rate", "evictions of items a later request needs / all evictions",
        False, summary=True, parts=lambda g: (g.false_evictions, g.evictions),
        by_stream=lambda c: (c.false_evictions, c.evictions))  # fmt: skip
def false_eviction_rate(g: RequestGroup):
    return _ratio(g.false_evictions, g.evictions)


@metric("evictions", "evictions from working memory", None, fmt="d", summary=True,
        parts=lambda g: (g.evictions, None), by_stream=lambda c: (c.evictions, None))  # fmt: skip
def evictions(g: RequestGroup):
    return int(g.evictions)


@metric("false_evictions", "evictions of items a later request needs", False, fmt="d",
        parts=lambda g: (g.false_evictions, None),
        by_stream=lambda c: (c.false_evictions, None))  # fmt: skip
def false_evictions(g: RequestGroup):
    return int(g.false_evictions)


@metric("cost_usd", "sum over requests of context tokens x price_per_mtok / 1e6", False,
        summary=True, parts=lambda g: (cost_usd(g), None),
        by_stream=lambda c: (c.ctx * float(c.price_per_mtok) / 1e6, None))  # fmt: skip
def cost_usd(g: RequestGroup):
    return float(g.ctx.sum()) * float(g.price_per_mtok) / 1e6


@metric("events", "events replayed", None, fmt="d", parts=lambda g: (g.n_events, None),
        by_stream=lambda c: (c.events, None))  # fmt: skip
def events(g: RequestGroup):
    return int(g.n_events)


@metric("requests", "requests replayed", None, fmt="d", parts=lambda g: (g.ctx.size, None),
        by_stream=lambda c: (c.requests, None))  # fmt: skip
def requests(g: RequestGroup):
    return int(g.ctx.size)


@metric("references", "needed references", None, fmt="d",
        parts=lambda g: (g.needs_count.sum(), None), by_stream=lambda c: (c.needs, None))  # fmt: skip
def references(g: RequestGroup):
    return int(g.needs_count.sum())


@metric("hits", "needed references present in working memory", True, fmt="d",
        parts=lambda g: (g.hits.sum(), None), by_stream=lambda c: (c.hits, None))  # fmt: skip
def hits(g: RequestGroup):
    return int(g.hits.sum())


@metric("pins_over_budget_requests", "requests at which pinned tokens alone exceeded the budget",
        None, fmt="d", parts=lambda g: ((g.pinned > g.budget).sum(), None),
        by_stream=lambda c: (c.pins_over_budget, None))  # fmt: skip
def pins_over_budget_requests(g: RequestGroup):
    return int((g.pinned > g.budget).sum())


@metric("miss_cost_usd", "sum over missed needs of the item's cost (else re-reading it) + the "
        "type's costs.miss_penalty_usd", False,
        parts=lambda g: (miss_cost_usd(g), None), by_stream=lambda c: (c.miss_usd, None))  # fmt: skip
def miss_cost_usd(g: RequestGroup):
    return float(g.refs.miss_usd[~g.refs.hit].sum())


@metric("miss_latency_s", "sum over missed needs of the type's costs.miss_latency_s", False,
        fmt=",.1f", parts=lambda g: (miss_latency_s(g), None),
        by_stream=lambda c: (c.miss_s, None))  # fmt: skip
def miss_latency_s(g: RequestGroup):
    return float(g.refs.miss_s[~g.refs.hit].sum())


@metric("total_cost_usd", "cost_usd (context) + miss_cost_usd", False, summary=True,
        parts=lambda g: (total_cost_usd(g), None),
        by_stream=lambda c: (c.ctx * float(c.price_per_mtok) / 1e6 + c.miss_usd, None))  # fmt: skip
def total_cost_usd(g: RequestGroup):
    return cost_usd(g) + miss_cost_usd(g)


@metric("value_weighted_hit_rate", "hits weighted by value (annotated, else costs.value_weight "
        "of the type) / all needs so weighted", True, summary=True,
        parts=lambda g: _value_parts(g), by_stream=lambda c: (c.value_hit, c.value))  # fmt: skip
def value_weighted_hit_rate(g: RequestGroup):
    return _ratio(*_value_parts(g))


def _value_parts(g: RequestGroup) -> tuple[float, float]:
    """(sum of the values of hit references, sum of the values of all references)."""
    return float(g.refs.value[g.refs.hit].sum()), float(g.refs.value.sum())


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
    (
        "compile_s",
        "seconds the command spent compiling this run's kernels before it began "
        "(memlens.kernels.warm; 0: compiled by an earlier run)",
        False,
        ".1f",
    ),
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
                       price_per_mtok: float, ref_rows: np.ndarray | None = None,
                       ctx_p95: float | None = None) -> dict:  # fmt: skip
    """Retrieval metrics over the requests in ``req_mask`` (``rec`` None: retrieval off; then
    ``req_mask`` may be request indices, ``ref_rows`` their references' indices, and
    ``ctx_p95`` their context tokens' 95th percentile if already known)."""
    ctx = result.context_tokens[req_mask]
    if rec is None:
        hit = result.need_hit[ref_rows if ref_rows is not None else req_mask[trace.need_request]]
        return {
            "context_recall": _ratio(int(hit.sum()), int(hit.size)),
            "mean_context_tokens_total": float(ctx.mean()) if ctx.size else None,
            "p95_context_tokens_total": ctx_p95 if ctx_p95 is not None else _pct(ctx, 95),
            "cost_usd_total": float(ctx.sum()) * float(price_per_mtok) / 1e6,
        }
    ref_mask = req_mask[trace.need_request]
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
    trace: Trace, result: SimResult, price_per_mtok: float = 3.0, retrieval=None,
    costs: CostsConfig | None = None, stream_rows: bool = True,
) -> dict:  # fmt: skip
    """Overall metrics, per-stream metrics, timing and per-stream parts for one replay.

    ``retrieval``: a ``memlens.retrieval.RetrievalRecord`` when request-time retrieval ran.
    ``costs``: miss penalties, latencies and value weights (default: ``CostsConfig()``).
    ``stream_rows``: False leaves the per-stream metrics out (``streams`` is empty; the parts,
    which the intervals read, are the same): a compare job's report shows none of them.
    """
    costs = costs if costs is not None else CostsConfig()
    needs_count = trace.req_needs_count
    hits = request_hits(trace, result)
    ctx = result.context_tokens
    refs = needed_references(trace, result, price_per_mtok, costs)
    overall = _summary(RequestGroup(
        trace.n_events, needs_count, hits, ctx, result.pinned_tokens,
        int(result.evictions.sum()), int(result.false_evictions.sum()),
        result.budget, price_per_mtok, refs, costs,
    ))  # fmt: skip
    index = stream_index(trace)
    # every stream's at once (a row's figure only: no interval reads it)
    p95 = (
        grouped_percentile(ctx, index.requests, 95) if stream_rows else [None] * len(index.requests)
    )
    everything = np.ones(trace.n_requests, dtype=bool)
    overall.update(_retrieval_summary(trace, result, retrieval, everything, price_per_mtok))
    if retrieval is None and all(m.by_stream is not None for m in _per_stream_metrics()):
        streams, parts = _streams_at_once(trace, result, hits, refs, p95, price_per_mtok,
                                          stream_rows)  # fmt: skip
    else:
        streams, parts = _stream_by_stream(trace, result, hits, refs, p95, price_per_mtok,
                                           retrieval, costs, stream_rows)  # fmt: skip
    del refs
    overall.update(sums_over_streams(overall, parts))
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
    return {"overall": overall, "streams": streams, "timing": timing, "stream_parts": parts}


def _stream_by_stream(trace: Trace, result: SimResult, hits: np.ndarray, refs: References,
                      p95: list, price_per_mtok: float, retrieval, costs: CostsConfig,
                      stream_rows: bool = True):  # fmt: skip
    """Per-stream metrics (none without ``stream_rows``) and parts, each stream's group
    computed in turn (with retrieval on, or a metric without ``by_stream``)."""
    index = stream_index(trace)
    needs_count = trace.req_needs_count
    streams, per_stream = {}, StreamParts(len(trace.stream_names))
    for s, name in enumerate(trace.stream_names):  # one stream's group alive at a time
        rows = index.requests[s]
        g = RequestGroup(
            int(index.events[s]), needs_count[rows], hits[rows], result.context_tokens[rows],
            result.pinned_tokens[rows], int(result.evictions[s]),
            int(result.false_evictions[s]), result.budget, price_per_mtok,
            refs.select(index.references[s]), costs, p95[s],
        )  # fmt: skip
        per_stream.add(s, g)
        if not stream_rows:
            continue
        streams[name] = _summary(g)
        if retrieval is None:  # by index: the same rows as the mask, without a pass per stream
            part = _retrieval_summary(trace, result, None, rows, price_per_mtok,
                                      index.references[s], p95[s])  # fmt: skip
        else:
            part = _retrieval_summary(trace, result, retrieval, trace.req_stream == s,
                                      price_per_mtok)  # fmt: skip
        streams[name].update(part)
    return streams, per_stream.result()


@dataclass
class StreamColumns:
    """Per stream (arrays over ``trace.stream_names``): the counts and sums the core metrics
    are ratios of, what each metric's ``by_stream`` reads.  Sums go through ``np.bincount``,
    which adds a stream's rows in their order: counts exactly, costs and values as a running
    sum (the per-stream loop's ``np.sum`` adds in pairs, so a float sum can differ from it in
    its last bits; tests/analyze/test_stream_columns.py bounds that)."""

    events: np.ndarray
    requests: np.ndarray
    needs: np.ndarray
    hits: np.ndarray
    complete: np.ndarray  # requests with a need whose every need was present
    with_needs: np.ndarray  # requests with a need
    ctx: np.ndarray  # WM tokens at requests, summed (float64, exact below 2**53)
    ctx_p95: np.ndarray  # NaN for a stream without requests
    evictions: np.ndarray
    false_evictions: np.ndarray
    pins_over_budget: np.ndarray
    miss_usd: np.ndarray
    miss_s: np.ndarray
    value_hit: np.ndarray
    value: np.ndarray
    price_per_mtok: float


def stream_columns(trace: Trace, result: SimResult, hits: np.ndarray, refs: References,
                   p95: list, price_per_mtok: float) -> StreamColumns:  # fmt: skip
    n = trace.n_streams
    req_s, ref_s = trace.req_stream, trace.req_stream[trace.need_request]
    count = lambda mask: np.bincount(req_s[mask], minlength=n).astype(np.int64)  # noqa: E731
    total = lambda rows, w: np.bincount(rows, weights=w, minlength=n).astype(np.float64)  # noqa: E731
    needs_count = trace.req_needs_count
    with_needs = needs_count > 0
    missed = ~refs.hit
    return StreamColumns(
        events=np.asarray(stream_index(trace).events, dtype=np.int64),
        requests=np.bincount(req_s, minlength=n).astype(np.int64),
        needs=total(req_s, needs_count).astype(np.int64),
        hits=total(req_s, hits).astype(np.int64),
        complete=count(with_needs & (hits == needs_count)),
        with_needs=count(with_needs),
        ctx=total(req_s, result.context_tokens),
        ctx_p95=np.asarray([np.nan if v is None else v for v in p95], dtype=np.float64),
        evictions=np.asarray(result.evictions, dtype=np.int64),
        false_evictions=np.asarray(result.false_evictions, dtype=np.int64),
        pins_over_budget=count(result.pinned_tokens > result.budget),
        miss_usd=total(ref_s[missed], refs.miss_usd[missed]),
        miss_s=total(ref_s[missed], refs.miss_s[missed]),
        value_hit=total(ref_s[refs.hit], refs.value[refs.hit]),
        value=total(ref_s, refs.value),
        price_per_mtok=price_per_mtok,
    )  # fmt: skip


def _values(num: np.ndarray, den: np.ndarray | None, integer: bool) -> list:
    """A metric's per-stream values from its ``by_stream`` arrays, as ``compute`` returns them:
    ints for counts, None where the ratio (or the value) is undefined."""
    if den is None:
        if integer:
            return np.asarray(num, dtype=np.int64).tolist()
        return [None if v != v else v for v in np.asarray(num, dtype=np.float64).tolist()]
    num, den = np.asarray(num, dtype=np.float64), np.asarray(den, dtype=np.float64)
    ratio = np.divide(num, den, out=np.zeros_like(num), where=den != 0).tolist()
    return [r if d else None for r, d in zip(ratio, (den != 0).tolist(), strict=True)]


def _per_stream_metrics() -> list[Metric]:
    """Metrics with a per-stream value or parts, in declaration order."""
    return [m for m in declared().values() if m.compute is not None or m.parts is not None]


def _streams_at_once(trace: Trace, result: SimResult, hits: np.ndarray, refs: References,
                     p95: list, price_per_mtok: float, stream_rows: bool = True
                     ) -> tuple[dict, dict]:  # fmt: skip
    """Per-stream metrics (none without ``stream_rows``) and parts from
    :class:`StreamColumns`, every stream at once."""
    cols = stream_columns(trace, result, hits, refs, p95, price_per_mtok)
    columns, parts = {}, {}
    for m in _per_stream_metrics():
        num, den = m.by_stream(cols)
        if m.compute is not None and stream_rows:
            columns[m.key] = _values(num, den, m.fmt == "d")
        if m.parts is not None:
            parts[m.key] = (np.asarray(num, dtype=np.float64),
                            None if den is None else np.asarray(den, dtype=np.float64))  # fmt: skip
    if not stream_rows:
        return {}, parts
    columns.update({key: columns[same] for key, same in RETRIEVAL_OFF.items()})
    keys = list(columns)
    rows = zip(*(columns[k] for k in keys), strict=True)
    streams = {name: dict(zip(keys, row, strict=True))
               for name, row in zip(trace.stream_names, rows, strict=True)}  # fmt: skip
    return streams, parts


#: Overall metrics that sum floats over references: defined as the sum of their per-stream
#: sums in stream order (``combine`` of the parts), not one sum over every reference, so that a
#: run split by stream (``memlens.analyze.merge``) adds the very same numbers in the same order.
SUMMED_OVER_STREAMS = ("miss_cost_usd", "miss_latency_s", "value_weighted_hit_rate")


def sums_over_streams(overall: dict, parts: dict) -> dict:
    """The :data:`SUMMED_OVER_STREAMS` metrics (and ``total_cost_usd``, which adds one of them)
    from the per-stream parts."""
    out = {key: combine(*parts[key]) for key in SUMMED_OVER_STREAMS}
    out["total_cost_usd"] = overall["cost_usd"] + out["miss_cost_usd"]
    return out


#: With retrieval off the working memory is the whole context: each key of the retrieval
#: summary is the core metric it then equals (what :func:`_retrieval_summary` computes from the
#: same columns: needs present / needs, the WM context figures).
RETRIEVAL_OFF = {"context_recall": "hit_rate", "mean_context_tokens_total": "mean_context_tokens",
                 "p95_context_tokens_total": "p95_context_tokens", "cost_usd_total": "cost_usd"}  # fmt: skip


def retrieval_off_overall(overall: dict) -> dict:
    """The overall retrieval summary of a run without retrieval, from its core metrics."""
    return {key: overall[same] for key, same in RETRIEVAL_OFF.items()}


def _ids_per_request(trace: Trace, hit: np.ndarray | None = None, keep_if: bool = True
                     ) -> StringLists:  # fmt: skip
    """Per request, the ids of its needed items (those whose ``hit`` flag is ``keep_if``, if
    given): a list of lists to read, gathered from the packed ids only when read or written (a
    Python list per request and a ``str`` per id would dominate a large run's memory)."""
    return StringLists(trace.item_id, trace.needs, trace.needs_ptr, hit, keep_if)


def _request_miss_costs(trace: Trace, missed: np.ndarray, price_per_mtok: float,
                        costs: CostsConfig) -> tuple[np.ndarray, np.ndarray]:  # fmt: skip
    """Per request, the miss cost (USD) and latency (s) of its missed needs: summed a block
    of requests at a time (a request's references in one block, added in order from 0.0,
    so the sums are those of one pass), to keep the per-reference columns small."""
    usd, sec = np.zeros(trace.n_requests), np.zeros(trace.n_requests)
    ptr = trace.needs_ptr
    for lo in range(0, trace.n_requests, _REQUEST_BLOCK):
        hi = min(trace.n_requests, lo + _REQUEST_BLOCK)
        a, b = int(ptr[lo]), int(ptr[hi])
        ref_usd, ref_s = miss_costs(trace, price_per_mtok, costs, a, b)
        ref_usd *= missed[a:b]
        ref_s *= missed[a:b]
        owner = trace.need_request[a:b] - lo
        usd[lo:hi] = np.bincount(owner, weights=ref_usd, minlength=hi - lo)
        sec[lo:hi] = np.bincount(owner, weights=ref_s, minlength=hi - lo)
    return usd, sec


_REQUEST_BLOCK = 1 << 18


def per_request_table(
    trace: Trace, result: SimResult, retrieval=None, price_per_mtok: float = 3.0,
    costs: CostsConfig | None = None,
) -> dict[str, np.ndarray | Sequence]:  # fmt: skip
    """Columns of the per-request record (written as Parquet by ``memlens.runs.writers``); id
    columns are list-like views (``memlens.trace.packed``) that compare equal to lists.

    ``needed_ids`` / ``hit_ids`` / ``missed_ids``: item ids in ``needs`` order (a repeated id
    once); ``miss_cost_usd`` / ``miss_latency_s``: the request's share of those metrics.
    """
    hits = request_hits(trace, result)
    needs_count = trace.req_needs_count
    hit = result.need_hit
    miss_usd, miss_s = _request_miss_costs(trace, hit == 0, price_per_mtok,
                                           costs if costs is not None else CostsConfig())  # fmt: skip
    per_request = {
        "needed_ids": _ids_per_request(trace),
        "hit_ids": _ids_per_request(trace, hit, True),
        "missed_ids": _ids_per_request(trace, hit, False),
        "miss_cost_usd": miss_usd,
        "miss_latency_s": miss_s,
    }
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
        "stream": TakenStrings(trace.stream_names, trace.req_stream),
        "event": trace.req_event,
        "t": trace.req_t,
        "needs": needs_count,
        "hits": hits,
        "misses": needs_count - hits,
        "context_tokens": result.context_tokens,
        "pinned_tokens": result.pinned_tokens,
        **per_request,
        **extra,
    }
