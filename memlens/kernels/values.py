"""The values a scoring policy's event log shows, computed after the replay, in one compiled pass.

The event log (``memlens.analyze.eventlog``) shows, for the rule scorer, MemoryBank and MemoryOS
heat, each item's value at every insert and eviction, and before and after every use and
annotation.  Those values were read during the replay by wrapping the policy's Python methods
(``ValueProbe``), which a compiled kernel never calls: a logged replay had to run on the
reference engine, 80 times slower.  But the three policies' values depend on the replay only
through *when an item entered working memory*, which the move log records; the rest is the
trace (the uses of each request, the annotations).  So this pass walks the trace in file order
with the move log beside it and keeps just the value state (per item: uses or strength or
visits, and the time its clock last restarted), after a replay on any engine.

Per event, the pass mirrors the order in which the reference engine calls the policy: a
request's values before its uses, the uses, its values after; an annotation's value before and
after; then the event's moves in log order (an entering item's value after its insert, an
evicted one's at its eviction).  The arithmetic is the policies' own, operation for operation
(``math.exp`` is the same C library call), so the records equal the probe's bit for bit
(``tests/analyze/test_eventlog_values.py``).  Per-item state is all the policies keep between
events, and an item belongs to one stream, so file order gives the same state as the
reference engine's stream-by-stream order.

Modes: :data:`RULE` (``value``: an annotation's value overrides; else
``max(floor, (base + min(cap, boost * uses)) * exp(-lam * (t - anchor)))``, the clock restarted
at every insert and use), :data:`MEMORYBANK` (``retention = exp(-(t - learned) / unit /
strength)``, nan before the item is first learned), :data:`HEAT` (``alpha * visits + beta *
length + gamma * exp(-(t - seen) / tau)``, nan before it is first seen).
"""

from __future__ import annotations

import math

import numba
import numpy as np

from memlens.simulator import MOVE_ADMIT, MOVE_EVICT, MOVE_FETCH, MOVE_PIN, MOVE_PROMOTE
from memlens.trace.model import EventKind

RULE, MEMORYBANK, HEAT = 0, 1, 2
# what a record says (the probe's P_* codes)
P_INSERT, P_EVICT, P_USE, P_ANNOTATE = 0, 1, 2, 3
_REQUEST, _ANNOTATE = int(EventKind.REQUEST), int(EventKind.ANNOTATE)
_ENTER = (MOVE_ADMIT, MOVE_FETCH, MOVE_PROMOTE, MOVE_PIN)


@numba.njit(cache=True)
def _sampled(item, event, rate):
    """``memlens.analyze.eventlog.sampled``: the same 32-bit hash."""
    if rate >= 1.0:
        return True
    h = (np.uint64(item) * np.uint64(0x9E3779B1)) ^ (np.uint64(event) * np.uint64(0x85EBCA77))
    return float(h & np.uint64(0xFFFFFFFF)) < rate * 4294967296.0


@numba.njit(cache=True)
def _value(mode, i, t, p, typ, base, length, a, b, c, known, over):
    """Item ``i``'s value at time ``t`` (``a``, ``b``: per-item state; see the module docs)."""
    if mode == RULE:
        if not math.isnan(over[i]):
            return over[i]
        ty = typ[i]
        g = p[2] * b[i]  # use_boost * uses
        bb = base[i] + (p[1] if not g < p[1] else g)  # + min(use_cap, ...)
        v = bb * math.exp(-p[4 + ty] * (t - a[i]))
        fl = p[4 + int(p[0]) + ty]
        return v if v > fl else fl
    if not known[i]:
        return math.nan
    if mode == MEMORYBANK:
        return math.exp(-(t - a[i]) / p[0] / b[i])
    return p[1] * c[i] + p[2] * length[i] + p[3] * math.exp(-(t - a[i]) / p[0])


@numba.njit(cache=True)
def _insert(mode, i, t, p, a, b, known):
    if mode == MEMORYBANK:
        if not known[i]:
            a[i], b[i], known[i] = t, p[1], True  # learned, strength (initial)
    else:
        a[i] = t  # the rule's anchor, heat's seen
        known[i] = True


@numba.njit(cache=True)
def _use(mode, i, t, p, a, b, c, known):
    if mode == RULE:
        b[i] += 1.0
    elif mode == MEMORYBANK:
        b[i] = (b[i] if known[i] else p[1]) + p[2]
    else:
        c[i] += 1.0
    a[i] = t
    known[i] = True


