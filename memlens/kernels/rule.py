"""The ``rule`` kernel: the rule scorer (``policies/rule.py``) replayed in one compiled loop.

The policy class is the specification; this module repeats its decisions with arrays.  Its five
heap lanes (four decaying types keyed ``log B + lam * anchor``, one static lane of floored or
annotated constant values) are one indexed heap (``memlens.kernels.heap``) whose regions are
(lane, stream) pairs: region ``lane * n_streams + stream``, as long as that stream has items of
that type (the static region: items of the stream).  An item is in at most one lane
(``lane[i]``, -1 for none), so one position array serves every lane and an update replaces
the item's entry where the class leaves a stale one behind (same live entries, same tops).

Every float is computed as the class computes it: ``np.log`` of the static values and floors
in numpy (passed in), ``math.log``/``math.exp`` per event (the same C library calls), the
victim's log-domain comparison ``k - lam * t``, the floor test ``lv <= log_floor`` and the
admission test against ``v * (1 + TIE_RTOL)``.  The cold start of the learned scorer runs
these same helpers (``memlens.kernels.learned``).

The arguments travel in tuples (numba passes a tuple's arrays like separate arguments, and a
helper's signature stays short): ``par`` the policy's per-trace numbers (:func:`rule_params`),
``rs`` its per-item state and heap (:func:`rule_state`), ``sim`` the simulator's own state
(:func:`sim_state`), ``out`` the result arrays (``memlens.kernels.common.outputs``) and ``req``
what a request reads (:func:`request_arrays`).
"""

from __future__ import annotations

import math

import numba
import numpy as np

from memlens.kernels.common import outputs, result, timed, trace_arrays, warm_up
from memlens.kernels.heap import heap_remove, heap_set, new_heap
from memlens.kernels.moves import count_eviction, count_needs, cursor_at, to_fetch
from memlens.simulator import MoveKind
from memlens.trace.features import static_value
from memlens.trace.model import ANNOTATE, ITEM_TYPES, EventKind, Trace

N_TYPES = len(ITEM_TYPES)
STATIC = N_TYPES  # the lane of constant values, as in the class
ABSENT, ACTIVE, PINNED = 0, 1, 2
TIE_RTOL = 1e-9  # policies/rule.py's TIE_RTOL (the test module checks they are equal)
#: Compiled without numba's reference counting (``_nrt=False``): the helpers read their arrays
#: out of tuples, and every such read was an atomic incref/decref pair the optimiser could not
#: remove (measured: 0.7M -> 3M events/s with nothing to evict).  Nothing here allocates.
JIT = {"cache": True, "nogil": True, "_nrt": False}
#: The per-event helpers are inlined into the loop by numba (``inline="always"``): a call
#: copies each array of the tuples it takes (about seven words each, some fifty arrays), which
#: halved the speed (measured, CPU time on the agent trace at budget 1024: rule 4.6M -> 6.1M
#: events/s, learned 2.0M -> 4.2M).  The victim search and the admission peek stay calls: they
#: run only when something must go, and inlining them at every site cost minutes of compiling.
JIT_INLINE = {**JIT, "inline": "always"}


# --------------------------------------------------------------------------- the policy
@numba.njit(**JIT_INLINE)
def rule_insert(par, rs, i, now, s):
    """``RuleScorer.insert``: item ``i`` (stream ``s``) enters the order as used at ``now``."""
    ev_t, base, log_base, item_type, lam = par[0], par[1], par[2], par[3], par[4]
    use_cap, use_boost = par[8][0], par[8][1]
    uses, anchor, last, state, lane, override, h, n_streams = rs[:8]
    t = ev_t[now]
    anchor[i] = t
    last[i] = now
    state[i] = ACTIVE
    ov = override[i]
    if not math.isnan(ov):
        to, k = STATIC, ov
    else:
        n = uses[i]
        if n:
            x = use_boost * n
            b = base[i] + (x if x < use_cap else use_cap)
            k = math.log(b) if b > 1e-300 else -690.0
        else:
            k = log_base[i]
        to = item_type[i]
        k = k + lam[to] * t
    old = lane[i]
    if old >= 0 and old != to:
        heap_remove(h, old * n_streams + s, i)
    heap_set(h, to * n_streams + s, i, k, now)
    lane[i] = to


