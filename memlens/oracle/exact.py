"""A stream's integer program solved exactly, by dynamic programming over its check points.

Why: on many short streams (issue 34) the LP bound, its cover cuts, the rounding, the replay
and, where they fall short, HiGHS's branch and bound cost milliseconds per stream, and their
answer is the integer optimum anyway on almost every stream.  A short stream has few
keep-intervals open at once (at most 9 at any check point on the benchmark's generated agent
trace at budget 512), and then the integer program of ``memlens.oracle.model`` is small in
the one direction that matters: walk the check points in order, and the only thing the past
tells the future is *which of the gaps open at this point are kept*.  So a state is that set
(a bit mask over "slots", one slot per open gap, reused when a gap ends), and its value the
most gaps kept so far by any schedule reaching it.

At check point ``k``:

* the gaps ending at ``k`` leave the state (their hit was counted when they were kept);
* each gap starting at ``k`` may be kept if it starts free (``prev < 0``) or its predecessor,
  which ends exactly at ``k`` (``model.k_start[g] == model.k_end[prev[g]]``), was kept: the
  nesting constraint, read from the state before the ending gaps leave it;
* a new state is kept only if its gaps' tokens fit ``capacity[k]`` (the load only changes at
  check points, so this checks the capacity everywhere, as ``model.schedule_load_ok`` does).

Of the schedules reaching one state the first with the most hits is kept (deterministic), and
a back pointer per state gives the schedule.  Its planned hits are the integer program's
optimum, which bounds every policy of the class (``memlens.oracle.bounds``) and which the
oracle policy's replay reaches (it scores at least what its plan plans): both bounds meet.

The work is about (states per point) x (subsets of the gaps starting there): exponential in
the open gaps, so it is tried only while the stored states stay under ``max_states`` (the
``oracle.exact_max_states`` setting) and the subsets looked at under ``WORK_PER_STATE`` times
that, at most ``MAX_SLOTS`` gaps are open at once and at
most ``MAX_STARTS`` start at one point; beyond that the caller falls back to the LP and
integer-program path.  A layer's states are found by their mask: in a dense table while few
gaps are open, else in a hash table (both give the same states in the same order).  A need is
counted when its gaps leave the state, so a need with alternatives (served by any of its gaps,
which all end at its request) counts once; with demand fetch such a model is left to the LP path
(:func:`exact_schedule`).
"""

from __future__ import annotations

import numba as nb
import numpy as np

#: Most gaps open at one check point (a state is a bit mask in an int64).
MAX_SLOTS = 62
#: Up to this many open gaps a layer's states are found in a dense table of ``2**slots``
#: entries; beyond it, in a hash table of twice ``max_states`` entries.
DENSE_SLOTS = 20
#: Most gaps starting at one check point (their subsets are enumerated per state).
MAX_STARTS = 16
#: Subsets looked at, per state allowed (``max_states``), before the program gives up.  A
#: stream the program gives up on goes to the LP path, so an attempt should cost about what
#: that path does: a few tens of milliseconds.  At 16 (and 2**18 states) a given-up attempt
#: took up to 0.9 s, most of the oracle's time on tau-bench's 200 streams at 4096 tokens
#: (3.9 s of 4 budgets; 1.2 s at 2 and 2**16, every stream's bounds the same; issue 34).
WORK_PER_STATE = 2


@nb.njit(cache=True, nogil=True)
def _by_point(key, n_points):
    """Gaps grouped by ``key`` (their start or end point): CSR offsets and gap indices, each
    group in gap order."""
    ptr = np.zeros(n_points + 2, np.int64)
    for g in range(key.shape[0]):
        ptr[key[g] + 1] += 1
    for k in range(n_points + 1):
        ptr[k + 1] += ptr[k]
    fill = ptr.copy()
    out = np.empty(key.shape[0], np.int64)
    for g in range(key.shape[0]):
        out[fill[key[g]]] = g
        fill[key[g]] += 1
    return ptr, out


@nb.njit(cache=True, nogil=True)
def _assign_slots(k_start, k_end, n_points, start_ptr, starts, end_ptr, ends):
    """One slot per gap, free again once the gap ends; the number of slots used (-1: more
    than ``MAX_SLOTS``, or more than ``MAX_STARTS`` gaps starting at one point)."""
    slot = np.full(k_start.shape[0], -1, np.int64)
    free = np.empty(MAX_SLOTS, np.int64)
    n_free, used = 0, 0
    for k in range(n_points):
        for q in range(end_ptr[k], end_ptr[k + 1]):
            free[n_free] = slot[ends[q]]
            n_free += 1
        if start_ptr[k + 1] - start_ptr[k] > MAX_STARTS:
            return slot, -1
        for q in range(start_ptr[k], start_ptr[k + 1]):
            if n_free > 0:
                n_free -= 1
                slot[starts[q]] = free[n_free]
            elif used < MAX_SLOTS:
                slot[starts[q]] = used
                used += 1
            else:
                return slot, -1
    return slot, used


