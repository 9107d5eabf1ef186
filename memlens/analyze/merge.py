"""Exact merge of a replay split by stream: the shards' parts give the single-process report.

A shard (``memlens.trace.shard``) is a set of whole streams, and a stream's replay, its
per-stream metrics and its per-stream parts (``Metric.parts``) do not depend on which other
streams share its process.  So every shard returns a :class:`ShardSummary` (per stream: name,
first global event, metrics, parts, oracle bounds; and the histogram of its requests' context
tokens) and :func:`merge_sections` turns them into the sections the single-process pipeline
would have produced, bit for bit:

* streams are put back in the single-process order (first appearance in the input, i.e. by
  the global index of their first write or request), so ``streams``, ``stream_parts`` and hence
  every bootstrap interval and paired difference (``memlens.analyze.stats``, which only reads
  the parts in that order) are the same arrays;
* ``overall``: a metric listed in :data:`FROM_PARTS` is ``combine(num, den)`` of those arrays.
  For counts and integer sums (hits, references, context tokens, evictions) that *is* what one
  process computes, since float64 sums of integers below 2**53 are exact in any order; for the
  float sums (``miss_cost_usd``, ``miss_latency_s``, ``value_weighted_hit_rate``) the single
  process defines its overall value the same way, as the sum of the per-stream sums in stream
  order (``memlens.analyze.metrics.compute_metrics``), so both sum the same numbers in the same
  order.  ``cost_usd`` is the integer token total times the price, ``total_cost_usd`` the sum
  of the two overall costs, as in one process;
* ``p95_context_tokens`` (which does not decompose over streams) comes from the exact
  multiset of context-token values: each shard counts its distinct values
  (``np.unique``: a few thousand numbers, whatever the trace's size), the counts are added,
  and :func:`percentile_of_counts` does numpy's ``linear`` arithmetic on the two order
  statistics it needs, so the value is ``np.percentile`` of the whole column;
* the oracle's bounds are per stream (``memlens.oracle``), so the shards' stream bounds are
  put together and summed as ``OracleResult`` sums them; tier move counts are added.

A metric registered with a per-group computation but no merge rule here cannot be merged
exactly: :func:`check_mergeable` names it before any work starts.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from types import SimpleNamespace

import numpy as np

from memlens.analyze import oracle_report
from memlens.analyze.registry import combine, computed
from memlens.analyze.report import Section

#: Overall value = ``combine(parts)`` over the streams in order (see the module docstring).
FROM_PARTS = frozenset({
    "hit_rate", "request_success", "mean_context_tokens", "false_eviction_rate", "evictions",
    "false_evictions", "events", "requests", "references", "hits", "pins_over_budget_requests",
    "miss_cost_usd", "miss_latency_s", "value_weighted_hit_rate",
})  # fmt: skip
#: Overall values computed from other merged figures by :func:`merged_overall`.
DERIVED = frozenset({"cost_usd", "total_cost_usd", "p95_context_tokens"})


@dataclass
class ShardSummary:
    """What one shard's replay returns to the driver: small (per stream, and a histogram)."""

    shard: int
    stream_names: list[str]
    first_events: list[int]  # per stream: global index of its first write or request
    streams: dict  # stream name -> its metrics (and oracle stream block under "_oracle")
    parts: dict  # metric -> (num, den | None) per stream, in ``stream_names`` order
    ctx_values: np.ndarray  # distinct context-token values of the shard's requests
    ctx_counts: np.ndarray  # how many requests had each
    oracle: dict  # the shard's oracle section ({"enabled": False} when off)
    oracle_timing: dict = field(default_factory=dict)
    tiers: dict | None = None  # the shard's tiers section (None: not analyzed)
    retrieval: dict = field(default_factory=lambda: {"enabled": False})
    engine: str = ""
    wall_s: float = 0.0
    applies: bool = True  # the oracle bound applies to the policy (not outside its class)
    memory: dict = field(default_factory=dict)  # the worker's RSS at the start and peak, KiB


