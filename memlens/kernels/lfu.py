"""The ``lfu`` kernel: ``policies/lfu.py`` (least frequently used) compiled with numba.

The Python class keeps a lazily invalidated heap of ``(count, last use, item)`` over the
resident, unpinned items; its valid entries are exactly one per such item with its current
count and recency, so this kernel keeps the same order in an indexed heap per stream
(``memlens.kernels.heap``: the count as the float key, the last use as the tie-break, then the
item).  Counts are in-cache counts: 1 on entering working memory, +1 per request served by the
item (a pinned item keeps counting), forgotten on eviction.

``victims(excess)`` pops the smallest entries until ``excess`` tokens are freed; the simulator
evicts them in that order and asks again only while still over budget, so popping one item at a
time while over budget and above the pinned tokens is the same sequence of evictions.

Events are replayed in file order, streams interleaved, each with its own heap region, token
counters and pins; the request semantics (hits decided before any update, the touch on the
first resident alternative, demand fetch of the first-listed one) are the reference engine's.
"""

from __future__ import annotations

import numba
import numpy as np

from memlens.kernels.common import outputs, result, timed
from memlens.kernels.intheap import (
    int_heap_pop,
    int_heap_remove,
    int_heap_set,
    new_int_heap,
    stream_regions,
)
from memlens.kernels.moves import count_group_uses, first_resident, log_move
from memlens.simulator import MoveKind
from memlens.trace.model import EventKind, Trace


@numba.njit(cache=True, nogil=True, inline="always")
def _enter(x, s, e, m, kind, tokens, st, h, mv):
    """``x`` enters working memory (the simulator's count, the move, then LFU's ``insert``)."""
    in_wm, pinned, uses_seen, count, last, used, pinned_tok = st
    in_wm[x] = 1
    used[s] += tokens[x]
    count[x] = 1
    last[x] = e
    int_heap_set(h, s, x, 1, e * tokens.shape[0] + x)
    return log_move(mv, m, e, x, kind)


@numba.njit(cache=True, nogil=True, inline="always")
def _make_room(s, e, m, budget, tokens, n_uses, st, h, evictions, false_ev, mv):
    """Evict the least frequently used while over budget and above the pinned tokens."""
    in_wm, pinned, uses_seen, count, last, used, pinned_tok = st
    while used[s] > budget and used[s] > pinned_tok[s]:
        v = int_heap_pop(h, s)
        in_wm[v] = 0
        used[s] -= tokens[v]
        evictions[s] += 1
        if uses_seen[v] < n_uses[v]:
            false_ev[s] += 1
        m = log_move(mv, m, e, v, MoveKind.EVICT)
    return m


@numba.njit(cache=True, nogil=True, inline="always")
def _request(x, s, e, m, budget, demand_fetch, tr, st, h, out, mv):
    """Request ``x``: hits and touches (count + 1, recency now), uses, then demand fetch."""
    ev_kind, ev_stream, ev_ref, tokens, needs_ptr, needs, group_ptr, group_items, n_uses = tr
    in_wm, pinned, uses_seen, count, last, used, pinned_tok = st
    need_hit, ctx_tokens, pinned_at, evictions, false_ev = out
    ctx_tokens[x] = used[s]
    pinned_at[x] = pinned_tok[s]
    lo, hi = needs_ptr[x], needs_ptr[x + 1]
    for j in range(lo, hi):  # touches move nothing in or out: hits stay as decided
        i = first_resident(j, group_ptr, group_items, in_wm)
        if i >= 0:
            need_hit[j] = 1
            count[i] += 1
            last[i] = e
            if not pinned[i]:
                int_heap_set(h, s, i, count[i], e * tokens.shape[0] + i)
        count_group_uses(j, group_ptr, group_items, uses_seen)
    if demand_fetch:
        for j in range(lo, hi):
            i = needs[j]
            if first_resident(j, group_ptr, group_items, in_wm) < 0 and tokens[i] <= budget:
                m = _enter(i, s, e, m, MoveKind.FETCH, tokens, st, h, mv)
                m = _make_room(s, e, m, budget, tokens, n_uses, st, h, evictions, false_ev, mv)
    return m