@nb.njit(cache=True, nogil=True)
def _served(m, k, need_ptr, gap_ptr, need_gaps, slot):
    """How many of the needs used at point ``k`` the state ``m`` serves (one kept gap each)."""
    served = 0
    for n in range(need_ptr[k], need_ptr[k + 1]):
        for q in range(gap_ptr[n], gap_ptr[n + 1]):
            if (m >> slot[need_gaps[q]]) & 1:
                served += 1
                break
    return served


@nb.njit(cache=True, nogil=True)
def _find(table, masks, layer, mask, shift):
    """Where ``mask`` is, or goes, in the table of the layer ``layer`` (entries of other
    layers count as empty, so a layer never clears the table): the mask itself in a dense
    table (``shift`` 0), else a Fibonacci hash of it, probed linearly."""
    if shift == 0:
        return mask
    last = table.shape[1] - 1
    p = np.int64((np.uint64(mask) * np.uint64(11400714819323198485)) >> np.uint64(shift))
    while table[0, p] == layer and masks[table[1, p]] != mask:
        p = (p + 1) & last
    return p


@nb.njit(cache=True, nogil=True)
def _store(masks, value, back, table, layer, shift, n, mask, v, i):
    """Put (mask, value ``v``, back pointer ``i``) in the layer being built (``n`` states so
    far), or raise the value of the state with that mask; the new count (-1: no room left,
    which :func:`_layer` leaves only at ``max_states``).  ``table`` rows: the layer an entry
    belongs to, and its state."""
    p = _find(table, masks, layer, mask, shift)
    if table[0, p] == layer:
        t = table[1, p]
        if v > value[t]:  # ties keep the first schedule found: deterministic
            value[t], back[t] = v, i
        return n
    if n == masks.shape[0]:
        return -1
    table[0, p], table[1, p] = layer, n
    masks[n], value[n], back[n] = mask, v, i
    return n + 1


@nb.njit(cache=True, nogil=True)
def _bits(x):
    """How many bits of ``x`` are set."""
    n = 0
    while x:
        x &= x - 1
        n += 1
    return n


@nb.njit(cache=True, nogil=True)
def _grown(a, room):
    out = np.empty(room, a.dtype)
    for c in range(a.shape[0]):
        out[c] = a[c]
    return out


@nb.njit(cache=True, nogil=True)
def _layer(masks, value, back, lo, hi, table, shift, k, starts, size, prev, slot, slot_size,
           n_slots, clear, room, gain_of, max_states):  # fmt: skip
    """The states after point ``k`` from the states ``lo..hi`` before it (module docstring);
    the arrays, the new end of the stored states (-1: too many) and the subsets looked at."""
    n, work = hi, 0
    for i in range(lo, hi):
        m = masks[i]
        base = m & ~clear
        load = 0
        for b in range(n_slots):
            if (base >> b) & 1:
                load += slot_size[b]
        allowed = 0  # the starting gaps this state may keep, by position in ``starts``
        for j in range(starts.shape[0]):
            p = prev[starts[j]]
            if p < 0 or (m >> slot[p]) & 1:
                allowed |= 1 << j
        v = value[i] + gain_of[i - lo]
        most = n + (1 << _bits(allowed))  # states this one may add, at most
        size_to = min(max(2 * masks.shape[0], most), max_states)
        if most > masks.shape[0] and size_to > masks.shape[0]:
            # grown here, not in _store: numba pays for arrays returned by each call
            masks, value, back = (_grown(masks, size_to), _grown(value, size_to),
                                  _grown(back, size_to))  # fmt: skip
        sub = allowed
        while True:  # every subset of ``allowed``, largest first
            work += 1
            add, bits = 0, 0
            for j in range(starts.shape[0]):
                if (sub >> j) & 1:
                    add += size[starts[j]]
                    bits |= 1 << slot[starts[j]]
            if load + add <= room:
                n = _store(masks, value, back, table, k, shift, n, base | bits, v, i)
                if n < 0:
                    return masks, value, back, -1, work
            if sub == 0:
                break
            sub = (sub - 1) & allowed
    return masks, value, back, n, work