def check_mergeable() -> None:
    """Raise ``ValueError`` naming a per-group metric without an exact merge rule."""
    rules = FROM_PARTS | DERIVED
    missing = [m.key for m in computed() if m.key not in rules]
    if missing:
        raise ValueError(f"shards: metric {missing[0]!r} has no exact merge rule "
                         "(memlens.analyze.merge); run it without shards")  # fmt: skip


def percentile_of_counts(values: np.ndarray, counts: np.ndarray, q: float) -> float | None:
    """``float(np.percentile(x, q))`` of the multiset holding ``counts[j]`` copies of
    ``values[j]`` (``values`` sorted, distinct), without building it: numpy's ``linear``
    method (virtual index ``(n - 1) * q / 100``, its floor and the next index, the last value
    at or above ``n - 1``, the two-sided ``_lerp``), as ``memlens.analyze.quantiles`` does."""
    n = int(counts.sum())
    if n == 0:
        return None
    ends = np.cumsum(counts)
    virtual = (np.int64(n) - 1) * np.true_divide(q, 100)
    prev = np.floor(virtual)
    if virtual >= n - 1:
        prev_i = next_i = n - 1
        prev = np.float64(-1.0)
    else:
        prev_i = int(prev)
        next_i = prev_i + 1
    gamma = virtual - prev
    a = values[np.searchsorted(ends, prev_i, side="right")]
    b = values[np.searchsorted(ends, next_i, side="right")]
    diff = b - a
    if gamma >= 0.5:
        return float(np.subtract(b, diff * (1 - gamma)))
    return float(np.add(a, diff * gamma))


def added_counts(summaries: list[ShardSummary]) -> tuple[np.ndarray, np.ndarray]:
    """The shards' context-token histograms added: (sorted distinct values, counts)."""
    if not summaries:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    values = np.concatenate([s.ctx_values for s in summaries])
    counts = np.concatenate([s.ctx_counts for s in summaries])
    distinct, where = np.unique(values, return_inverse=True)
    return distinct, np.bincount(where, weights=None if not counts.size else counts,
                                 minlength=distinct.size).astype(np.int64)  # fmt: skip


def stream_order(summaries: list[ShardSummary]) -> list[tuple[int, int]]:
    """(shard position, stream position) of every stream, in single-process stream order."""
    pairs = [(first, i, j) for i, s in enumerate(summaries)
             for j, first in enumerate(s.first_events)]  # fmt: skip
    return [(i, j) for _, i, j in sorted(pairs)]


def merged_parts(summaries: list[ShardSummary], order: list[tuple[int, int]]) -> dict:
    """Every metric's per-stream parts, in single-process stream order."""
    if not summaries:
        return {}
    out = {}
    for key, (_, den0) in summaries[0].parts.items():
        num = np.asarray([summaries[i].parts[key][0][j] for i, j in order], dtype=np.float64)
        den = None if den0 is None else np.asarray(
            [summaries[i].parts[key][1][j] for i, j in order], dtype=np.float64)  # fmt: skip
        out[key] = (num, den)
    return out


def merged_overall(parts: dict, ctx: tuple[np.ndarray, np.ndarray], price_per_mtok: float,
                   ) -> dict:  # fmt: skip
    """The ``overall`` metrics of the whole run from the merged parts and context histogram."""
    from memlens.analyze.metrics import retrieval_off_overall

    out = {}
    for m in computed():
        if m.key in FROM_PARTS:
            value = combine(*parts[m.key])
            out[m.key] = int(value) if m.fmt == "d" and value is not None else value
    tokens = int(np.sum(parts["mean_context_tokens"][0]))
    out["cost_usd"] = float(tokens) * float(price_per_mtok) / 1e6
    out["total_cost_usd"] = out["cost_usd"] + out["miss_cost_usd"]
    out["p95_context_tokens"] = percentile_of_counts(*ctx, 95)
    ordered = {m.key: out[m.key] for m in computed()}  # the single-process key order
    ordered.update(retrieval_off_overall(out))
    return ordered


