"""Compiled replay kernels for the queue policies (FIFO window and LRU).

The reference simulator (``memlens.simulator``) is the definition; this module is an
optimisation of it for the two policies whose whole state is one queue.  It keeps an intrusive
doubly linked list over item indices (``prev``/``nxt`` arrays, per-stream head and tail), so
every operation is O(1) and the cost per event does not depend on how many items are held.
``tests/kernels/test_fastpath.py`` checks it against the reference event for event (hits, context
tokens, evictions and the whole move log) on random traces.

A need may be a group of alternative items (trace format 1.1; ``memlens.trace.model``): the kernel
walks the trace's exception groups (``alt_need``/``alt_ptr``/``alt_items``) with a cursor, as
the needs come in file order, so a version 1 trace (no groups) pays one comparison per request.
The semantics are the reference engine's: a hit when any alternative is resident, the LRU touch
on the first resident one, demand fetch of the first-listed one.

Compiled with numba (``cache=True``: the first call in a fresh checkout compiles for a few
seconds and stores the result in ``__pycache__``).
"""

from __future__ import annotations

import time

import numba
import numpy as np

from memlens.kernels.linked import append, unlink
from memlens.kernels.moves import cursor_at, to_fetch
from memlens.simulator import MoveKind, SimResult
from memlens.trace.model import EventKind, Trace


@numba.njit(cache=True, nogil=True)
def _replay(
    ev_kind, ev_stream, ev_ref, item_tokens, needs_ptr, needs, alt_need, alt_ptr, alt_items,
    n_uses, n_streams, budget, demand_fetch, lru, need_hit, ctx_tokens, pinned_at, evictions,
    false_ev, mv_event, mv_item, mv_kind,
):  # fmt: skip
    """The whole replay in one loop, long because splitting it costs speed: numba passes every
    array argument of a helper as a struct per call, and a helper per event kind halved the
    events per second (measured); allocating the state outside cost a fifth on LRU."""
    n_items = item_tokens.shape[0]
    prev, nxt = np.full(n_items, -1, np.int32), np.full(n_items, -1, np.int32)
    in_wm, pinned = np.zeros(n_items, np.uint8), np.zeros(n_items, np.uint8)
    uses_seen = np.zeros(n_items, np.int32)
    head, tail = np.full(n_streams, -1, np.int64), np.full(n_streams, -1, np.int64)
    used, pinned_tok = np.zeros(n_streams, np.int64), np.zeros(n_streams, np.int64)
    m = 0
    n_alt = alt_need.shape[0]
    g0 = 0  # cursor: the first group of alternatives not before the current request
    for e in range(ev_kind.shape[0]):
        k = ev_kind[e]
        s = ev_stream[e]
        x = ev_ref[e]
        grew = False
        if k == EventKind.WRITE:
            tok = item_tokens[x]
            mv_event[m] = e
            mv_item[m] = x
            if tok <= budget:
                append(x, s, prev, nxt, head, tail)
                in_wm[x] = 1
                used[s] += tok
                mv_kind[m] = MoveKind.ADMIT
                grew = True
            else:
                mv_kind[m] = MoveKind.BYPASS
            m += 1
        elif k == EventKind.REQUEST:
            lo = needs_ptr[x]
            hi = needs_ptr[x + 1]
            ctx_tokens[x] = used[s]
            pinned_at[x] = pinned_tok[s]
            g0 = cursor_at(g0, alt_need, lo)
            g = g0
            for j in range(lo, hi):  # touches move nothing in or out: hits stay as decided
                i = needs[j]
                a, b = 0, 0  # the other alternatives: alt_items[a:b]
                if g < n_alt and alt_need[g] == j:
                    a, b = alt_ptr[g], alt_ptr[g + 1]
                    g += 1
                hit = i if in_wm[i] else -1
                for q in range(a, b):
                    if hit < 0 and in_wm[alt_items[q]]:
                        hit = alt_items[q]
                    uses_seen[alt_items[q]] += 1
                if hit >= 0:
                    need_hit[j] = 1
                    if lru:
                        unlink(hit, s, prev, nxt, head, tail)
                        append(hit, s, prev, nxt, head, tail)
                uses_seen[i] += 1
            if demand_fetch:
                g = g0
                for j in range(lo, hi):
                    i, g = to_fetch(j, g, needs, alt_need, alt_ptr, alt_items, in_wm, item_tokens,
                                    budget)  # fmt: skip
                    if i >= 0:
                        m = _enter(i, s, e, m, MoveKind.FETCH, item_tokens, in_wm, used, prev, nxt, head, tail,
                                   mv_event, mv_item, mv_kind)  # fmt: skip
                        m = _make_room(
                            s, e, m, budget, item_tokens, n_uses, uses_seen, in_wm, pinned,
                            used, pinned_tok, prev, nxt, head, tail, evictions, false_ev,
                            mv_event, mv_item, mv_kind,
                        )  # fmt: skip
        elif k == EventKind.PIN:
            if pinned[x] == 0:
                if in_wm[x] == 0:
                    m = _enter(x, s, e, m, MoveKind.PIN, item_tokens, in_wm, used, prev, nxt, head, tail,
                               mv_event, mv_item, mv_kind)  # fmt: skip
                pinned[x] = 1
                pinned_tok[s] += item_tokens[x]
                grew = True
        elif k == EventKind.UNPIN:
            if pinned[x] == 1:
                pinned[x] = 0
                pinned_tok[s] -= item_tokens[x]
                grew = True
        if grew and used[s] > budget:
            m = _make_room(
                s, e, m, budget, item_tokens, n_uses, uses_seen, in_wm, pinned, used, pinned_tok,
                prev, nxt, head, tail, evictions, false_ev, mv_event, mv_item, mv_kind,
            )  # fmt: skip
    return m


