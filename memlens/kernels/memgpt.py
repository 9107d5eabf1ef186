"""The ``memgpt`` kernel: ``policies/memgpt.py`` (MemGPT's queue manager) compiled with numba.

The queue is the resident, unpinned items in the order they entered working memory (an
intrusive doubly linked list per stream: O(1) append, removal on pin, pop of the oldest); being
needed does not reorder it, an unpin puts the item back as the newest.  Per stream the kernel
keeps what the Python class keeps: the recursive summary's size, whether the context is over
the pressure line, the pressure warnings and the flushes.

The summary counts in every request's context and against the budget as ``extra_tokens``: the
summary truncated to what the pinned items leave of the budget.  The simulator calls ``victims``
(a flush) while items plus that exceed the budget and unpinned items are resident; a flush
applies the variant's rule (``MemGPT._rule``: a fraction of the message tokens, the last
``keep_last`` messages kept back) and then evicts the oldest on until the context with the new
summary (``ceil(summary_ratio * (old summary + evicted))`` or ``summary_tokens``) fits.  The arithmetic is the Python
class's, operation for operation (the float products, ``math.ceil``, int-float comparisons), so
the flush points are the same bit for bit.
"""

from __future__ import annotations

import math

import numba
import numpy as np

from memlens.kernels.common import outputs, result, timed
from memlens.kernels.linked import append, unlink
from memlens.kernels.moves import count_group_needs, first_resident, log_move
from memlens.simulator import MoveKind
from memlens.trace.model import EventKind, Trace


@numba.njit(cache=True, nogil=True, inline="always")
def _extra(s, budget, st):
    """``MemGPT.extra_tokens``: the summary, truncated to what pinned items leave of the budget."""
    in_wm, pinned, uses_seen, used, pinned_tok, summary, under, warnings, flushes = st
    if summary[s] == 0:
        return 0
    return min(summary[s], max(0, budget - pinned_tok[s]))


@numba.njit(cache=True, nogil=True, inline="always")
def _check_pressure(s, used_now, budget, pressure_fraction, st):
    """Count a warning when the context (``used_now`` + summary) crosses the pressure line."""
    in_wm, pinned, uses_seen, used, pinned_tok, summary, under, warnings, flushes = st
    over = used_now + _extra(s, budget, st) >= pressure_fraction * budget
    if over and not under[s]:
        warnings[s] += 1
    under[s] = 1 if over else 0


@numba.njit(cache=True, nogil=True, inline="always")
def _enter(x, s, e, m, kind, tokens, budget, params, st, q, mv):
    """``x`` enters working memory: counted and logged, then MemGPT's ``insert`` (queued unless
    pinned; the pressure check sees it counted)."""
    in_wm, pinned, uses_seen, used, pinned_tok, summary, under, warnings, flushes = st
    in_wm[x] = 1
    used[s] += tokens[x]
    m = log_move(mv, m, e, x, kind)
    if not pinned[x]:
        append(x, s, q[0], q[1], q[2], q[3])
    _check_pressure(s, used[s], budget, params[0], st)
    return m


@numba.njit(cache=True, nogil=True, inline="always")
def _evict_oldest(s, e, m, tokens, n_uses, st, q, evictions, false_ev, mv):
    """The queue's oldest message leaves working memory: (next move slot, its tokens)."""
    in_wm, uses_seen = st[0], st[2]
    i = q[2][s]
    unlink(i, s, q[0], q[1], q[2], q[3])
    in_wm[i] = 0
    evictions[s] += 1
    if uses_seen[i] < n_uses[i]:
        false_ev[s] += 1
    return log_move(mv, m, e, i, MoveKind.EVICT), tokens[i]


@numba.njit(cache=True, nogil=True, inline="always")
def _summary_after(old, evicted, ratio, fixed):
    """``MemGPT._summary_after``: the fixed size, else ``ceil(ratio * (old + evicted))``."""
    if fixed:
        return fixed
    return math.ceil(ratio * (old + evicted))


