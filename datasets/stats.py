"""``memlens data stats``: what a trace contains and how hard it is.

Besides counts, the one number that says most about difficulty is the *evidence age in tokens*:
for every needed reference, how many tokens were written in the same stream after the needed
item and up to the request.  A policy with a context budget of B tokens that keeps the most
recent items can satisfy a reference only if its age is below about B, so the age distribution
against the budget decides how hard a trace is (the ``older than`` shares below).
"""

from __future__ import annotations

import math

import numpy as np

from memlens.trace.model import ANNOTATE, EVENT_KINDS, ITEM_TYPES, PIN, REQUEST, UNPIN, WRITE, Trace

PERCENTILES = (10, 25, 50, 75, 90, 95, 99)
BUDGETS = (512, 1024, 2048, 4096, 8192)


def evidence_age_tokens(trace: Trace) -> np.ndarray:
    """Age in tokens of every needed reference (same order as ``trace.needs``).

    Age = tokens of the writes in the stream strictly after the needed item's write, up to the
    request.  Computed with one per-stream prefix sum over events, so it is linear in the trace.
    """
    is_write = trace.ev_kind == WRITE
    tok = np.zeros(trace.n_events, dtype=np.int64)
    tok[is_write] = trace.item_tokens[trace.ev_ref[is_write]]
    order = np.argsort(trace.ev_stream, kind="stable")  # each stream's events, in replay order
    cum = np.empty(trace.n_events, dtype=np.int64)
    cum[order] = np.cumsum(tok[order])  # differences within a stream are per-stream sums
    req_ev = trace.req_event[trace.need_request]
    item_ev = trace.item_event[trace.needs]
    return cum[req_ev] - cum[item_ev]


def trace_stats(trace: Trace) -> dict:
    """A JSON-ready summary of ``trace`` (see module docstring)."""
    kinds = np.bincount(trace.ev_kind, minlength=len(EVENT_KINDS))
    counts = np.bincount(trace.item_type, minlength=len(ITEM_TYPES))
    sums = np.bincount(trace.item_type, weights=trace.item_tokens, minlength=len(ITEM_TYPES))
    tokens = {}
    for k, name in enumerate(ITEM_TYPES):
        n = int(counts[k])
        tokens[name] = {
            "items": n,
            "tokens": int(sums[k]),
            "mean": round(float(sums[k]) / n, 1) if n else 0.0,
        }
    age = evidence_age_tokens(trace)
    needs_count = trace.req_needs_count
    out = {
        "source": trace.source,
        "header": {
            k: v
            for k, v in trace.header.items()
            if k in ("converter", "generator", "tokenizer", "placement", "evidence")
        },
        "events": trace.n_events,
        "streams": trace.n_streams,
        "writes": int(kinds[WRITE]),
        "requests": int(kinds[REQUEST]),
        "requests_without_needs": int((needs_count == 0).sum()),
        "references": trace.n_references,
        "needs_per_request_mean": round(float(needs_count.mean()), 3) if trace.n_requests else 0.0,
        "pins": int(kinds[PIN]),
        "unpins": int(kinds[UNPIN]),
        "annotations": int(kinds[ANNOTATE]),
        "tokens_total": int(trace.item_tokens.sum()),
        "tokens_by_type": tokens,
        "evidence_age_tokens": _distribution(age),
        "share_older_than_budget": {
            str(b): round(float((age >= b).mean()), 4) if age.size else 0.0 for b in BUDGETS
        },
    }
    return out


def _distribution(x: np.ndarray) -> dict:
    if x.size == 0:
        return {"n": 0}
    pct = np.percentile(x, PERCENTILES)
    return {
        "n": int(x.size),
        "mean": round(float(x.mean()), 1),
        "min": int(x.min()),
        **{f"p{p}": round(float(v), 1) for p, v in zip(PERCENTILES, pct)},
        "max": int(x.max()),
    }