@numba.njit(cache=True)
def _records(mode, p, ev_kind, ev_ref, ev_t, needs_ptr, needs, uses_ptr, uses, ann_value,
             ann_item, mv_event, mv_item, mv_kind, typ, base, length, n_items, rate, enter):  # fmt: skip
    cap = mv_event.size + needs.size + ann_item.size + 1
    r_ev = np.empty(cap, np.int64)
    r_it = np.empty(cap, np.int64)
    r_what = np.empty(cap, np.int64)
    r_b = np.empty(cap, np.float64)
    r_a = np.empty(cap, np.float64)
    a = np.zeros(n_items)  # anchor / learned / seen
    b = np.zeros(n_items)  # uses / strength
    c = np.zeros(n_items)  # visits
    known = np.zeros(n_items, np.bool_)
    over = np.full(n_items, np.nan)
    before = np.empty(needs.size + 1)
    n = 0
    m = 0  # the next move
    for e in range(ev_kind.size):
        t = ev_t[e]
        k = ev_kind[e]
        if k == _REQUEST:
            x = ev_ref[e]
            for j in range(needs_ptr[x], needs_ptr[x + 1]):
                before[j - needs_ptr[x]] = _value(mode, needs[j], t, p, typ, base, length, a,
                                                  b, c, known, over)  # fmt: skip
            for j in range(uses_ptr[x], uses_ptr[x + 1]):
                _use(mode, uses[j], t, p, a, b, c, known)
            for j in range(needs_ptr[x], needs_ptr[x + 1]):
                i = needs[j]
                if _sampled(i, e, rate):
                    r_ev[n], r_it[n], r_what[n] = e, i, P_USE
                    r_b[n] = before[j - needs_ptr[x]]
                    r_a[n] = _value(mode, i, t, p, typ, base, length, a, b, c, known, over)
                    n += 1
        elif k == _ANNOTATE:
            i = ev_ref[e]
            v0 = _value(mode, i, t, p, typ, base, length, a, b, c, known, over)
            if mode == RULE and not math.isnan(ann_value[e]):
                over[i] = ann_value[e]
            if _sampled(i, e, rate):
                r_ev[n], r_it[n], r_what[n], r_b[n] = e, i, P_ANNOTATE, v0
                r_a[n] = _value(mode, i, t, p, typ, base, length, a, b, c, known, over)
                n += 1
        while m < mv_event.size and mv_event[m] == e:
            i, kind = mv_item[m], mv_kind[m]
            m += 1
            entering = False
            for q in enter:
                entering |= kind == q
            if entering:
                _insert(mode, i, t, p, a, b, known)
                what = P_INSERT
            elif kind == MOVE_EVICT:
                what = P_EVICT
            else:
                continue
            v = _value(mode, i, t, p, typ, base, length, a, b, c, known, over)
            r_ev[n], r_it[n], r_what[n], r_b[n], r_a[n] = e, i, what, v, v
            n += 1
    return r_ev[:n], r_it[:n], r_what[:n], r_b[:n], r_a[:n]


def records(mode: int, params: np.ndarray, trace, result, rate: float, typ=None, base=None,
            length=None) -> dict[str, np.ndarray]:  # fmt: skip
    """The value records of a finished replay (``result`` of ``trace``), as the probe's
    columns (event, item, what, before, after).  ``params``: RULE ``[n_types, use_cap, use_boost, 0,
    lam per type, floor per type]``; MEMORYBANK ``[unit_s, initial, increment]``; HEAT ``[tau_s, alpha,
    beta, gamma]``; ``typ``/``base`` (RULE) and ``length`` (HEAT) per item."""
    n = trace.n_items
    ann_value = np.full(trace.n_events, np.nan)
    for e, (v, _) in trace.annotations.items():
        if v is not None:
            ann_value[e] = float(v)
    ann_item = np.flatnonzero(trace.ev_kind == EventKind.ANNOTATE)
    f64 = np.zeros(n) if base is None else np.asarray(base, np.float64)
    out = _records(
        int(mode), np.asarray(params, np.float64), trace.ev_kind.astype(np.int64, copy=False),
        trace.ev_ref.astype(np.int64, copy=False), trace.ev_t.astype(np.float64, copy=False),
        trace.needs_ptr.astype(np.int64, copy=False), trace.needs.astype(np.int64, copy=False),
        trace.request_items_ptr.astype(np.int64, copy=False),
        trace.group_items.astype(np.int64, copy=False), ann_value,
        ann_item.astype(np.int64), result.move_event.astype(np.int64, copy=False),
        result.move_item.astype(np.int64, copy=False),
        result.move_kind.astype(np.int64, copy=False),
        np.zeros(n, np.int64) if typ is None else np.asarray(typ, np.int64), f64,
        np.zeros(n) if length is None else np.asarray(length, np.float64), n, float(rate),
        np.array(_ENTER, np.int64),
    )  # fmt: skip
    ev, it, what, before, after = out
    return {"event": ev, "item": it.astype(np.int32), "what": what.astype(np.int8),
            "before": before, "after": after}  # fmt: skip
