"""From a fractional LP solution to a feasible 0/1 schedule (the oracle's lower-bound side).

Gaps the LP keeps whole (``y ~ 1``) form a feasible schedule on their own: dropping the
fractional ones only lowers loads, and without demand fetch a gap's predecessor has ``y`` at
least as large, so nesting survives.  The other gaps are then added greedily, most-kept first
(ties: smaller, then earlier), whenever the item's chain is unbroken and the gap fits under the
capacity at every check point it covers: an iterative range-add / range-max segment tree makes
each test O(log points).
"""

from __future__ import annotations

import numba as nb
import numpy as np

from memlens.oracle.model import GapModel

_ONE = 1.0 - 1e-6


_NEG = -(2**60)


@nb.njit(cache=True)
def _apply(t, d, p, v, n):
    t[p] += v
    if p < n:
        d[p] += v


@nb.njit(cache=True)
def _rebuild(t, d, p):
    while p > 1:
        p >>= 1
        t[p] = max(t[2 * p], t[2 * p + 1]) + d[p]


@nb.njit(cache=True)
def _push(t, d, p, n, h):
    for s in range(h, 0, -1):
        i = p >> s
        if d[i] != 0:
            _apply(t, d, 2 * i, d[i], n)
            _apply(t, d, 2 * i + 1, d[i], n)
            d[i] = 0


@nb.njit(cache=True)
def _range_add(t, d, lo, hi, v, n, h):
    lo += n
    hi += n
    l0, r0 = lo, hi
    while lo < hi:
        if lo & 1:
            _apply(t, d, lo, v, n)
            lo += 1
        if hi & 1:
            hi -= 1
            _apply(t, d, hi, v, n)
        lo >>= 1
        hi >>= 1
    _rebuild(t, d, l0)
    _rebuild(t, d, r0 - 1)


@nb.njit(cache=True)
def _range_max(t, d, lo, hi, n, h):
    lo += n
    hi += n
    _push(t, d, lo, n, h)
    _push(t, d, hi - 1, n, h)
    res = _NEG
    while lo < hi:
        if lo & 1:
            res = max(res, t[lo])
            lo += 1
        if hi & 1:
            hi -= 1
            res = max(res, t[hi])
        lo >>= 1
        hi >>= 1
    return res


@nb.njit(cache=True)
def _greedy(slack0, k_start, k_end, size, prev, order, selected):
    """Add the gaps of ``order`` that fit; ``slack0`` = load - capacity of the initial selection."""
    K = slack0.shape[0]
    h = 1
    while (1 << h) < K:
        h += 1
    n = 1 << h
    t = np.full(2 * n, _NEG, dtype=np.int64)
    d = np.zeros(n, dtype=np.int64)
    t[n : n + K] = slack0
    for p in range(n - 1, 0, -1):
        t[p] = max(t[2 * p], t[2 * p + 1])
    for idx in range(order.shape[0]):
        g = order[idx]
        if selected[g]:
            continue
        if prev[g] >= 0 and not selected[prev[g]]:
            continue
        a, b = k_start[g], k_end[g]
        if _range_max(t, d, a, b, n, h) + size[g] <= 0:
            _range_add(t, d, a, b, size[g], n, h)
            selected[g] = True


@nb.njit(cache=True)
def _drop_broken_chains(selected, prev):
    """Deselect every gap whose chain predecessor is not selected (predecessors come first)."""
    for g in range(selected.shape[0]):
        if selected[g] and prev[g] >= 0 and not selected[prev[g]]:
            selected[g] = False


def round_schedule(model: GapModel, y: np.ndarray) -> np.ndarray:
    """A feasible 0/1 selection containing every gap the LP keeps whole, greedily extended."""
    G = model.n_gaps
    selected = np.asarray(y >= _ONE, dtype=np.bool_).copy()
    if G == 0 or model.points.shape[0] == 0:
        return selected
    _drop_broken_chains(selected, model.prev)  # priorities not from one LP may break nesting
    diff = np.zeros(model.points.shape[0] + 1, dtype=np.int64)
    np.add.at(diff, model.k_start[selected], model.size[selected])
    np.add.at(diff, model.k_end[selected], -model.size[selected])
    slack0 = np.cumsum(diff)[:-1] - model.capacity
    if slack0.max() > 0:  # the whole gaps do not fit together (segmented LP, whose cuts are
        selected[:] = False  # relaxed): start from nothing, most-kept first as below
        slack0 = -model.capacity.astype(np.int64)
    order = np.lexsort((model.start, model.size, -np.round(y, 9)))
    _greedy(slack0, model.k_start, model.k_end, model.size, model.prev, order, selected)
    return selected