def format_stats(s: dict) -> str:
    """Human-readable rendering of :func:`trace_stats`."""
    lines = [f"trace      {s['source']}"]
    if s["header"]:
        lines.append("header     " + ", ".join(f"{k}={v}" for k, v in s["header"].items()))
    lines.append(
        f"events     {s['events']:,}  (writes {s['writes']:,}, requests {s['requests']:,}, "
        f"pins {s['pins']:,}, unpins {s['unpins']:,}, annotations {s['annotations']:,})"
    )
    lines.append(f"streams    {s['streams']:,}")
    lines.append(
        f"requests   {s['requests']:,}  ({s['references']:,} needed references, "
        f"{s['needs_per_request_mean']} per request, {s['requests_without_needs']:,} without needs)"
    )
    lines.append(f"tokens     {s['tokens_total']:,}")
    lines.append(f"  {'type':<12} {'items':>10} {'tokens':>13} {'mean':>9}")
    for name, v in s["tokens_by_type"].items():
        lines.append(f"  {name:<12} {v['items']:>10,} {v['tokens']:>13,} {v['mean']:>9,.1f}")
    age = s["evidence_age_tokens"]
    lines.append(
        "evidence age in tokens (tokens written in the stream between a needed write and its request)"
    )
    if age["n"]:
        keys = ["min", *(f"p{p}" for p in PERCENTILES), "max", "mean"]
        lines.append("  " + "  ".join(f"{k}={age[k]:,.0f}" for k in keys))
        lines.append(
            "  share older than budget: "
            + "  ".join(f">={b}: {v:.1%}" for b, v in s["share_older_than_budget"].items())
        )
    else:
        lines.append("  (no needed references)")
    return "\n".join(lines)


# ------------------------------------------------------------------------- comparing
# ``memlens data stats --compare REAL GENERATED``: how close a generated trace is to a real one,
# row by row, each row with a distance in [0, 1] (an absolute difference of two shares, or the
# two-sample Kolmogorov-Smirnov statistic of two distributions), so "how close" is a number and
# a calibration can minimise the mean of the rows.
QUANTILES = (10, 25, 50, 75, 90)


def ks_statistic(a: np.ndarray, b: np.ndarray) -> float:
    """Two-sample Kolmogorov-Smirnov statistic: the largest gap between the two empirical CDFs
    (0 = same distribution, 1 = disjoint); 1.0 when exactly one sample is empty, 0.0 when both."""
    if a.size == 0 or b.size == 0:
        return float(a.size != b.size)
    a, b = np.sort(a), np.sort(b)
    points = np.concatenate([a, b])
    fa = np.searchsorted(a, points, side="right") / a.size
    fb = np.searchsorted(b, points, side="right") / b.size
    return float(np.abs(fa - fb).max())


def reuse_distance_tokens(trace: Trace) -> np.ndarray:
    """Reuse distance in tokens of every need, a group of alternatives counted once (trace
    format 1.1): the age of its youngest alternative, the one a recency policy keeps longest.
    Without alternatives this is :func:`evidence_age_tokens`."""
    age = evidence_age_tokens(trace)
    if not getattr(trace, "has_alternatives", False):
        return age
    youngest = age.copy()
    for j, items in trace.alternative_groups.items():
        r = int(trace.need_request[j])
        youngest[j] = min(_age_of(trace, i, r) for i in items)
    return youngest


def _age_of(trace: Trace, item: int, r: int) -> int:
    """Tokens written in request ``r``'s stream after ``item`` and before the request."""
    lo, hi = int(trace.item_event[item]), int(trace.req_event[r])
    writes = np.flatnonzero((trace.ev_kind[lo + 1 : hi] == WRITE)
                            & (trace.ev_stream[lo + 1 : hi] == trace.req_stream[r])) + lo + 1  # fmt: skip
    return int(trace.item_tokens[trace.ev_ref[writes]].sum())


def reuse_profile(trace: Trace) -> dict:
    """The samples and shares :func:`compare_stats` compares, for one trace.

    ``reuse_p``: share of items of each type that some later request needs (as a need or one of
    a need's alternatives); ``type_share``:
    share of items of each type; ``needed_type_share``: share of needs whose (first-listed)
    item is of each type; ``tokens``: token sizes of the items of each type; ``needs``: needs per
    request; ``distance``: reuse distance in tokens (:func:`reuse_distance_tokens`);
    ``request_share``: requests per event.
    """
    used = trace.item_n_uses > 0
    n_items, n_refs = max(1, trace.n_items), max(1, trace.n_references)
    needed_type = trace.item_type[trace.needs]
    prof: dict = {"reuse_p": {}, "type_share": {}, "needed_type_share": {}, "tokens": {}}
    for k, name in enumerate(ITEM_TYPES):
        of_type = trace.item_type == k
        n = int(of_type.sum())
        prof["reuse_p"][name] = float(used[of_type].mean()) if n else 0.0
        prof["type_share"][name] = n / n_items
        prof["needed_type_share"][name] = int((needed_type == k).sum()) / n_refs
        prof["tokens"][name] = trace.item_tokens[of_type]
    prof["needs"] = np.asarray(trace.req_needs_count)
    prof["distance"] = reuse_distance_tokens(trace)
    prof["request_share"] = trace.n_requests / max(1, trace.n_events)
    return prof


