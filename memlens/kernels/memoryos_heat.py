"""The ``memoryos_heat`` kernel: MemoryOS (``policies/memoryos_heat.py``), both variants, compiled.

The class keeps a short-term FIFO queue of written pages in front of a mid-term store and,
when over budget, evicts the mid-term item with the smallest key ``(heat, recency stamp)``
(``variant="paper"``) or ``(visits, entry stamp)`` (``variant="code"``), else the oldest
unpinned queue page.  This kernel keeps the same state in flat arrays: per stream a region
holding its queue in write order (every item is written once, so a region of the stream's
item count never overflows; pages that left the queue are skipped by a head pointer and a
per-item place mark) and a region holding its mid-term items in any order (swap removal),
scanned whole for the victim: the stamps are unique, so the minimum does not depend on the
scan order.  The heat is computed with the class's operations in the class's order
(``math.exp`` is the same C library call), the stamps with the same counter, so every choice
is the class's, event for event.

The scan costs O(mid-term items of the stream) per eviction, like the class's; the streams of
the benchmark traces hold at most a few hundred items, where that is not worth a tree.
"""

from __future__ import annotations

import math

import numba
import numpy as np

from memlens.kernels.common import outputs, result, timed
from memlens.kernels.intheap import stream_regions
from memlens.kernels.moves import count_eviction, count_group_uses, first_resident, log_move
from memlens.simulator import MoveKind
from memlens.trace.model import EventKind, Trace

NOWHERE, SHORT_TERM, MID_TERM = 0, 1, 2


@numba.njit(cache=True, nogil=True)
def _heat(i, t, pol, visits, pages, seen):
    """The class's ``heat(i, t)``: same operations, same order."""
    return pol[0] * visits[i] + pol[1] * pages[i] + pol[2] * math.exp((seen[i] - t) / pol[3])


@numba.njit(cache=True, nogil=True)
def _enter_mid_term(x, s, t, base, pst, it):
    """``x`` enters mid-term memory at time ``t``: visits 0, its length, a new stamp."""
    place, visits, pages, seen, stamp, pos, length = it
    q, q_head, q_tail, mlist, m_n, seq = pst
    place[x] = MID_TERM
    visits[x] = 0
    pages[x] = length[x]
    seen[x] = t
    stamp[x] = seq[0]
    seq[0] += 1
    pos[x] = m_n[s]
    mlist[base[s] + m_n[s]] = x
    m_n[s] += 1


@numba.njit(cache=True, nogil=True)
def _leave_mid_term(v, s, base, pst, it):
    place, visits, pages, seen, stamp, pos, length = it
    q, q_head, q_tail, mlist, m_n, seq = pst
    m_n[s] -= 1
    last = mlist[base[s] + m_n[s]]
    mlist[base[s] + pos[v]] = last
    pos[last] = pos[v]
    place[v] = NOWHERE


@numba.njit(cache=True, nogil=True)
def _insert(x, s, e, is_write, t, stm_pages, base, pst, it):
    """The class's ``insert``: a write joins the queue (pushing its oldest page to mid-term
    when longer than ``stm_pages``); anything else enters mid-term memory."""
    place = it[0]
    q, q_head, q_tail, mlist, m_n, seq = pst
    if not is_write:
        _enter_mid_term(x, s, t, base, pst, it)
        return
    q[base[s] + q_tail[s]] = x
    q_tail[s] += 1
    place[x] = SHORT_TERM
    n = 0
    for k in range(q_head[s], q_tail[s]):
        if place[q[base[s] + k]] == SHORT_TERM:
            n += 1
    if n > stm_pages:
        while place[q[base[s] + q_head[s]]] != SHORT_TERM:
            q_head[s] += 1
        old = q[base[s] + q_head[s]]
        q_head[s] += 1
        _enter_mid_term(old, s, t, base, pst, it)