@numba.njit(**JIT_INLINE)
def rule_leave(rs, i, s):
    """Item ``i`` leaves the eviction order (evicted or pinned)."""
    lane, h, n_streams = rs[4], rs[6], rs[7]
    if lane[i] >= 0:
        heap_remove(h, lane[i] * n_streams + s, i)
        lane[i] = -1


@numba.njit(**JIT)
def rule_lowest(par, rs, s, t):
    """``RuleScorer.lowest``: ``(lane, item, value)`` of the item eviction would take first at
    trace time ``t`` (lane -1: none), moving floored items to the static lane on the way."""
    lam, floor, log_floor = par[4], par[5], par[6]
    lane, h, n_streams = rs[4], rs[6], rs[7]
    key, sec, item, size, base = h[0], h[1], h[2], h[4], h[5]
    best, best_lv, best_last, best_i = -1, np.inf, 0, 0
    for ty in range(N_TYPES):
        r = ty * n_streams + s
        while size[r] > 0:
            p = base[r]
            i, lst = item[p], sec[p]
            lv = key[p] - lam[ty] * t
            if lv <= log_floor[ty]:  # reached the floor: a constant value from now on
                heap_remove(h, r, i)
                heap_set(h, STATIC * n_streams + s, i, floor[ty], lst)
                lane[i] = STATIC
                continue
            if lv < best_lv or (
                lv == best_lv and (lst < best_last or (lst == best_last and i < best_i))
            ):
                best, best_lv, best_last, best_i = ty, lv, lst, i
            break
    best_v = math.exp(best_lv) if best >= 0 else np.inf
    r = STATIC * n_streams + s
    if size[r] > 0:
        p = base[r]
        val, lst, i = key[p], sec[p], item[p]
        if (
            best < 0
            or val < best_v
            or (val == best_v and (lst < best_last or (lst == best_last and i < best_i)))
        ):
            best, best_i, best_v = STATIC, i, val
    return best, best_i, best_v


@numba.njit(**JIT)
def _evicts_only_less(par, rs, s, need, v, t):
    """Whether the victims freeing ``need`` tokens are all worth at most ``v``: the class's
    peek, which takes them out of the heap in eviction order, then puts them back."""
    tok = par[7]
    lane, h, n_streams = rs[4], rs[6], rs[7]
    tk_item, tk_lane, tk_key, tk_sec = rs[8], rs[9], rs[10], rs[11]
    key, sec, pos = h[0], h[1], h[3]
    limit = v * (1.0 + TIE_RTOL)
    ln, i, val = rule_lowest(par, rs, s, t)
    if ln < 0 or val > limit or tok[i] >= need:  # the usual case: one victim decides
        return ln >= 0 and val <= limit
    freed, n, ok = 0, 0, True
    while freed < need:
        ln, i, val = rule_lowest(par, rs, s, t)
        if ln < 0 or val > limit:
            ok = False
            break
        p = pos[i]
        tk_item[n], tk_lane[n], tk_key[n], tk_sec[n] = i, ln, key[p], sec[p]
        n += 1
        freed += tok[i]
        heap_remove(h, ln * n_streams + s, i)
        lane[i] = -1
    for q in range(n):
        i, ln = tk_item[q], tk_lane[q]
        heap_set(h, ln * n_streams + s, i, tk_key[q], tk_sec[q])
        lane[i] = ln
    return ok