def _share_row(metric: str, a: float, b: float) -> dict:
    return {"metric": metric, "real": round(a, 4), "generated": round(b, 4),
            "distance": round(abs(a - b), 4), "measure": "abs diff"}  # fmt: skip


def _dist_row(metric: str, a: np.ndarray, b: np.ndarray, summary) -> dict:
    return {"metric": metric, "real": summary(a), "generated": summary(b),
            "distance": round(ks_statistic(a, b), 4), "measure": "KS"}  # fmt: skip


def _mean(x: np.ndarray) -> float:
    return round(float(x.mean()), 2) if x.size else 0.0


def _quantiles(x: np.ndarray) -> dict:
    if x.size == 0:
        return {}
    return {f"p{q}": round(float(v), 1) for q, v in zip(QUANTILES, np.percentile(x, QUANTILES))}


def compare_profiles(real: dict, gen: dict) -> dict:
    """Rows comparing two :func:`reuse_profile` results, and their mean distance."""
    rows = [_share_row(f"reuse p {t}", real["reuse_p"][t], gen["reuse_p"][t]) for t in ITEM_TYPES]
    rows += [_dist_row(f"tokens {t} (mean)", real["tokens"][t], gen["tokens"][t], _mean)
             for t in ITEM_TYPES]  # fmt: skip
    rows += [_share_row(f"items {t}", real["type_share"][t], gen["type_share"][t])
             for t in ITEM_TYPES]  # fmt: skip
    rows += [_share_row(f"needed {t}", real["needed_type_share"][t], gen["needed_type_share"][t])
             for t in ITEM_TYPES]  # fmt: skip
    rows.append(_share_row("requests per event", real["request_share"], gen["request_share"]))
    rows.append(_dist_row("needs per request (mean)", real["needs"], gen["needs"], _mean))
    rows.append(_dist_row("reuse distance (tokens)", real["distance"], gen["distance"], _quantiles))
    return {"rows": rows, "mean_distance": round(float(np.mean([r["distance"] for r in rows])), 4)}


def compare_stats(real: Trace, generated: Trace) -> dict:
    """:func:`compare_profiles` of two traces, with their sources (JSON-ready)."""
    out = compare_profiles(reuse_profile(real), reuse_profile(generated))
    return {"real": real.source, "generated": generated.source, **out}


def _compare_lines(r: dict) -> list[str]:
    """One row (a distribution's quantiles: one line per quantile under it)."""
    head = f"{r['metric']:<26}"
    tail = f"{r['distance']:.3f} {r['measure']}"
    if not isinstance(r["real"], dict):
        return [f"{head} {r['real']:>12,.4g} {r['generated']:>12,.4g}   {tail}"]
    lines = [f"{head} {'':>12} {'':>12}   {tail}"]
    for q in dict.fromkeys([*r["real"], *r["generated"]]):
        a, b = r["real"].get(q, math.nan), r["generated"].get(q, math.nan)
        lines.append(f"{'  ' + q:<26} {a:>12,.0f} {b:>12,.0f}")
    return lines


def format_compare(c: dict) -> str:
    """Side-by-side table of :func:`compare_stats`; the last line is the mean distance."""
    lines = [f"real       {c['real']}", f"generated  {c['generated']}", "",
             f"{'metric':<26} {'real':>12} {'generated':>12}   distance"]  # fmt: skip
    for r in c["rows"]:
        lines += _compare_lines(r)
    lines.append(f"{'mean distance':<26} {'':>12} {'':>12}   {c['mean_distance']:.3f}")
    return "\n".join(lines)