@numba.njit(cache=True, nogil=True, _nrt=False)
def _replay(tr, budget, demand_fetch, out, mv, h, st):
    """The whole replay in file order; returns the number of moves logged.  The state (heap
    ``h``, ``st``) is allocated by the caller, so the loop runs without numba's reference
    counting (``_nrt=False``): with it, arrays unpacked from tuples in the inlined helpers were
    counted up and down at every event, most of the time (measured)."""
    ev_kind, ev_stream, ev_ref, tokens, needs_ptr, needs, group_ptr, group_items, n_uses = tr
    evictions, false_ev = out[3], out[4]
    n_items = tokens.shape[0]
    in_wm, pinned, uses_seen, count, last, used, pinned_tok = st
    m = 0
    for e in range(ev_kind.shape[0]):
        k, s, x = ev_kind[e], ev_stream[e], ev_ref[e]
        if k == EventKind.WRITE:
            if tokens[x] <= budget:
                m = _enter(x, s, e, m, MoveKind.ADMIT, tokens, st, h, mv)
                m = _make_room(s, e, m, budget, tokens, n_uses, st, h, evictions, false_ev, mv)
            else:
                m = log_move(mv, m, e, x, MoveKind.BYPASS)
        elif k == EventKind.REQUEST:
            m = _request(x, s, e, m, budget, demand_fetch, tr, st, h, out, mv)
        elif k == EventKind.PIN:
            if not pinned[x]:
                if not in_wm[x]:
                    m = _enter(x, s, e, m, MoveKind.PIN, tokens, st, h, mv)
                pinned[x] = 1
                pinned_tok[s] += tokens[x]
                int_heap_remove(h, s, x)
                m = _make_room(s, e, m, budget, tokens, n_uses, st, h, evictions, false_ev, mv)
        elif k == EventKind.UNPIN:
            if pinned[x]:
                pinned[x] = 0
                pinned_tok[s] -= tokens[x]
                int_heap_set(h, s, x, count[x], last[x] * n_items + x)  # as it was
                m = _make_room(s, e, m, budget, tokens, n_uses, st, h, evictions, false_ev, mv)
    return m


def _columns(trace: Trace) -> tuple[np.ndarray, ...]:
    """The trace's columns the kernel reads, every need as its group of alternatives."""
    return (trace.ev_kind, trace.ev_stream, trace.ev_ref, trace.item_tokens, trace.needs_ptr,
            trace.needs, trace.group_ptr, trace.group_items, trace.item_n_uses)  # fmt: skip


def _kernel(tr, base, budget, demand_fetch, out, mv) -> int:
    """Allocate the state and run the loop (what is timed): the heap, per item residency,
    pins, uses, count and last use, per stream used and pinned tokens."""
    n_items, n_streams = tr[3].shape[0], base.shape[0] - 1
    z = np.zeros
    st = (z(n_items, np.uint8), z(n_items, np.uint8), z(n_items, np.int32), z(n_items, np.int64),
          z(n_items, np.int64), z(n_streams, np.int64), z(n_streams, np.int64))  # fmt: skip
    return _replay(tr, budget, demand_fetch, out, mv, new_int_heap(n_items, base), st)


def _warm_up(args: tuple) -> None:
    """Compile (or load from numba's cache) for these argument types on empty inputs, so the
    timed call does not include it; a no-op once compiled."""
    tr, base, budget, demand_fetch, out, mv = args
    _kernel(tuple(a[:0] for a in tr), base[:1] * 0, budget, demand_fetch,
            tuple(a[:0] for a in out), mv)  # fmt: skip


def _run(trace: Trace, budget: int, demand_fetch: bool):
    """Replay with the compiled loop: ``(buffers, moves, wall)``."""
    out = outputs(trace, demand_fetch)
    arrays = out.arrays()
    base = stream_regions(trace.item_stream, trace.n_streams)
    args = (_columns(trace), base, int(budget), bool(demand_fetch), arrays[:5], arrays[5:])
    _warm_up(args)
    moves, wall = timed(_kernel, *args)
    return out, moves, wall


def replay(policy, trace: Trace, budget: int, demand_fetch: bool, seed: int):
    """The ``lfu`` kernel: the reference result of ``LFU``."""
    if trace.n_events * max(trace.n_items, 1) >= 2**63:  # the tie-break last * n_items + item
        raise ValueError("the lfu kernel needs events x items < 2**63; use engine=reference")
    out, moves, wall = _run(trace, budget, demand_fetch)
    return result(out, moves, policy.name, budget, demand_fetch, wall)