@numba.njit(**JIT)
def rule_value(par, rs, i, t):
    """``RuleScorer.value``: item ``i``'s value at trace time ``t``."""
    base, item_type, lam, floor = par[1], par[3], par[4], par[5]
    use_cap, use_boost = par[8][0], par[8][1]
    uses, anchor, override = rs[0], rs[1], rs[5]
    ov = override[i]
    if not math.isnan(ov):
        return ov
    ty = item_type[i]
    x = use_boost * uses[i]
    b = base[i] + (x if x < use_cap else use_cap)
    y = b * math.exp(-lam[ty] * (t - anchor[i]))
    return y if y > floor[ty] else floor[ty]


@numba.njit(**JIT_INLINE)
def rule_admit(par, rs, i, now, fetch, s, used, budget):
    """``RuleScorer.admit``: at or above the threshold, or fits, or evicts only less."""
    ev_t, base, tok, fpar = par[0], par[1], par[7], par[8]
    override = rs[5]
    if fetch:
        if fpar[3] != 0.0:  # admit_fetched
            return True
        v = rule_value(par, rs, i, ev_t[now])
    else:
        ov = override[i]
        v = base[i] if math.isnan(ov) else ov
    if not v < fpar[2]:
        return True
    need = used + tok[i] - budget
    return need <= 0 or _evicts_only_less(par, rs, s, need, v, ev_t[now])


@numba.njit(**JIT_INLINE)
def rule_observe(par, rs, items_ptr, items, x, now, s):
    """``RuleScorer.observe``: every item request ``x`` lists counts a use and restarts its
    decay clock (re-entering the order if it is in it)."""
    t = par[0][now]
    uses, anchor, last, state = rs[0], rs[1], rs[2], rs[3]
    for j in range(items_ptr[x], items_ptr[x + 1]):
        i = items[j]
        uses[i] += 1
        if state[i] == ACTIVE:
            rule_insert(par, rs, i, now, s)
        else:
            anchor[i] = t
            last[i] = now


@numba.njit(**JIT_INLINE)
def rule_victim(par, rs, s, now):
    """The next victim (``RuleScorer.victims`` one item at a time), forgotten; -1: none."""
    ln, i, _ = rule_lowest(par, rs, s, par[0][now])
    if ln < 0:
        return -1
    rule_leave(rs, i, s)
    rs[3][i] = ABSENT
    return i


@numba.njit(**JIT_INLINE)
def rule_pin(rs, i, s):
    rs[3][i] = PINNED
    rule_leave(rs, i, s)


@numba.njit(**JIT_INLINE)
def rule_unpin(par, rs, i, s):
    if rs[3][i] == PINNED:
        rule_insert(par, rs, i, rs[2][i], s)


@numba.njit(**JIT_INLINE)
def rule_annotate(par, rs, i, value, s):
    """A value (NaN: a note alone, which changes nothing) overrides the item's value."""
    if math.isnan(value):
        return
    rs[5][i] = value
    if rs[3][i] == ACTIVE:
        rule_insert(par, rs, i, rs[2][i], s)


def rule_params(policy, trace: Trace) -> tuple:
    """The class's per-trace numbers, computed by the same numpy calls as ``_per_trace``."""
    base = static_value(trace, policy.type_base, policy.boosts, policy.cost_threshold,
                        policy.cost_boost)  # fmt: skip
    log_base = np.log(np.maximum(base, 1e-300))
    fpar = np.array([policy.use_cap, policy.use_boost, policy.admit_threshold,
                     1.0 if policy.admit_fetched else 0.0])  # fmt: skip
    return (
        trace.ev_t.astype(np.float64, copy=False), base.astype(np.float64), log_base,
        trace.item_type.astype(np.int64), np.asarray(policy.lam, np.float64),
        np.asarray(policy.floor, np.float64), np.asarray(policy.log_floor, np.float64),
        trace.item_tokens.astype(np.int64, copy=False), fpar,
    )  # fmt: skip