@numba.njit(cache=True, nogil=True, inline="always")
def _enter(x, s, e, m, kind, item_tokens, in_wm, used, prev, nxt, head, tail, mv_event, mv_item,
           mv_kind):  # fmt: skip
    """``x`` joins the newest end of its stream's queue (fetched or pinned) and the move is
    logged; the next slot.  Inlined, so the loop pays no call for it."""
    append(x, s, prev, nxt, head, tail)
    in_wm[x] = 1
    used[s] += item_tokens[x]
    mv_event[m] = e
    mv_item[m] = x
    mv_kind[m] = kind
    return m + 1


@numba.njit(cache=True, nogil=True)
def _make_room(
    s, e, m, budget, item_tokens, n_uses, uses_seen, in_wm, pinned, used, pinned_tok,
    prev, nxt, head, tail, evictions, false_ev, mv_event, mv_item, mv_kind,
):  # fmt: skip
    """Evict from the queue's oldest end until the stream fits.  The eviction's counts are
    written out rather than ``moves.count_eviction``: inlined here, that helper cost the LRU
    kernel 15-20% of its events per second (measured), for the same results."""
    while used[s] > budget and used[s] > pinned_tok[s]:
        v = head[s]
        while pinned[v]:
            v = nxt[v]
        unlink(v, s, prev, nxt, head, tail)
        in_wm[v] = 0
        used[s] -= item_tokens[v]
        evictions[s] += 1
        if uses_seen[v] < n_uses[v]:
            false_ev[s] += 1
        mv_event[m] = e
        mv_item[m] = v
        mv_kind[m] = MoveKind.EVICT
        m += 1
    return m


def _warm_up() -> None:
    i64, i32, i8, u8 = np.int64, np.int32, np.int8, np.uint8
    z = np.zeros
    _replay(
        z(0, i8), z(0, i32), z(0, i32), z(0, i64), z(1, i64), z(0, i32), z(0, i64), z(1, i64),
        z(0, i32), z(0, i32), 1, 1,
        False, False, z(0, u8), z(0, i64), z(0, i64), z(1, i64), z(1, i64),
        z(1, i64), z(1, i32), z(1, i8),
    )  # fmt: skip


def _shrink(a: np.ndarray, m: int) -> np.ndarray:
    """``a[:m]`` without a copy: the buffer is cut in place (its capacity was an upper bound
    on the moves, about twice the real number; a copy would hold both at once)."""
    a.resize(m, refcheck=False)
    return a


def simulate_fast(trace: Trace, kernel: str, name: str, budget: int, demand_fetch: bool):
    """Replay with the compiled kernel ``kernel`` ("fifo" or "lru"); same result as reference."""
    if kernel not in ("fifo", "lru"):
        raise ValueError(f"unknown queue kernel {kernel!r}")
    n_pins = int(np.count_nonzero(trace.ev_kind == EventKind.PIN))
    # moves: one per write, one per fetch or pin, and at most one eviction per entry into WM
    fetches = trace.n_references if demand_fetch else 0
    cap = 2 * (trace.n_items + fetches + n_pins) + 1
    need_hit = np.zeros(trace.n_references, np.uint8)
    ctx = np.zeros(trace.n_requests, np.int64)
    pinned_at = np.zeros(trace.n_requests, np.int64)
    evictions = np.zeros(trace.n_streams, np.int64)
    false_ev = np.zeros(trace.n_streams, np.int64)
    mv_event = np.empty(cap, np.int64)
    mv_item = np.empty(cap, np.int32)
    mv_kind = np.empty(cap, np.int8)
    # uses per item, for false evictions: counted here, not cached on the trace (it is only
    # needed while the kernel runs)
    n_uses = np.bincount(trace.group_items, minlength=trace.n_items).astype(np.int32)
    args = (
        trace.ev_kind, trace.ev_stream, trace.ev_ref, trace.item_tokens, trace.needs_ptr,
        trace.needs, trace.alt_need.astype(np.int64, copy=False),
        trace.alt_ptr.astype(np.int64, copy=False), trace.alt_items.astype(np.int32, copy=False),
        n_uses, trace.n_streams, budget, bool(demand_fetch),
        kernel == "lru", need_hit, ctx, pinned_at, evictions, false_ev,
        mv_event, mv_item, mv_kind,
    )  # fmt: skip
    if not _replay.signatures:  # compile (or load from cache) outside the timed region
        _warm_up()
    t0 = time.perf_counter()
    m = _replay(*args)
    wall = time.perf_counter() - t0
    return SimResult(
        budget=budget,
        demand_fetch=bool(demand_fetch),
        policy=name,
        engine="fast",
        need_hit=need_hit,
        context_tokens=ctx,
        pinned_tokens=pinned_at,
        evictions=evictions,
        false_evictions=false_ev,
        move_event=_shrink(mv_event, m),
        move_item=_shrink(mv_item, m),
        move_kind=_shrink(mv_kind, m),
        wall_s=wall,
    )


def replay_fifo(policy, trace: Trace, budget: int, demand_fetch: bool, seed: int) -> SimResult:
    """The ``fifo`` kernel: window and token_buffer."""
    return simulate_fast(trace, "fifo", policy.name, budget, demand_fetch)


def replay_lru(policy, trace: Trace, budget: int, demand_fetch: bool, seed: int) -> SimResult:
    """The ``lru`` kernel."""
    return simulate_fast(trace, "lru", policy.name, budget, demand_fetch)
