"""The ``learned`` kernel: the learned value scorer (``policies/learned.py``) in one compiled loop.

Everything the model says is computed before the loop, in Python and in batch, exactly as the
class does it (``anchor_keys``: LightGBM over every anchor and checkpoint, one thread): the
heap key of every point scored in place and of every need scored as missed.  The loop then
only reads arrays: an item's key is ``keys[miss[i]][row[i]]`` for its latest point, one indexed
heap per stream orders the trusted mode's victims (key, event of the point, item), and the
stream's timed rows (checkpoints and feedback) are taken in by ``catch_up`` at the same hooks
as the class (admit, observe and victims once their due event has come; every annotation).

Cold start (before ``min_feedback`` feedback events) runs the rule scorer's decisions with
``memlens.kernels.rule``'s helpers, on the class's own default ``RuleScorer``.  The feedback
count runs over the streams in replay order (the class counts it in the reference engine,
which replays the streams one after another), so this kernel replays the streams one after
another too and sorts the move log by event at the end, as the reference engine does.

Not compiled: online retraining (``retrain_every > 0``, a model trained inside the replay) and
a model that is not a ``LearnedModel`` (``LearnedScorer.kernel_supported`` sends both to the
reference engine).  With no model and no
retraining the class is the rule scorer's closures, and so is this kernel.
"""

from __future__ import annotations

import numba
import numpy as np

from memlens.kernels.common import outputs, result, stream_offsets, timed, trace_arrays, warm_up
from memlens.kernels.heap import heap_remove, heap_set, heap_top, new_heap
from memlens.kernels.moves import count_eviction, count_needs, to_fetch
from memlens.kernels.rule import (
    ACTIVE,
    JIT,
    JIT_INLINE,
    PINNED,
    annotation_values,
    rule_admit,
    rule_annotate,
    rule_insert,
    rule_observe,
    rule_params,
    rule_pin,
    rule_state,
    rule_unpin,
    rule_victim,
    sim_state,
)
from memlens.simulator import MoveKind
from memlens.trace.model import EventKind, Trace

ABSENT = 0
NEVER = 1 << 62  # no timed row left: the due event of an exhausted stream
MODE, FB_SEEN, PTR, DUE = 0, 1, 2, 3  # the counters in ``cur``


# ----------------------------------------------------------------------- the policy
@numba.njit(**JIT_INLINE)
def _push(ls, i, s):
    """``push``: item ``i`` (re-)enters the order with the key of its latest point."""
    state, row, miss, last, h, keys = ls[0], ls[1], ls[2], ls[3], ls[4], ls[5]
    state[i] = ACTIVE
    heap_set(h, s, i, keys[miss[i], row[i]], last[i])


@numba.njit(**JIT_INLINE)
def _wake(ls, sim, s):
    """Cold start ends: the stream's resident items enter the heap (pinned ones as pinned)."""
    state, cur, stream_items, stream_ptr = ls[0], ls[7], ls[13], ls[14]
    in_wm, pinned = sim[0], sim[1]
    cur[MODE] = 1
    for q in range(stream_ptr[s], stream_ptr[s + 1]):
        i = stream_items[q]
        if in_wm[i]:
            if pinned[i]:
                state[i] = PINNED
            else:
                _push(ls, i, s)


@numba.njit(**JIT_INLINE)
def _catch_up(ls, sim, s, now):
    """``catch_up``: take in the stream's timed rows up to event ``now`` (checkpoints rescore
    resident items; feedback is counted and may end cold start)."""
    state, row, miss, last, timed_rows, cur = ls[0], ls[1], ls[2], ls[3], ls[6], ls[7]
    timed_event, timed_item, timed_fb, timed_ptr = ls[8], ls[9], ls[10], ls[11]
    min_feedback = ls[12]
    k, end = cur[PTR], timed_ptr[s + 1]
    while k < end and timed_event[k] <= now:
        r, i, fb, ev = timed_rows[k], timed_item[k], timed_fb[k], timed_event[k]
        k += 1
        if cur[MODE] and not fb:  # a checkpoint: only resident items matter
            if state[i] == ACTIVE:
                row[i], miss[i], last[i] = r, 0, ev
                _push(ls, i, s)
            continue
        row[i], miss[i], last[i] = r, 0, ev
        if fb:
            cur[FB_SEEN] += 1
        if cur[MODE]:
            if state[i] == ACTIVE:
                _push(ls, i, s)
        elif fb and cur[FB_SEEN] >= min_feedback:
            _wake(ls, sim, s)
    cur[PTR] = k
    cur[DUE] = timed_event[k] if k < end else NEVER