def rule_state(trace: Trace) -> tuple:
    """Fresh per-item state and the lanes' heap (see the module docstring).  Region (type,
    stream) holds at most the stream's items of that type, the static region any of them."""
    n, n_streams = trace.n_items, trace.n_streams
    per_type = np.bincount(trace.item_type.astype(np.int64) * n_streams + trace.item_stream,
                           minlength=N_TYPES * n_streams)  # fmt: skip
    per_stream = np.bincount(trace.item_stream, minlength=n_streams)
    base = np.zeros((N_TYPES + 1) * n_streams + 1, np.int64)
    np.cumsum(np.concatenate([per_type, per_stream]), out=base[1:])
    return (
        np.zeros(n, np.int64), np.zeros(n, np.float64), np.zeros(n, np.int64),
        np.zeros(n, np.uint8), np.full(n, -1, np.int64), np.full(n, np.nan),
        new_heap(2 * n, base), n_streams,
        np.zeros(n, np.int64), np.zeros(n, np.int64), np.zeros(n, np.float64),
        np.zeros(n, np.int64),
    )  # fmt: skip


def annotation_values(trace: Trace) -> np.ndarray:
    """Per event the value an annotation sets (NaN: none, or not an annotation)."""
    out = np.full(trace.n_events, np.nan)
    for e, (value, _) in trace.annotations.items():
        if value is not None and trace.ev_kind[e] == ANNOTATE:
            out[e] = float(value)
    return out


# ------------------------------------------------------------------------ the replay
@numba.njit(**JIT_INLINE)
def _make_room(par, rs, sim, out, s, e, m, budget):
    """The simulator's ``make_room``: evict the policy's victims, one at a time."""
    tok, n_uses = par[7], sim[5]
    in_wm, uses_seen, used, pinned_tok = sim[0], sim[2], sim[3], sim[4]
    evictions, false_ev, mv_event, mv_item, mv_kind = out[3], out[4], out[5], out[6], out[7]
    while used[s] > budget and used[s] > pinned_tok[s]:
        v = rule_victim(par, rs, s, e)
        if v < 0:  # (an unpinned resident item is always in a lane)
            break
        m = count_eviction(v, s, e, m, tok, in_wm, used, uses_seen, n_uses, evictions, false_ev,
                           mv_event, mv_item, mv_kind)  # fmt: skip
    return m


@numba.njit(**JIT_INLINE)
def _request(req, par, rs, sim, out, x, s, e, g0, m, budget, demand_fetch):
    """A request: hits, use counts, the policy's observation, then demand fetch (the
    reference engine's ``_group_request_fn``; a need without alternatives is a group of one).
    Returns the move count."""
    needs_ptr, needs, alt_need, alt_ptr, alt_items, items_ptr, items = req
    tok, (in_wm, _, uses_seen, used, pinned_tok, _) = par[7], sim
    need_hit, ctx_tokens, pinned_at = out[0], out[1], out[2]
    mv_event, mv_item, mv_kind = out[5], out[6], out[7]
    lo, hi = needs_ptr[x], needs_ptr[x + 1]
    ctx_tokens[x] = used[s]
    pinned_at[x] = pinned_tok[s]
    count_needs(lo, hi, g0, needs, alt_need, alt_ptr, alt_items, in_wm, uses_seen, need_hit)
    rule_observe(par, rs, items_ptr, items, x, e, s)
    if not demand_fetch:
        return m
    g = g0
    for j in range(lo, hi):
        i, g = to_fetch(j, g, needs, alt_need, alt_ptr, alt_items, in_wm, tok, budget)
        if i < 0 or not rule_admit(par, rs, i, e, True, s, used[s], budget):
            continue
        in_wm[i] = 1
        used[s] += tok[i]
        mv_event[m], mv_item[m], mv_kind[m] = e, i, MoveKind.FETCH
        m += 1
        rule_insert(par, rs, i, e, s)
        m = _make_room(par, rs, sim, out, s, e, m, budget)
    return m


