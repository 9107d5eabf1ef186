"""From a fractional LP solution to a feasible 0/1 schedule (the oracle's lower-bound side).

Gaps the LP keeps whole (``y ~ 1``) form a feasible schedule on their own: dropping the
fractional ones only lowers loads, and without demand fetch a gap's predecessor has ``y`` at
least as large, so nesting survives.  The other gaps are then added greedily, most-kept first
(ties: smaller, then earlier), whenever the item's chain is unbroken and the gap fits under the
capacity at every check point it covers: a range-add / range-max segment tree makes each test
O(log points).
"""

from __future__ import annotations

import numba as nb
import numpy as np

from memlens.oracle.model import GapModel

_ONE = 1.0 - 1e-6


@nb.njit(cache=True)
def _build(tree, lazy, node, lo, hi, init):
    if hi - lo == 1:
        tree[node] = init[lo]
        return
    mid = (lo + hi) // 2
    _build(tree, lazy, 2 * node, lo, mid, init)
    _build(tree, lazy, 2 * node + 1, mid, hi, init)
    tree[node] = max(tree[2 * node], tree[2 * node + 1])


@nb.njit(cache=True)
def _add(tree, lazy, node, lo, hi, a, b, v):
    if b <= lo or hi <= a:
        return
    if a <= lo and hi <= b:
        tree[node] += v
        lazy[node] += v
        return
    mid = (lo + hi) // 2
    _add(tree, lazy, 2 * node, lo, mid, a, b, v)
    _add(tree, lazy, 2 * node + 1, mid, hi, a, b, v)
    tree[node] = max(tree[2 * node], tree[2 * node + 1]) + lazy[node]


@nb.njit(cache=True)
def _max(tree, lazy, node, lo, hi, a, b):
    if b <= lo or hi <= a:
        return -(2**62)
    if a <= lo and hi <= b:
        return tree[node]
    mid = (lo + hi) // 2
    left = _max(tree, lazy, 2 * node, lo, mid, a, b)
    right = _max(tree, lazy, 2 * node + 1, mid, hi, a, b)
    return max(left, right) + lazy[node]


@nb.njit(cache=True)
def _greedy(slack0, k_start, k_end, size, prev, order, selected):
    """Add the gaps of ``order`` that fit; ``slack0`` = load - capacity of the initial selection."""
    K = slack0.shape[0]
    tree = np.zeros(4 * K + 4, dtype=np.int64)
    lazy = np.zeros(4 * K + 4, dtype=np.int64)
    _build(tree, lazy, 1, 0, K, slack0)
    for idx in range(order.shape[0]):
        g = order[idx]
        if selected[g]:
            continue
        if prev[g] >= 0 and not selected[prev[g]]:
            continue
        a, b = k_start[g], k_end[g]
        if _max(tree, lazy, 1, 0, K, a, b) + size[g] <= 0:
            _add(tree, lazy, 1, 0, K, a, b, size[g])
            selected[g] = True


def round_schedule(model: GapModel, y: np.ndarray) -> np.ndarray:
    """A feasible 0/1 selection containing every gap the LP keeps whole, greedily extended."""
    G = model.n_gaps
    selected = np.asarray(y >= _ONE, dtype=np.bool_).copy()
    if G == 0 or model.points.shape[0] == 0:
        return selected
    diff = np.zeros(model.points.shape[0] + 1, dtype=np.int64)
    np.add.at(diff, model.k_start[selected], model.size[selected])
    np.add.at(diff, model.k_end[selected], -model.size[selected])
    slack0 = np.cumsum(diff)[:-1] - model.capacity
    order = np.lexsort((model.start, model.size, -np.round(y, 9)))
    _greedy(slack0, model.k_start, model.k_end, model.size, model.prev, order, selected)
    return selected