@numba.njit(cache=True, nogil=True, inline="always")
def _flush(s, e, m, budget, tokens, n_uses, params, ints, st, q, evictions, false_ev, mv):
    """One ``victims`` call: the variant's rule (``MemGPT._rule``), then the oldest on until the
    context with the new summary fits; the new summary replaces the old."""
    in_wm, pinned, uses_seen, used, pinned_tok, summary, under, warnings, flushes = st
    pressure_fraction, evict_fraction, ratio = params
    keep_last, fixed, at_most = ints
    old, u = summary[s], used[s]
    target = evict_fraction * (u - pinned_tok[s] + old)
    n, i = 0, q[2][s]
    while i != -1:  # the queue's length
        n += 1
        i = q[1][i]
    taken = old if at_most else 0
    evicted, count = 0, 0
    while count < n - keep_last:
        done = taken + tokens[q[2][s]] > target if at_most else taken >= target
        if done:
            break
        m, t = _evict_oldest(s, e, m, tokens, n_uses, st, q, evictions, false_ev, mv)
        taken += t
        evicted += t
        count += 1
    new = _summary_after(old, evicted, ratio, fixed) if count else old
    while q[2][s] != -1 and (count == 0 or u - evicted + new > budget):
        m, t = _evict_oldest(s, e, m, tokens, n_uses, st, q, evictions, false_ev, mv)
        evicted += t
        count += 1
        new = _summary_after(old, evicted, ratio, fixed)
    summary[s] = new
    flushes[s] += 1
    used[s] = u - evicted
    _check_pressure(s, u - evicted, budget, pressure_fraction, st)
    return m


@numba.njit(cache=True, nogil=True, inline="always")
def _make_room(s, e, m, budget, tokens, n_uses, params, ints, st, q, evictions, false_ev, mv):
    """The simulator's loop: flush while the context is over budget and items are evictable."""
    in_wm, pinned, uses_seen, used, pinned_tok, summary, under, warnings, flushes = st
    while used[s] + _extra(s, budget, st) > budget and used[s] > pinned_tok[s]:
        if q[2][s] == -1:  # unreachable: the queue holds every resident unpinned item
            break
        m = _flush(s, e, m, budget, tokens, n_uses, params, ints, st, q, evictions, false_ev, mv)
    return m


@numba.njit(cache=True, nogil=True, inline="always")
def _request(x, s, e, m, budget, demand_fetch, tr, params, ints, st, q, out, mv):
    """Request ``x``: the context (items + summary), hits and uses, then demand fetch."""
    ev_kind, ev_stream, ev_ref, tokens, needs_ptr, needs, group_ptr, group_items, n_uses = tr
    in_wm, pinned, uses_seen, used, pinned_tok, summary, under, warnings, flushes = st
    need_hit, ctx_tokens, pinned_at, evictions, false_ev = out
    ctx_tokens[x] = used[s] + _extra(s, budget, st)
    pinned_at[x] = pinned_tok[s]
    lo, hi = needs_ptr[x], needs_ptr[x + 1]
    count_group_needs(lo, hi, group_ptr, group_items, in_wm, uses_seen, need_hit)
    if demand_fetch:
        for j in range(lo, hi):
            i = needs[j]
            if first_resident(j, group_ptr, group_items, in_wm) < 0 and tokens[i] <= budget:
                m = _enter(i, s, e, m, MoveKind.FETCH, tokens, budget, params, st, q, mv)
                m = _make_room(s, e, m, budget, tokens, n_uses, params, ints, st, q, evictions,
                               false_ev, mv)  # fmt: skip
    return m