@numba.njit(**JIT)
def _replay(ev_kind, ev_stream, ev_ref, ann_value, req, par, rs, sim, out, budget, demand_fetch):
    """Every event in file order, streams interleaved with their own state (``sim``: residency,
    pins, uses seen, per-stream token counts, every item's number of uses)."""
    tok, (in_wm, pinned, _, used, pinned_tok, _) = par[7], sim
    mv_event, mv_item, mv_kind = out[5], out[6], out[7]
    alt_need = req[2]
    m, g0 = 0, 0  # g0: the first group of alternatives not before the current request
    for e in range(ev_kind.shape[0]):
        k, s, x = ev_kind[e], ev_stream[e], ev_ref[e]
        if k == EventKind.WRITE:
            mv_event[m], mv_item[m] = e, x
            if tok[x] <= budget and rule_admit(par, rs, x, e, False, s, used[s], budget):
                mv_kind[m] = MoveKind.ADMIT
                m += 1
                in_wm[x] = 1
                used[s] += tok[x]
                rule_insert(par, rs, x, e, s)
                m = _make_room(par, rs, sim, out, s, e, m, budget)
            else:
                mv_kind[m] = MoveKind.BYPASS
                m += 1
        elif k == EventKind.REQUEST:
            g0 = cursor_at(g0, alt_need, req[0][x])
            m = _request(req, par, rs, sim, out, x, s, e, g0, m, budget, demand_fetch)
        elif k == EventKind.PIN:
            if pinned[x] == 0:
                if in_wm[x] == 0:
                    in_wm[x] = 1
                    used[s] += tok[x]
                    mv_event[m], mv_item[m], mv_kind[m] = e, x, MoveKind.PIN
                    m += 1
                    rule_insert(par, rs, x, e, s)
                pinned[x] = 1
                pinned_tok[s] += tok[x]
                rule_pin(rs, x, s)
                m = _make_room(par, rs, sim, out, s, e, m, budget)
        elif k == EventKind.UNPIN:
            if pinned[x] == 1:
                pinned[x] = 0
                pinned_tok[s] -= tok[x]
                rule_unpin(par, rs, x, s)
                m = _make_room(par, rs, sim, out, s, e, m, budget)
        else:
            rule_annotate(par, rs, x, ann_value[e], s)
    return m


def sim_state(trace: Trace, n_uses: np.ndarray) -> tuple:
    """The simulator's own state: residency, pins, uses seen, per-stream tokens and pins."""
    n, n_streams = trace.n_items, trace.n_streams
    return (np.zeros(n, np.uint8), np.zeros(n, np.uint8), np.zeros(n, np.int32),
            np.zeros(n_streams, np.int64), np.zeros(n_streams, np.int64), n_uses)  # fmt: skip


def request_arrays(trace: Trace, cols: tuple) -> tuple:
    """What a request reads: needs, the groups of alternatives, every item a request lists."""
    return (*cols[4:9], trace.request_items_ptr.astype(np.int64, copy=False),
            trace.group_items.astype(np.int32, copy=False))  # fmt: skip


def _arguments(policy, trace: Trace, budget: int, demand_fetch: bool) -> tuple:
    cols = trace_arrays(trace)
    out = outputs(trace, demand_fetch)
    args = (cols[0], cols[1], cols[2], annotation_values(trace), request_arrays(trace, cols),
            rule_params(policy, trace), rule_state(trace), sim_state(trace, cols[9]),
            out.arrays(), int(budget), bool(demand_fetch))  # fmt: skip
    return out, args


def replay_rule(policy, trace: Trace, budget: int, demand_fetch: bool, name: str):
    """Replay ``trace`` against the rule scorer ``policy``; the result is named ``name``."""
    warm_up(_replay, lambda tiny: _arguments(policy, tiny, 1, False)[1])
    out, args = _arguments(policy, trace, budget, demand_fetch)
    m, wall = timed(_replay, *args)
    return result(out, m, name, budget, demand_fetch, wall)


def replay(policy, trace: Trace, budget: int, demand_fetch: bool, seed: int):
    """The ``rule`` kernel: the reference engine's result."""
    return replay_rule(policy, trace, budget, demand_fetch, policy.name)