def merged_oracle(summaries: list[ShardSummary], names: list[str], order, budget: int,
                  demand_fetch: bool, hits: int, applies: bool) -> Section:  # fmt: skip
    """The oracle section from the shards' per-stream bounds (summed as one solve sums)."""
    from memlens.oracle.result import OracleResult, StreamBound

    if not summaries or not summaries[0].oracle.get("enabled"):
        return Section("oracle", {"enabled": False}, {"oracle_upper": None, "regret": None})
    bounds = []
    for i, j in order:
        b = summaries[i].oracle["streams"][summaries[i].stream_names[j]]
        bounds.append(StreamBound(b["upper_hits"], b["lower_hits"], b["references"],
                                  b["upper_method"], b["lower_method"], 0, 0.0))  # fmt: skip
    result = OracleResult(budget, demand_fetch, bounds, plans=[])
    refs = result.references
    sec = oracle_report.section(result, SimpleNamespace(stream_names=names), hits,
                                None if refs == 0 else hits / refs, applies)  # fmt: skip
    timing = {"oracle_solve_s": sum(s.oracle_timing.get("oracle_solve_s", 0.0) for s in summaries),
              "oracle_cached": all(s.oracle_timing.get("oracle_cached") for s in summaries)}  # fmt: skip
    return Section("oracle", sec, overall={"oracle_upper": sec["oracle_upper"] if applies else None,
                                           "regret": sec["regret"]}, timing=timing)  # fmt: skip


def _added(blocks: list[dict]) -> dict:
    """Dicts of counts added key by key (nested dicts too), keys in sorted order where the
    single-process block sorts them (tier moves)."""
    out: dict = {}
    for block in blocks:
        for key, value in block.items():
            if isinstance(value, dict):
                out[key] = _added([out.get(key, {}), value])
            else:
                out[key] = out.get(key, 0) + value
    return out


def merged_tiers(summaries: list[ShardSummary]) -> Section | None:
    blocks = [s.tiers for s in summaries if s.tiers is not None]
    if not blocks:
        return None
    data = _added(blocks)
    data["moves"] = dict(sorted(data.get("moves", {}).items()))
    return Section("tiers", data)


def merge_sections(summaries: list[ShardSummary], budget: int, demand_fetch: bool,
                   price_per_mtok: float, applies: bool) -> list[Section]:  # fmt: skip
    """The single-process pipeline's sections (metrics, oracle, tiers, retrieval, warnings)
    from the shards' summaries (shards without streams may be left out)."""
    order = stream_order(summaries)
    names = [summaries[i].stream_names[j] for i, j in order]
    streams = {names[k]: summaries[i].streams[names[k]] for k, (i, j) in enumerate(order)}
    parts = merged_parts(summaries, order)
    overall = merged_overall(parts, added_counts(summaries), price_per_mtok)
    wall = max((s.wall_s for s in summaries), default=0.0)
    timing = {"wall_s": wall, "events_per_s": overall["events"] / wall if wall > 0 else None,
              "engine": summaries[0].engine if summaries else ""}  # fmt: skip
    sections = [Section("", overall=overall, streams=streams, timing=timing, stream_parts=parts),
                merged_oracle(summaries, names, order, budget, demand_fetch,
                              overall["hits"], applies)]  # fmt: skip
    tiers = merged_tiers(summaries)
    if tiers is not None:
        sections.append(tiers)
    sections.append(Section("retrieval", summaries[0].retrieval if summaries else
                            {"enabled": False}))  # fmt: skip
    over = overall["pins_over_budget_requests"]
    warnings = [f"pinned items alone exceeded the budget of {budget} tokens at {over} "
                "request(s)"] if over else []  # fmt: skip
    sections.append(Section("", warnings=warnings))
    return sections
