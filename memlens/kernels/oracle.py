"""The ``oracle`` kernel: ``policies/oracle.py`` (the offline oracle's replay of a plan) compiled.

The plan (per stream, ``(anchor event, item)`` pairs from ``memlens.oracle.solve``) is turned
into flat flags before the loop: per event, whether the plan keeps the event's item from that
event (read at writes and unpins), and per entry of ``trace.group_items``, whether it keeps
that item from that request (read when a request observes or fetches it).  In the loop every
item offered is admitted; at each of its anchors a resident, unpinned item is *protected* (out
of the heap) or *lingers* (in an indexed heap per stream keyed ``(never - next use, item)``, so
the furthest next use comes out first, ties to the smaller item, as the Python class's heap of
``(-next use, item)``).  Next uses follow the Python class: the first use at an admitted write,
the entry's next use when a request lists the item, "never" (twice the number of events)
otherwise; a lingering item's next use only changes when a request lists it, which settles it
again, so the heap always holds the current key.

When a stream is over budget with only protected items resident, the Python class raises
:class:`memlens.policy.PolicyError`; the kernel stops that stream and records the event, and
:func:`replay` raises the same error for the first such stream (the reference engine replays
streams in order), so the result is the same whether the plan is feasible or not.
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
from memlens.kernels.moves import count_group_needs, first_resident, log_move
from memlens.policy import PolicyError
from memlens.simulator import MoveKind
from memlens.trace.model import EventKind, Trace


@numba.njit(cache=True, nogil=True, inline="always")
def _settle(x, s, keep, never, nxt, h):
    """``x`` is resident and unpinned at one of its anchors: protect it or let it linger."""
    if keep:
        int_heap_remove(h, s, x)
    else:
        int_heap_set(h, s, x, never - nxt[x], x)


@numba.njit(cache=True, nogil=True, inline="always")
def _enter(x, s, e, m, kind, tokens, st, mv):
    """``x`` enters working memory (counted and logged; the caller settles it)."""
    in_wm, pinned, uses_seen, nxt, used, pinned_tok, fail = st
    in_wm[x] = 1
    used[s] += tokens[x]
    return log_move(mv, m, e, x, kind)


@numba.njit(cache=True, nogil=True, inline="always")
def _make_room(s, e, m, budget, tokens, n_uses, st, h, evictions, false_ev, mv):
    """Evict lingering items, furthest next use first, while over budget and above the pinned
    tokens; with none left, the stream fails at event ``e`` (the plan is infeasible)."""
    in_wm, pinned, uses_seen, nxt, used, pinned_tok, fail = st
    while used[s] > budget and used[s] > pinned_tok[s]:
        v = int_heap_pop(h, s)
        if v < 0:
            fail[s] = e
            break
        in_wm[v] = 0
        used[s] -= tokens[v]
        evictions[s] += 1
        if uses_seen[v] < n_uses[v]:
            false_ev[s] += 1
        m = log_move(mv, m, e, v, MoveKind.EVICT)
    return m


@numba.njit(cache=True, nogil=True, inline="always")
def _request(x, s, e, m, budget, demand_fetch, tr, plan, st, h, out, mv):
    """Request ``x``: hits and uses, the oracle's observation (next uses, anchors), then demand
    fetch (each fetched item settled at this request)."""
    ev_kind, ev_stream, ev_ref, tokens, needs_ptr, needs, group_ptr, group_items, n_uses = tr
    keep_ev, keep_pos, first_use, next_pos, never = plan
    in_wm, pinned, uses_seen, nxt, used, pinned_tok, fail = st
    need_hit, ctx_tokens, pinned_at, evictions, false_ev = out
    ctx_tokens[x] = used[s]
    pinned_at[x] = pinned_tok[s]
    lo, hi = needs_ptr[x], needs_ptr[x + 1]
    count_group_needs(lo, hi, group_ptr, group_items, in_wm, uses_seen, need_hit)
    for p in range(group_ptr[lo], group_ptr[hi]):  # observe: every listed item is an anchor
        i = group_items[p]
        nxt[i] = next_pos[p] if next_pos[p] >= 0 else never
        if in_wm[i] and not pinned[i]:
            _settle(i, s, keep_pos[p], never, nxt, h)
    if demand_fetch:
        for j in range(lo, hi):
            i = needs[j]
            if first_resident(j, group_ptr, group_items, in_wm) < 0 and tokens[i] <= budget:
                m = _enter(i, s, e, m, MoveKind.FETCH, tokens, st, mv)
                _settle(i, s, keep_pos[group_ptr[j]], never, nxt, h)
                m = _make_room(s, e, m, budget, tokens, n_uses, st, h, evictions, false_ev, mv)
                if fail[s] >= 0:
                    break
    return m


@numba.njit(cache=True, nogil=True, _nrt=False)
def _replay(tr, plan, budget, demand_fetch, out, mv, h, st):
    """The whole replay in file order; returns the number of moves logged (``st[6]``, ``fail``:
    per stream the event where it failed, or -1).  The state (heap ``h``, ``st``) is allocated
    by the caller, so the loop runs without numba's reference counting (``_nrt=False``): with
    it, arrays unpacked from tuples in the inlined helpers were counted up and down at every
    event, most of the time (measured)."""
    ev_kind, ev_stream, ev_ref, tokens, needs_ptr, needs, group_ptr, group_items, n_uses = tr
    keep_ev, keep_pos, first_use, next_pos, never = plan
    evictions, false_ev = out[3], out[4]
    in_wm, pinned, uses_seen, nxt, used, pinned_tok, fail = st
    m = 0
    for e in range(ev_kind.shape[0]):
        k, s, x = ev_kind[e], ev_stream[e], ev_ref[e]
        if fail[s] >= 0:
            continue
        if k == EventKind.WRITE:
            if tokens[x] <= budget:
                m = _enter(x, s, e, m, MoveKind.ADMIT, tokens, st, mv)
                nxt[x] = first_use[x]
                _settle(x, s, keep_ev[e], never, nxt, h)
                m = _make_room(s, e, m, budget, tokens, n_uses, st, h, evictions, false_ev, mv)
            else:
                m = log_move(mv, m, e, x, MoveKind.BYPASS)
        elif k == EventKind.REQUEST:
            m = _request(x, s, e, m, budget, demand_fetch, tr, plan, st, h, out, mv)
        elif k == EventKind.PIN:
            if not pinned[x]:
                if not in_wm[x]:
                    m = _enter(x, s, e, m, MoveKind.PIN, tokens, st, mv)
                pinned[x] = 1
                pinned_tok[s] += tokens[x]
                int_heap_remove(h, s, x)
                m = _make_room(s, e, m, budget, tokens, n_uses, st, h, evictions, false_ev, mv)
        elif k == EventKind.UNPIN:
            if pinned[x]:
                pinned[x] = 0
                pinned_tok[s] -= tokens[x]
                _settle(x, s, keep_ev[e], never, nxt, h)
                m = _make_room(s, e, m, budget, tokens, n_uses, st, h, evictions, false_ev, mv)
    return m


def plan_arrays(trace: Trace, plans: list) -> tuple:
    """The plans as the kernel reads them: ``(keep per event, keep per group_items entry, first
    use per item, next use per group_items entry, never)``."""
    n, never = trace.n_items, 2 * trace.n_events
    pairs = [np.asarray(plans[s], dtype=np.int64).reshape(-1, 2) for s in range(trace.n_streams)]
    owner = np.repeat(np.arange(len(pairs), dtype=np.int64), [len(p) for p in pairs])
    pairs = np.concatenate(pairs) if pairs else np.zeros((0, 2), np.int64)
    keep_ev = np.zeros(trace.n_events, np.uint8)
    keep_pos = np.zeros(trace.group_items.shape[0], np.uint8)
    _mark_plan(pairs, owner, trace.ev_kind, trace.ev_stream, trace.ev_ref, trace.needs_ptr,
               trace.group_ptr, trace.group_items, keep_ev, keep_pos)  # fmt: skip
    first_use = np.full(n, never, np.int64)
    anchors = trace.req_event[trace.group_request].astype(np.int64)
    _first_uses(trace.group_items, anchors, first_use)
    return keep_ev, keep_pos, first_use, trace.group_next_use, never


@numba.njit(cache=True, nogil=True)
def _mark_plan(pairs, owner, ev_kind, ev_stream, ev_ref, needs_ptr, group_ptr, group_items,
               keep_ev, keep_pos):  # fmt: skip
    """Flag every place the Python class looks a pair of stream ``owner[k]``'s plan up: a
    write or an unpin of the item at the anchor event, or an entry listing the item in the
    request at the anchor event, all in that stream.  Pairs anywhere else are never looked up
    (nor are they by the Python class, which asks each stream's own plan only)."""
    for k in range(pairs.shape[0]):
        e, i = pairs[k, 0], pairs[k, 1]
        if e < 0 or e >= ev_kind.shape[0] or ev_stream[e] != owner[k]:
            continue
        kind = ev_kind[e]
        if kind == EventKind.WRITE or kind == EventKind.UNPIN:
            if ev_ref[e] == i:
                keep_ev[e] = 1
        elif kind == EventKind.REQUEST:
            r = ev_ref[e]
            for p in range(group_ptr[needs_ptr[r]], group_ptr[needs_ptr[r + 1]]):
                if group_items[p] == i:
                    keep_pos[p] = 1


@numba.njit(cache=True, nogil=True)
def _first_uses(items, anchors, first_use):
    """Per item the first request listing it (``first_use``, "never" where none does): the
    entries are in request order, so the first one met is the earliest."""
    for p in range(items.shape[0]):
        if anchors[p] < first_use[items[p]]:
            first_use[items[p]] = anchors[p]


def _columns(trace: Trace) -> tuple[np.ndarray, ...]:
    """The trace's columns the kernel reads, every need as its group of alternatives."""
    return (trace.ev_kind, trace.ev_stream, trace.ev_ref, trace.item_tokens, trace.needs_ptr,
            trace.needs, trace.group_ptr, trace.group_items, trace.item_n_uses)  # fmt: skip


def _kernel(tr, plan, base, budget, demand_fetch, out, mv, fail) -> int:
    """Allocate the state and run the loop (what is timed): the heap, per item residency, pins,
    uses and next use, per stream used and pinned tokens and the failure event."""
    n_items, n_streams = tr[3].shape[0], base.shape[0] - 1
    z = np.zeros
    st = (z(n_items, np.uint8), z(n_items, np.uint8), z(n_items, np.int32),
          np.full(n_items, plan[4], np.int64), z(n_streams, np.int64), z(n_streams, np.int64),
          fail)  # fmt: skip
    return _replay(tr, plan, budget, demand_fetch, out, mv, new_int_heap(n_items, base), st)


def _warm_up(args: tuple) -> None:
    """Compile (or load from numba's cache) for these argument types on empty inputs, so the
    timed call does not include it; a no-op once compiled."""
    tr, plan, base, budget, demand_fetch, out, mv, fail = args
    cut = tuple(a[:0] for a in plan[:4]) + (plan[4],)
    _kernel(tuple(a[:0] for a in tr), cut, base[:1] * 0, budget, demand_fetch,
            tuple(a[:0] for a in out), mv, fail[:0])  # fmt: skip


def replay(policy, trace: Trace, budget: int, demand_fetch: bool, seed: int):
    """The ``oracle`` kernel: the reference result of ``Oracle`` (the plans its
    ``plans_for`` gives), or its :class:`PolicyError` when the plan is infeasible."""
    return replay_plans(trace, policy.plans_for(trace, budget, demand_fetch), budget, demand_fetch,
                        policy.name)  # fmt: skip


def replay_plans(trace: Trace, plans: list, budget: int, demand_fetch: bool,
                 name: str = "oracle"):  # fmt: skip
    """Replay per-stream keep plans as ``policy=oracle`` does (the solver's ``oracle_lower``)."""
    plan = plan_arrays(trace, plans)
    out = outputs(trace, demand_fetch)
    arrays = out.arrays()
    base = stream_regions(trace.item_stream, trace.n_streams)
    fail = np.full(trace.n_streams, -1, np.int64)
    args = (_columns(trace), plan, base, int(budget), bool(demand_fetch), arrays[:5], arrays[5:],
            fail)  # fmt: skip
    _warm_up(args)
    moves, wall = timed(_kernel, *args)
    failed = np.flatnonzero(fail >= 0)
    if failed.size:
        s = int(failed[0])
        raise PolicyError(f"oracle: stream {s} over budget at event {int(fail[s])} with only "
                          "protected items resident (the plan is infeasible; this is a bug in "
                          "memlens.oracle)")  # fmt: skip
    return result(out, moves, name, budget, demand_fetch, wall)