@numba.njit(cache=True, nogil=True, _nrt=False)
def _replay(tr, params, ints, budget, demand_fetch, out, mv, q, st):
    """The whole replay in file order; returns the number of moves logged.  The state (``q``,
    ``st``) is allocated by the caller, so the loop runs without numba's reference counting
    (``_nrt=False``): with it, the arrays unpacked from tuples in the inlined helpers were
    counted up and down at every event, most of the time (measured)."""
    ev_kind, ev_stream, ev_ref, tokens, needs_ptr, needs, group_ptr, group_items, n_uses = tr
    evictions, false_ev = out[3], out[4]
    in_wm, pinned, uses_seen, used, pinned_tok = st[:5]
    m = 0
    for e in range(ev_kind.shape[0]):
        k, s, x = ev_kind[e], ev_stream[e], ev_ref[e]
        grew = False
        if k == EventKind.WRITE:
            if tokens[x] <= budget:
                m = _enter(x, s, e, m, MoveKind.ADMIT, tokens, budget, params, st, q, mv)
                grew = True
            else:
                m = log_move(mv, m, e, x, MoveKind.BYPASS)
        elif k == EventKind.REQUEST:
            m = _request(x, s, e, m, budget, demand_fetch, tr, params, ints, st, q, out, mv)
        elif k == EventKind.PIN:
            if not pinned[x]:
                if not in_wm[x]:
                    m = _enter(x, s, e, m, MoveKind.PIN, tokens, budget, params, st, q, mv)
                pinned[x] = 1
                pinned_tok[s] += tokens[x]
                unlink(x, s, q[0], q[1], q[2], q[3])
                grew = True
        elif k == EventKind.UNPIN:
            if pinned[x]:
                pinned[x] = 0
                pinned_tok[s] -= tokens[x]
                append(x, s, q[0], q[1], q[2], q[3])
                grew = True
        if grew:
            m = _make_room(s, e, m, budget, tokens, n_uses, params, ints, st, q, evictions,
                           false_ev, mv)  # fmt: skip
    return m


def _columns(trace: Trace) -> tuple[np.ndarray, ...]:
    """The trace's columns the kernel reads, every need as its group of alternatives."""
    return (trace.ev_kind, trace.ev_stream, trace.ev_ref, trace.item_tokens, trace.needs_ptr,
            trace.needs, trace.group_ptr, trace.group_items, trace.item_n_uses)  # fmt: skip


def _state(n_items: int, n_streams: int, counters: tuple) -> tuple:
    """The replay's state: the queue ``(prev, nxt, head, tail)`` and per item residency, pins
    and uses, per stream used and pinned tokens, summary, pressure flag, warnings, flushes."""
    q = (np.full(n_items, -1, np.int64), np.full(n_items, -1, np.int64),
         np.full(n_streams, -1, np.int64), np.full(n_streams, -1, np.int64))  # fmt: skip
    z = np.zeros
    st = (z(n_items, np.uint8), z(n_items, np.uint8), z(n_items, np.int32), z(n_streams, np.int64),
          z(n_streams, np.int64), z(n_streams, np.int64), z(n_streams, np.uint8), *counters)  # fmt: skip
    return q, st


def _kernel(tr, params, ints, budget, demand_fetch, out, mv, counters) -> int:
    """Allocate the state and run the loop (what is timed)."""
    q, st = _state(tr[3].shape[0], counters[0].shape[0], counters)
    return _replay(tr, params, ints, budget, demand_fetch, out, mv, q, st)


def _warm_up(args: tuple) -> None:
    """Compile (or load from numba's cache) for these argument types on empty inputs, so the
    timed call does not include it; a no-op once compiled."""
    tr, params, ints, budget, demand_fetch, out, mv, counters = args
    _kernel(tuple(a[:0] for a in tr), params, ints, budget, demand_fetch,
            tuple(a[:0] for a in out), mv, tuple(a[:0] for a in counters))  # fmt: skip


def replay(policy, trace: Trace, budget: int, demand_fetch: bool, seed: int):
    """The ``memgpt`` kernel: the reference result of ``MemGPT``.

    Like a reference replay, it leaves the last stream's ``pressure_warnings`` and ``flushes``
    on the policy (the reference engine resets them at every stream)."""
    params = (float(policy.pressure_fraction), float(policy.evict_fraction),
              float(policy.summary_ratio))  # fmt: skip
    ints = (int(policy.keep_last), int(policy.summary_tokens), bool(policy.at_most))
    out = outputs(trace, demand_fetch)
    arrays = out.arrays()
    counters = (np.zeros(trace.n_streams, np.int64), np.zeros(trace.n_streams, np.int64))
    args = (_columns(trace), params, ints, int(budget), bool(demand_fetch), arrays[:5],
            arrays[5:], counters)  # fmt: skip
    _warm_up(args)
    moves, wall = timed(_kernel, *args)
    if trace.n_streams:
        policy.pressure_warnings = int(counters[0][-1])
        policy.flushes = int(counters[1][-1])
    return result(out, moves, policy.name, budget, demand_fetch, wall)