@numba.njit(**JIT_INLINE)
def _admit(par, rs, ls, sim, i, now, fetch, s, budget):
    """``admit``: the rule scorer's in cold start; then with room yes, without only if the
    item's key is at least the smallest resident key."""
    cur, keys, write_row, compare, h = ls[7], ls[5], ls[15], ls[16], ls[4]
    used, tok = sim[3], par[7]
    if now >= cur[DUE]:
        _catch_up(ls, sim, s, now)
    if not cur[MODE]:
        return rule_admit(par, rs, i, now, fetch, s, used[s], budget)
    if not compare or used[s] + tok[i] <= budget:
        return True
    top = heap_top(h, s)
    if top < 0:
        return True
    new = keys[ls[2][i], ls[1][i]] if fetch else keys[0, write_row[i]]
    return new >= h[0][h[3][top]]


@numba.njit(**JIT_INLINE)
def _insert(par, rs, ls, i, now, s):
    """``insert``: at its write the item's point is its write; then the mode's insert."""
    row, miss, last, write_event, write_row, cur = ls[1], ls[2], ls[3], ls[18], ls[15], ls[7]
    if now == write_event[i]:
        row[i], miss[i], last[i] = write_row[i], 0, now
    if cur[MODE]:
        _push(ls, i, s)
    else:
        rule_insert(par, rs, i, now, s)


@numba.njit(**JIT_INLINE)
def _observe(par, rs, ls, sim, items_ptr, items, x, now, s):
    """``observe``: each listed item's point is this need (scored as missed if absent)."""
    state, row, miss, last, cur, need_row, in_wm = ls[0], ls[1], ls[2], ls[3], ls[7], ls[17], sim[0]
    if now >= cur[DUE]:
        _catch_up(ls, sim, s, now)
    mode = cur[MODE]
    for j in range(items_ptr[x], items_ptr[x + 1]):
        i = items[j]
        row[i], last[i] = need_row[j], now
        if mode:
            miss[i] = 0 if state[i] else 1
            if state[i] == ACTIVE:
                _push(ls, i, s)
        else:
            miss[i] = 0 if in_wm[i] else 1
    if not mode:
        rule_observe(par, rs, items_ptr, items, x, now, s)


@numba.njit(**JIT_INLINE)
def _victim(par, rs, ls, sim, s, now):
    """The next victim: the rule scorer's in cold start, else the smallest key."""
    cur, h, state = ls[7], ls[4], ls[0]
    if now >= cur[DUE]:
        _catch_up(ls, sim, s, now)
    if not cur[MODE]:
        return rule_victim(par, rs, s, now)
    i = heap_top(h, s)
    if i >= 0:  # (an unpinned resident item is always in the heap)
        heap_remove(h, s, i)
        state[i] = ABSENT
    return i


@numba.njit(**JIT_INLINE)
def _pin(rs, ls, i, s):
    if ls[7][MODE]:
        ls[0][i] = PINNED
        heap_remove(ls[4], s, i)
    else:
        rule_pin(rs, i, s)


@numba.njit(**JIT_INLINE)
def _unpin(par, rs, ls, i, s):
    if ls[7][MODE]:
        if ls[0][i] == PINNED:
            _push(ls, i, s)
    else:
        rule_unpin(par, rs, i, s)


@numba.njit(**JIT_INLINE)
def _annotate(par, rs, ls, sim, i, value, s, now):
    _catch_up(ls, sim, s, now)
    if not ls[7][MODE]:
        rule_annotate(par, rs, i, value, s)


# ------------------------------------------------------------------------ the replay
@numba.njit(**JIT_INLINE)
def _make_room(par, rs, ls, sim, out, s, e, m, budget):
    """The simulator's ``make_room``: evict the policy's victims, one at a time."""
    tok, (in_wm, _, uses_seen, used, pinned_tok, n_uses) = par[7], sim
    evictions, false_ev, mv_event, mv_item, mv_kind = out[3], out[4], out[5], out[6], out[7]
    while used[s] > budget and used[s] > pinned_tok[s]:
        v = _victim(par, rs, ls, sim, s, e)
        if v < 0:
            break
        m = count_eviction(v, s, e, m, tok, in_wm, used, uses_seen, n_uses, evictions, false_ev,
                           mv_event, mv_item, mv_kind)  # fmt: skip
    return m


@numba.njit(**JIT_INLINE)
def _enter(par, rs, ls, sim, out, x, s, e, m, move):
    """An item enters working memory (fetched or pinned): count it, log it, insert it."""
    sim[0][x] = 1
    sim[3][s] += par[7][x]
    out[5][m], out[6][m], out[7][m] = e, x, move
    _insert(par, rs, ls, x, e, s)
    return m + 1