@numba.njit(cache=True, nogil=True)
def _victim(s, t, lfu, pol, pinned, base, pst, it):
    """The class's ``victims``: the smallest mid-term key, else the oldest unpinned queue page."""
    place, visits, pages, seen, stamp, pos, length = it
    q, q_head, q_tail, mlist, m_n, seq = pst
    best, best_score, best_stamp = -1, 0.0, 0
    for k in range(m_n[s]):
        i = mlist[base[s] + k]
        if pinned[i]:
            continue
        sc = float(visits[i]) if lfu else _heat(i, t, pol, visits, pages, seen)
        if best < 0 or sc < best_score or (sc == best_score and stamp[i] < best_stamp):
            best, best_score, best_stamp = i, sc, stamp[i]
    if best >= 0:
        _leave_mid_term(best, s, base, pst, it)
        return best
    for k in range(q_head[s], q_tail[s]):
        i = q[base[s] + k]
        if place[i] == SHORT_TERM and not pinned[i]:
            place[i] = NOWHERE
            return i
    return -1


@numba.njit(cache=True, nogil=True)
def _make_room(s, e, m, t, budget, lfu, pol, tokens, n_uses, st, out, mv, base, pst, it):
    in_wm, pinned, uses_seen, used, pinned_tok = st
    while used[s] > budget and used[s] > pinned_tok[s]:
        v = _victim(s, t, lfu, pol, pinned, base, pst, it)
        m = count_eviction(v, s, e, m, tokens, in_wm, used, uses_seen, n_uses, out[3], out[4],
                           mv[0], mv[1], mv[2])  # fmt: skip
    return m


@numba.njit(cache=True, nogil=True)
def _touch(i, t, lfu, pol, it, seq):
    """The class's ``touch``: a mid-term visit (and, under the paper, the promotion check)."""
    place, visits, pages, seen, stamp, pos, length = it
    if place[i] != MID_TERM:
        return
    visits[i] += 1
    if lfu:
        return
    seen[i] = t
    stamp[i] = seq[0]
    seq[0] += 1
    if _heat(i, t, pol, visits, pages, seen) >= pol[4]:
        pages[i] = 0.0


@numba.njit(cache=True, nogil=True)
def _request(x, s, e, m, t, budget, demand_fetch, lfu, pol, tr, st, out, mv, base, pst, it):
    """Request ``x``: hits and touches (decided before any update), uses, then demand fetch."""
    tokens, needs_ptr, needs, group_ptr, group_items, n_uses = tr
    in_wm, pinned, uses_seen, used, pinned_tok = st
    out[1][x] = used[s]
    out[2][x] = pinned_tok[s]
    lo, hi = needs_ptr[x], needs_ptr[x + 1]
    for j in range(lo, hi):
        i = first_resident(j, group_ptr, group_items, in_wm)
        if i >= 0:
            out[0][j] = 1
            _touch(i, t, lfu, pol, it, pst[5])
        count_group_uses(j, group_ptr, group_items, uses_seen)
    if demand_fetch:
        for j in range(lo, hi):
            i = needs[j]
            if first_resident(j, group_ptr, group_items, in_wm) < 0 and tokens[i] <= budget:
                in_wm[i] = 1
                used[s] += tokens[i]
                m = log_move(mv, m, e, i, MoveKind.FETCH)
                _enter_mid_term(i, s, t, base, pst, it)
                m = _make_room(s, e, m, t, budget, lfu, pol, tokens, n_uses, st, out, mv, base,
                               pst, it)  # fmt: skip
    return m


