"""The keep-interval walk of ``memlens.oracle.model`` compiled, for traces without alternatives.

``model._walk`` is the readable definition (dicts per item, one Python step per event); this
is the same walk over arrays, event for event, for version 1 traces (a trace with groups of
alternatives takes the Python walk).  ``tests/oracle/test_oracle_segments.py`` checks both give the same
model.  Per-item state lives in scratch arrays the size of the trace's items, kept between
streams and reset after each walk for the items the stream touched, so a trace of many small
streams does not pay an allocation of every item per stream.
"""

from __future__ import annotations

import numba
import numpy as np

from memlens.trace.model import PIN, REQUEST, UNPIN, WRITE, Trace

_SCRATCH: dict[int, tuple[np.ndarray, np.ndarray, np.ndarray]] = {}


def _scratch(n_items: int):
    if n_items not in _SCRATCH:
        _SCRATCH.clear()
        _SCRATCH[n_items] = (np.full(n_items, -1, np.int64), np.full(n_items, -2, np.int64),
                             np.zeros(n_items, np.uint8))  # fmt: skip
    return _SCRATCH[n_items]


@numba.njit(cache=True, nogil=True)
def _walk_arrays(events, kinds, refs, tokens, needs_ptr, needs, budget, demand_fetch,
                 anchor, chain, pinned, gaps, pins):  # fmt: skip
    """Fill ``gaps`` (item, start, end, prev, ref rows) and ``pins`` (event, pinned tokens
    rows); returns (gaps, pin changes, references, forced hits)."""
    n_g = n_p = n_refs = forced = 0
    pinned_tok = 0
    for q in range(events.shape[0]):
        e, k, x = events[q], kinds[q], refs[q]
        if k == WRITE:
            anchor[x] = e
            chain[x] = -1 if tokens[x] <= budget else -2
        elif k == REQUEST:
            for j in range(needs_ptr[x], needs_ptr[x + 1]):
                i = needs[j]
                n_refs += 1
                if pinned[i]:
                    forced += 1
                    continue
                g = -2
                if chain[i] != -2 and anchor[i] >= 0:
                    gaps[n_g, 0], gaps[n_g, 1], gaps[n_g, 2] = i, anchor[i], e
                    gaps[n_g, 3], gaps[n_g, 4] = chain[i], j
                    g = n_g
                    n_g += 1
                anchor[i] = e
                if demand_fetch:
                    chain[i] = -1 if tokens[i] <= budget else -2
                else:
                    chain[i] = g
        elif (k == PIN and not pinned[x]) or (k == UNPIN and pinned[x]):
            pinned[x] = k == PIN
            pinned_tok += tokens[x] if k == PIN else -tokens[x]
            pins[n_p, 0], pins[n_p, 1] = e, pinned_tok
            n_p += 1
            if k == PIN:
                anchor[x] = -1
            else:
                anchor[x] = e
                chain[x] = -1 if tokens[x] <= budget else -2
    return n_g, n_p, n_refs, forced


@numba.njit(cache=True, nogil=True)
def _reset(kinds, refs, needs_ptr, needs, anchor, chain, pinned):
    """Put the scratch entries of every item the stream touched back to their initial values."""
    for q in range(kinds.shape[0]):
        x = refs[q]
        if kinds[q] == REQUEST:
            for j in range(needs_ptr[x], needs_ptr[x + 1]):
                anchor[needs[j]], chain[needs[j]], pinned[needs[j]] = -1, -2, 0
        else:
            anchor[x], chain[x], pinned[x] = -1, -2, 0


def walk_v1(trace: Trace, stream: int, budget: int, demand_fetch: bool) -> dict:
    """The walk's outputs for one stream of a version 1 trace, as arrays (``model._Walk``'s
    fields: gap columns, pin profile, references, forced hits)."""
    events = trace.stream_events[stream].astype(np.int64)
    kinds, refs = trace.ev_kind[events], trace.ev_ref[events]
    req = refs[kinds == REQUEST]
    n_refs_max = int((trace.needs_ptr[req + 1] - trace.needs_ptr[req]).sum()) if req.size else 0
    gaps = np.empty((n_refs_max, 5), np.int64)
    pins = np.empty((int(np.count_nonzero((kinds == PIN) | (kinds == UNPIN))), 2), np.int64)
    anchor, chain, pinned = _scratch(trace.n_items)
    try:
        n_g, n_p, n_refs, forced = _walk_arrays(
            events, kinds, refs, trace.item_tokens, trace.needs_ptr, trace.needs, int(budget),
            bool(demand_fetch), anchor, chain, pinned, gaps, pins,
        )  # fmt: skip
    finally:
        _reset(kinds, refs, trace.needs_ptr, trace.needs, anchor, chain, pinned)
    g = gaps[:n_g]
    return {"g_item": g[:, 0], "g_start": g[:, 1], "g_end": g[:, 2], "g_prev": g[:, 3],
            "g_ref": g[:, 4], "pin_ev": pins[:n_p, 0], "pin_tok": pins[:n_p, 1],
            "links": [], "n_refs": n_refs, "forced": forced}  # fmt: skip