@numba.njit(**JIT_INLINE)
def _request(req, par, rs, ls, sim, out, x, s, e, m, budget, demand_fetch):
    """A request (as ``memlens.kernels.rule._request``, with this policy's hooks)."""
    needs_ptr, needs, alt_need, alt_ptr, alt_items, items_ptr, items, req_g0 = req
    tok, (in_wm, _, uses_seen, used, pinned_tok, _) = par[7], sim
    need_hit, ctx_tokens, pinned_at = out[0], out[1], out[2]
    g0 = req_g0[x]
    lo, hi = needs_ptr[x], needs_ptr[x + 1]
    ctx_tokens[x] = used[s]
    pinned_at[x] = pinned_tok[s]
    count_needs(lo, hi, g0, needs, alt_need, alt_ptr, alt_items, in_wm, uses_seen, need_hit)
    _observe(par, rs, ls, sim, items_ptr, items, x, e, s)
    if not demand_fetch:
        return m
    g = g0
    for j in range(lo, hi):
        i, g = to_fetch(j, g, needs, alt_need, alt_ptr, alt_items, in_wm, tok, budget)
        if i < 0 or not _admit(par, rs, ls, sim, i, e, True, s, budget):
            continue
        m = _enter(par, rs, ls, sim, out, i, s, e, m, MoveKind.FETCH)
        m = _make_room(par, rs, ls, sim, out, s, e, m, budget)
    return m


@numba.njit(**JIT_INLINE)
def _start(ls, s):
    """Stream ``s`` begins: the mode as the feedback seen so far says, its timed rows."""
    cur, timed_event, timed_ptr, min_feedback = ls[7], ls[8], ls[11], ls[12]
    cur[MODE] = 1 if cur[FB_SEEN] >= min_feedback else 0
    k = timed_ptr[s]
    cur[PTR] = k
    cur[DUE] = timed_event[k] if k < timed_ptr[s + 1] else NEVER


@numba.njit(**JIT_INLINE)
def _event(ev_kind, ev_ref, ann_value, req, par, rs, ls, sim, out, e, s, m, budget, df):
    """One event of stream ``s`` (the reference engine's handlers); returns the move count."""
    tok, (in_wm, pinned, _, used, pinned_tok, _) = par[7], sim
    k, x = ev_kind[e], ev_ref[e]
    if k == EventKind.WRITE:
        out[5][m], out[6][m] = e, x
        if tok[x] <= budget and _admit(par, rs, ls, sim, x, e, False, s, budget):
            out[7][m] = MoveKind.ADMIT
            in_wm[x] = 1
            used[s] += tok[x]
            _insert(par, rs, ls, x, e, s)
            return _make_room(par, rs, ls, sim, out, s, e, m + 1, budget)
        out[7][m] = MoveKind.BYPASS
        return m + 1
    if k == EventKind.REQUEST:
        return _request(req, par, rs, ls, sim, out, x, s, e, m, budget, df)
    if k == EventKind.PIN:
        if pinned[x]:
            return m
        if in_wm[x] == 0:
            m = _enter(par, rs, ls, sim, out, x, s, e, m, MoveKind.PIN)
        pinned[x] = 1
        pinned_tok[s] += tok[x]
        _pin(rs, ls, x, s)
        return _make_room(par, rs, ls, sim, out, s, e, m, budget)
    if k == EventKind.UNPIN:
        if not pinned[x]:
            return m
        pinned[x] = 0
        pinned_tok[s] -= tok[x]
        _unpin(par, rs, ls, x, s)
        return _make_room(par, rs, ls, sim, out, s, e, m, budget)
    _annotate(par, rs, ls, sim, x, ann_value[e], s, e)
    return m


@numba.njit(**JIT)
def _replay(ev_kind, ev_ref, ann_value, stream_order, stream_ptr, req, par, rs, ls, sim, out,
            budget, demand_fetch):  # fmt: skip
    """The streams one after another (see the module docstring), each in its event order."""
    m = 0
    for s in range(stream_ptr.shape[0] - 1):
        _start(ls, s)
        for q in range(stream_ptr[s], stream_ptr[s + 1]):
            e = stream_order[q]
            m = _event(ev_kind, ev_ref, ann_value, req, par, rs, ls, sim, out, e, s, m, budget,
                       demand_fetch)  # fmt: skip
    return m