@nb.njit(cache=True, nogil=True)
def _dp(k_start, k_end, size, prev, capacity, need_ptr, gap_ptr, need_gaps, max_states,
        dense_slots):  # fmt: skip
    """The best 0/1 selection of gaps and the needs it serves; (empty, -1) when the stream
    needs more than ``max_states`` stored states or its gaps more slots than allowed.  Needs
    are grouped by the point their gaps end at (``need_ptr``, over points ``0..K``), each with
    its gaps (``gap_ptr``, ``need_gaps``); a need is counted when its gaps leave the state."""
    G, K = k_start.shape[0], capacity.shape[0]
    none = np.zeros(0, np.bool_)
    start_ptr, starts = _by_point(k_start, K)
    end_ptr, ends = _by_point(k_end, K)
    slot, n_slots = _assign_slots(k_start, k_end, K, start_ptr, starts, end_ptr, ends)
    if n_slots < 0:
        return none, -1
    bits = n_slots if n_slots <= dense_slots else int(np.ceil(np.log2(2 * max_states)))
    shift = 0 if n_slots <= dense_slots else 64 - bits
    table = np.full((2, 1 << bits), -1, np.int64)  # per entry: its layer, its state
    room = min(max_states, 4 * K + 64)  # stored states, grown by doubling
    masks, value, back = (
        np.zeros(room, np.int64),
        np.zeros(room, np.int64),
        np.zeros(room, np.int64),
    )
    back[0] = -1
    slot_size = np.zeros(max(n_slots, 1), np.int64)
    lo, hi, work = 0, 1, 0  # the previous layer's states; subsets looked at
    for k in range(K):
        clear = 0
        for q in range(end_ptr[k], end_ptr[k + 1]):
            clear |= 1 << slot[ends[q]]
        here = starts[start_ptr[k] : start_ptr[k + 1]]
        for g in here:
            slot_size[slot[g]] = size[g]
        gain = np.empty(hi - lo, np.int64)
        for i in range(lo, hi):
            gain[i - lo] = _served(masks[i], k, need_ptr, gap_ptr, need_gaps, slot)
        masks, value, back, n, looked = _layer(masks, value, back, lo, hi, table, shift, k, here,
                                               size,
                                               prev, slot, slot_size, n_slots, clear,
                                               capacity[k], gain, max_states)  # fmt: skip
        work += looked
        if (
            n < 0 or work > WORK_PER_STATE * max_states
        ):  # capacity may reject most subsets looked at
            return none, -1
        lo, hi = hi, n
    return _traceback(masks, value, back, lo, hi, K, start_ptr, starts, slot, G, need_ptr, gap_ptr,
                      need_gaps)  # fmt: skip


@nb.njit(cache=True, nogil=True)
def _traceback(
    masks, value, back, lo, hi, K, start_ptr, starts, slot, G, need_ptr, gap_ptr, need_gaps
):
    """The best final state (counting the needs of the gaps still open at the end) and the
    selection its back pointers lead to."""
    best, best_v = lo, -1
    for i in range(lo, hi):
        v = value[i] + _served(masks[i], K, need_ptr, gap_ptr, need_gaps, slot)
        if v > best_v:
            best, best_v = i, v
    selected = np.zeros(G, np.bool_)
    i = best
    for k in range(K - 1, -1, -1):
        for q in range(start_ptr[k], start_ptr[k + 1]):
            if (masks[i] >> slot[starts[q]]) & 1:
                selected[starts[q]] = True
        i = back[i]
    return selected, best_v


def _group_needs(model) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The needs of a model with alternatives, grouped by the check point their gaps end at,
    each with the gaps serving it (``link_gap``, ``link_ref``: all end at its request)."""
    K = model.points.shape[0]
    gaps, refs = model.link_gap, model.link_ref
    if gaps.size == 0:  # every need forced (an alternative pinned): nothing to serve
        return np.zeros(K + 2, np.int64), np.zeros(1, np.int64), np.zeros(0, np.int64)
    point = model.k_end[gaps]
    order = np.lexsort((gaps, refs, point))
    gaps, refs, point = gaps[order], refs[order], point[order]
    first = np.flatnonzero(np.r_[True, (refs[1:] != refs[:-1]) | (point[1:] != point[:-1])])
    need_ptr = np.zeros(K + 2, np.int64)
    np.add.at(need_ptr, point[first] + 1, 1)
    gap_ptr = np.r_[first, gaps.shape[0]].astype(np.int64)
    return np.cumsum(need_ptr), gap_ptr, gaps.astype(np.int64)


def exact_schedule(model, max_states: int, dense_slots: int = DENSE_SLOTS) -> np.ndarray | None:
    """The integer optimum's 0/1 selection of the model's gaps, or None where the program is
    too wide for the dynamic program, or the model has alternatives and demand fetch (whose
    model lets any alternative be fetched, the simulator only the first: the LP path keeps its
    own roundings for the lower bound there).  ``dense_slots``: the most open gaps for the
    dense table (at most ``DENSE_SLOTS``; tests lower it to check the hash table)."""
    dense_slots = min(int(dense_slots), DENSE_SLOTS)
    if max_states <= 0 or model.n_gaps == 0 or (model.has_groups and model.demand_fetch):
        return None
    m = model
    if m.has_groups:
        selected, served = _dp(m.k_start, m.k_end, m.size, m.prev, m.capacity,
                               *_group_needs(m), int(max_states), dense_slots)  # fmt: skip
    else:  # each gap serves its own need
        need_ptr, need_gaps = _by_point(m.k_end, m.points.shape[0])
        gap_ptr = np.arange(m.n_gaps + 1, dtype=np.int64)
        selected, served = _dp(m.k_start, m.k_end, m.size, m.prev, m.capacity, need_ptr,
                               gap_ptr, need_gaps, int(max_states), dense_slots)  # fmt: skip
    if served < 0:
        return None
    if model.planned_hits(selected) != model.forced_hits + served:
        raise RuntimeError(f"stream {model.stream}: exact schedule miscounted (oracle bug)")
    return selected