@numba.njit(cache=True, nogil=True)
def _replay(ev, tr, budget, demand_fetch, lfu, stm_pages, pol, out, mv, base, st, pst, it):
    """The whole replay in file order; returns the number of moves logged."""
    ev_kind, ev_stream, ev_ref, ev_t = ev
    tokens, n_uses = tr[0], tr[5]
    in_wm, pinned, uses_seen, used, pinned_tok = st
    m = 0
    for e in range(ev_kind.shape[0]):
        k, s, x, t = ev_kind[e], ev_stream[e], ev_ref[e], ev_t[e]
        if k == EventKind.WRITE:
            if tokens[x] > budget:
                m = log_move(mv, m, e, x, MoveKind.BYPASS)
                continue
            m = log_move(mv, m, e, x, MoveKind.ADMIT)
            in_wm[x] = 1
            used[s] += tokens[x]
            _insert(x, s, e, True, t, stm_pages, base, pst, it)
        elif k == EventKind.REQUEST:
            m = _request(x, s, e, m, t, budget, demand_fetch, lfu, pol, tr, st, out, mv, base,
                         pst, it)  # fmt: skip
            continue
        elif k == EventKind.PIN:
            if pinned[x]:
                continue
            if not in_wm[x]:
                in_wm[x] = 1
                used[s] += tokens[x]
                m = log_move(mv, m, e, x, MoveKind.PIN)
                _insert(x, s, e, False, t, stm_pages, base, pst, it)
            pinned[x] = 1
            pinned_tok[s] += tokens[x]
        elif k == EventKind.UNPIN:
            if not pinned[x]:
                continue
            pinned[x] = 0
            pinned_tok[s] -= tokens[x]
        else:
            continue
        m = _make_room(s, e, m, t, budget, lfu, pol, tokens, n_uses, st, out, mv, base, pst, it)
    return m


def _state(trace: Trace, lengths: np.ndarray):
    """Zeroed per-item and per-stream state: (st, pst, it)."""
    n, ns = trace.n_items, trace.n_streams
    z = np.zeros
    st = (z(n, np.uint8), z(n, np.uint8), z(n, np.int32), z(ns, np.int64), z(ns, np.int64))
    pst = (z(n, np.int64), z(ns, np.int64), z(ns, np.int64), z(n, np.int64), z(ns, np.int64),
           z(1, np.int64))  # fmt: skip
    it = (z(n, np.uint8), z(n, np.int64), z(n, np.float64), z(n, np.float64), z(n, np.int64),
          z(n, np.int64), np.asarray(lengths, np.float64))  # fmt: skip
    return st, pst, it


def _arguments(policy, trace: Trace, budget: int, demand_fetch: bool):
    """(outputs, the loop's arguments) for one replay."""
    out = outputs(trace, demand_fetch)
    arrays = out.arrays()
    ev = (trace.ev_kind, trace.ev_stream, trace.ev_ref, trace.ev_t.astype(np.float64))
    tr = (trace.item_tokens, trace.needs_ptr, trace.needs, trace.group_ptr, trace.group_items,
          trace.item_n_uses)  # fmt: skip
    pol = np.array([policy.alpha, policy.beta, policy.gamma, policy.tau_s, policy.threshold])
    base = stream_regions(trace.item_stream, trace.n_streams)
    st, pst, it = _state(trace, np.asarray(policy.item_lengths(trace)))
    args = (ev, tr, int(budget), bool(demand_fetch), bool(policy.lfu),
            int(policy.short_term_pages), pol, arrays[:5], arrays[5:], base, st, pst, it)  # fmt: skip
    return out, args


def replay(policy, trace: Trace, budget: int, demand_fetch: bool, seed: int):
    """The ``memoryos_heat`` kernel: the reference result of ``MemoryOSHeat``."""
    if not _replay.signatures:
        from memlens.trace.io import trace_from_events

        one = [{"event": "write", "id": "a", "tokens": 1, "type": "llm_thought", "stream": ""}]
        _replay(*_arguments(policy, trace_from_events(one, source="<warm-up>"), 1, False)[1])
    out, args = _arguments(policy, trace, budget, demand_fetch)
    m, wall = timed(_replay, *args)
    return result(out, m, policy.name, budget, demand_fetch, wall)
