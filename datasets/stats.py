"""``memlens data stats``: what a trace contains and how hard it is.

Besides counts, the one number that says most about difficulty is the *evidence age in tokens*:
for every needed reference, how many tokens were written in the same stream after the needed
item and up to the request.  A policy with a context budget of B tokens that keeps the most
recent items can satisfy a reference only if its age is below about B, so the age distribution
against the budget decides how hard a trace is (the ``older than`` shares below).
"""

from __future__ import annotations

import numpy as np

from memlens.trace import ANNOTATE, EVENT_KINDS, ITEM_TYPES, PIN, REQUEST, UNPIN, WRITE, Trace

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