def _csr(parts: list[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """Concatenated ``parts`` and their bounds."""
    ptr = np.zeros(len(parts) + 1, np.int64)
    np.cumsum([len(p) for p in parts], out=ptr[1:])
    flat = np.concatenate(parts).astype(np.int64) if parts else np.zeros(0, np.int64)
    return flat, ptr


_CACHE_KEY = "_memlens_learned_kernel"  # on the trace, next to the class's own cache


def _trace_columns(policy, trace: Trace) -> dict:
    """The read-only arrays of the class's anchor table (``policy.anchor_table``) the loop
    reads (cached on the trace, like the table itself: every budget and setting shares them)."""
    cache = trace.__dict__.setdefault(_CACHE_KEY, {})
    if "columns" in cache:
        return cache["columns"]
    table, n = policy.anchor_table(trace), trace.n_items
    timed_rows, timed_ptr = _csr(table.stream_timed)
    slot, base = stream_offsets(trace)
    stream_items = np.empty(n, np.int64)
    stream_items[slot] = np.arange(n, dtype=np.int64)  # each stream's items in index order
    write_row = table.write_row.astype(np.int64)
    event_of = table.points.event.astype(np.int64)
    cache["columns"] = {
        "timed_rows": timed_rows, "timed_ptr": timed_ptr, "timed_event": event_of[timed_rows],
        "timed_item": table.points.item[timed_rows].astype(np.int64),
        "timed_fb": table.is_feedback[timed_rows].astype(np.uint8),
        "stream_items": stream_items, "stream_base": base.astype(np.int64),
        "write_row": write_row, "write_event": event_of[write_row],
        "need_row": table.need_row.astype(np.int64), "n_rows": len(table.points),
    }  # fmt: skip
    return cache["columns"]


def _keys(policy, trace: Trace, budget: int) -> np.ndarray:
    """``keys[miss, row]``: the class's batch keys (``policy.anchor_key_arrays``, cached on
    the trace)."""
    return policy.anchor_key_arrays(trace, policy.model, budget, policy.decay, policy.size_exponent)


def learned_state(policy, trace: Trace, budget: int) -> tuple:
    """The per-trace arrays and fresh replay state; the layout the helpers index (``ls[k]``)
    is listed in the code."""
    c, n = _trace_columns(policy, trace), trace.n_items
    return (
        np.zeros(n, np.uint8),  # 0 state: ABSENT, ACTIVE or PINNED (trusted mode)
        c["write_row"].copy(),  # 1 row: each item's latest point
        np.zeros(n, np.uint8),  # 2 miss: that point is a need scored as missed
        np.zeros(n, np.int64),  # 3 last: the event of that point (ties)
        new_heap(n, c["stream_base"]),  # 4 the trusted mode's heap, one region per stream
        _keys(policy, trace, budget),  # 5 keys[miss, row]
        c["timed_rows"],  # 6 each stream's checkpoint and feedback rows, in event order
        np.zeros(4, np.int64),  # 7 cur: mode, feedback seen, next timed row, its event
        c["timed_event"], c["timed_item"], c["timed_fb"],  # 8-10 per timed row: event, item,
        c["timed_ptr"],  # 11                                feedback or not
        int(policy.min_feedback),  # 12
        c["stream_items"], c["stream_base"],  # 13, 14
        c["write_row"],  # 15
        bool(policy.admit_compare),  # 16
        c["need_row"],  # 17 per item a request lists: its need's row
        c["write_event"],  # 18 per item: the event of its write's row
    )  # fmt: skip


def _arguments(policy, trace: Trace, budget: int, demand_fetch: bool) -> tuple:
    cols = trace_arrays(trace)
    out = outputs(trace, demand_fetch)
    order, ptr = _csr(trace.stream_events)
    req_g0 = np.searchsorted(cols[6], cols[4][:-1]).astype(np.int64)
    req = (*cols[4:9], trace.request_items_ptr.astype(np.int64, copy=False),
           trace.group_items.astype(np.int32, copy=False), req_g0)  # fmt: skip
    args = (cols[0], cols[2], annotation_values(trace), order, ptr, req,
            rule_params(policy._rule, trace), rule_state(trace),
            learned_state(policy, trace, budget), sim_state(trace, cols[9]), out.arrays(),
            int(budget), bool(demand_fetch))  # fmt: skip
    return out, args


def replay(policy, trace: Trace, budget: int, demand_fetch: bool, seed: int):
    """The ``learned`` kernel: the reference engine's result."""
    if policy.retrain_every:
        raise ValueError("the learned kernel does not retrain online (retrain_every > 0)")
    if policy.model is None:  # never leaves cold start: the rule scorer's closures
        from memlens.kernels.rule import replay_rule

        return replay_rule(policy._rule, trace, budget, demand_fetch, policy.name)
    warm_up(_replay, lambda tiny: _arguments(policy, tiny, 1, False)[1])
    out, args = _arguments(policy, trace, budget, demand_fetch)
    m, wall = timed(_replay, *args)
    res = result(out, m, policy.name, budget, demand_fetch, wall)
    order = np.argsort(res.move_event, kind="stable")  # streams were replayed in turn
    res.move_event, res.move_item, res.move_kind = (
        res.move_event[order], res.move_item[order], res.move_kind[order])  # fmt: skip
    return res
