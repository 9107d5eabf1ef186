"""The learned scorer's forest at several budgets by leaf bit masks, not by walking the trees.

Walking a tree is a chain of dependent loads (node, its feature, the row's value, the child):
on the learned scorer's two million anchors of a 5,800-stream trace, scored at four budgets
in place and as missed, the walk (``memlens.scorer.model._forest_raw_budgets``) took 7.6 s,
half of that policy's compare batch, the sweep's longest (issue 34).

This is the bit-vector evaluation of QuickScorer (Lucchese et al., "QuickScorer: a fast
algorithm to rank documents with additive ensembles of regression trees", SIGIR 2015),
written here from the paper's description.  Number each tree's leaves left to right; a node
a row sends right rules out the leaves of its left subtree, so every tree keeps a mask of the
leaves still possible, cleared by each such node, and the row's leaf is the lowest bit left.
Which nodes of a feature send a row right depends only on the row's value: the feature's
nodes sorted by threshold, those below the value (LightGBM goes right when ``x >
threshold``), found by one binary search.  The masks of independent nodes are ANDed with no
chain between them.

Budgets only change the budget columns and, as missed, the tier column: the other features
clear a base mask per tree once per row, and each scenario (a budget in place, or as missed)
starts from a copy of it and clears only the nodes of the columns it sees differently.

The leaf each tree gives each scenario is the one the walk reaches: a value LightGBM reads
specially goes through the same rule (``memlens.scorer.model._right``): NaN (fixed per node:
its nodes are listed once per feature) and, on a feature with a node of missing type "Zero",
a value within 1e-35 of zero (its nodes are tried one by one).  Each scenario's sum adds the
trees' leaves in tree order, as the walk does, so the scores are equal bit for bit
(``tests/scorer/test_leafmasks.py`` holds them to the walk on forests LightGBM trained with
every missing type).  A forest with a tree of more than 64 leaves has no masks
(:func:`leaf_masks` returns None) and is walked.
"""

from __future__ import annotations

from dataclasses import dataclass

import numba
import numpy as np

MAX_LEAVES = 64  # one bit per leaf of a tree, in a 64-bit mask
_CHUNK = 4096  # rows per parallel task (each task allocates its own scratch)

#: Where the lowest set bit of a 64-bit word sits, by de Bruijn multiplication (numba's own
#: count of trailing zeros, LLVM's ``cttz``, lives in a module numba calls unsafe, which may move).
_DE_BRUIJN = np.uint64(0x03F79D71B4CA8B09)
_BIT_AT = np.zeros(64, np.int64)
_BIT_AT[((np.uint64(1) << np.arange(64, dtype=np.uint64)) * _DE_BRUIJN) >> np.uint64(58)] = (
    np.arange(64)
)


@numba.njit(cache=True, nogil=True, inline="always")
def _de_bruijn_zeros(x):  # pragma: no cover - compiled
    return _BIT_AT[((x & (~x + np.uint64(1))) * _DE_BRUIJN) >> np.uint64(58)]


try:
    from numba.cpython.unsafe.numbers import trailing_zeros
except ImportError:  # pragma: no cover - a numba without it
    trailing_zeros = _de_bruijn_zeros


@dataclass(frozen=True)
class LeafMasks:
    """A forest's nodes grouped by feature (``ptr[f]:ptr[f + 1]``), sorted by threshold."""

    ptr: np.ndarray  # int64, per feature
    threshold: np.ndarray  # float64, per listed node
    tree: np.ndarray  # int64: the node's tree
    mask: np.ndarray  # uint64: its tree's leaves, less the node's left subtree
    zero_rule: np.ndarray  # bool: missing type "Zero" (a value near zero goes by default)
    goes_right_by_default: np.ndarray  # bool: not default_left
    nan_ptr: np.ndarray  # int64, per feature: the nodes a NaN sends right...
    nan_tree: np.ndarray  # int64: ...their trees
    nan_mask: np.ndarray  # uint64: ...and masks
    has_zero_rule: np.ndarray  # bool, per feature: any node of missing type "Zero"
    full: np.ndarray  # uint64, per tree: every leaf possible
    leaf_ptr: np.ndarray  # int64, per tree: where its leaves start in ``leaf_value``
    leaf_value: np.ndarray  # float64: each tree's leaves, left to right


def leaf_masks(roots, feature, threshold, children, default_left, missing,
               leaf_value) -> LeafMasks | None:  # fmt: skip
    """The masks of a compiled forest's arrays (``memlens.scorer.model.CompiledForest``:
    ``children[2 * node + 1]`` the right child, a child < 0 the leaf ``-child - 1``); None
    when a tree has more than :data:`MAX_LEAVES` leaves."""
    n_nodes = len(feature)
    node_tree = np.zeros(n_nodes, np.int64)
    node_mask = np.zeros(n_nodes, np.uint64)
    full, leaf_ptr, leaves = [], [0], []
    for t, root in enumerate(np.asarray(roots).tolist()):
        first = len(leaves)
        spans = _leaf_spans(int(root), children, leaves)
        n_leaves = len(leaves) - first
        if n_leaves > MAX_LEAVES:
            return None
        everything = (1 << n_leaves) - 1
        for node, (lo, mid) in spans.items():  # the left subtree's leaves: lo .. mid - 1
            node_tree[node] = t
            node_mask[node] = everything & ~(((1 << (mid - lo)) - 1) << (lo - first))
        full.append(everything)
        leaf_ptr.append(len(leaves))
    return _grouped(feature, threshold, default_left, missing, node_tree, node_mask,
                    np.asarray(full, np.uint64), np.asarray(leaf_ptr, np.int64),
                    np.asarray(leaf_value, np.float64)[np.asarray(leaves, np.int64)])  # fmt: skip


def _leaf_spans(root: int, children, leaves: list[int]) -> dict[int, tuple[int, int]]:
    """Append the tree's leaves to ``leaves`` left to right; per internal node, the positions
    (in ``leaves``) where its left subtree's leaves start and end."""
    spans: dict[int, tuple[int, int]] = {}
    stack = [(root, False)]
    while stack:
        node, left_done = stack.pop()
        if node < 0:
            leaves.append(-node - 1)
        elif not left_done:  # the left subtree first; note where it starts
            spans[node] = (len(leaves), -1)
            stack += [(node, True), (int(children[2 * node]), False)]
        else:  # the left subtree is done: the right one next
            spans[node] = (spans[node][0], len(leaves))
            stack.append((int(children[2 * node + 1]), False))
    return spans


def _grouped(feature, threshold, default_left, missing, node_tree, node_mask, full,
             leaf_ptr, leaf_value) -> LeafMasks:  # fmt: skip
    """The nodes by feature, by threshold within one, and the nodes a NaN sends right."""
    feature = np.asarray(feature, np.int64)
    threshold = np.asarray(threshold, np.float64)
    missing = np.asarray(missing)
    n_features = int(feature.max(initial=-1)) + 1
    order = np.lexsort((threshold, feature))
    ptr = np.searchsorted(feature[order], np.arange(n_features + 1))
    default_right = ~np.asarray(default_left, np.bool_)
    # a NaN is read as 0.0 under missing type "None"; "Zero" and "NaN" send it by default
    nan_right = np.where(missing == 0, 0.0 > threshold, default_right)
    nan_nodes = order[nan_right[order]]
    nan_ptr = np.searchsorted(feature[nan_nodes], np.arange(n_features + 1))
    has_zero = np.zeros(n_features, np.bool_)
    has_zero[feature[missing == 1]] = True
    return LeafMasks(ptr.astype(np.int64), threshold[order], node_tree[order], node_mask[order],
                     missing[order] == 1, default_right[order], nan_ptr.astype(np.int64),
                     node_tree[nan_nodes], node_mask[nan_nodes], has_zero, full, leaf_ptr,
                     leaf_value)  # fmt: skip


def raw_budgets(m: LeafMasks, X, moved, column: int, value: float, columns, values):
    """``CompiledForest.raw_budgets`` by the masks: ``(main, miss)``, each (K, n)."""
    cols, column = [int(c) for c in columns], int(column)
    n_features = len(m.ptr) - 1
    seen_apart = {*cols, column}
    shared = np.asarray([f for f in range(min(n_features, X.shape[1]))
                         if f not in seen_apart and m.ptr[f + 1] > m.ptr[f]], np.int64)  # fmt: skip
    # the columns a scenario sees its own way, each with its nodes (none past the forest's);
    # a budget column wins over the tier column (as in the walk's slots)
    tier = -1 if column in cols else column
    own = np.asarray([f if f < n_features else -1 for f in (*cols, tier)], np.int64)
    return _by_masks(X, np.asarray(moved, np.bool_), values, own, float(value), shared,
                     m.ptr, m.threshold, m.tree, m.mask, m.zero_rule, m.goes_right_by_default,
                     m.nan_ptr, m.nan_tree, m.nan_mask, m.has_zero_rule, m.full, m.leaf_ptr,
                     m.leaf_value)  # fmt: skip


@numba.njit(cache=True, nogil=True, parallel=True)
def _by_masks(X, moved, values, own, tier_value, shared, ptr, thr, tree, mask, zero_rule,
              right_by_default, nan_ptr, nan_tree, nan_mask, has_zero, full, leaf_ptr,
              leaf_value):  # fmt: skip
    """Per row: the base masks from the ``shared`` columns, then per scenario (budget ``k`` in
    place: ``k``; as missed: ``K + k``, moved rows only) a copy cleared by its ``own``
    columns (``values[k, r, j]`` for budget column ``j``; the last, the tier column, reads
    ``tier_value`` as missed), then every scenario's leaves summed in tree order.  The code
    that clears masks is written out in the loop: as a numba function it ran three times
    slower."""
    n, K, T = X.shape[0], values.shape[0], full.shape[0]
    n_own = own.shape[0]
    main = np.empty((K, n))
    miss = np.empty((K, n))
    for c in numba.prange((n + _CHUNK - 1) // _CHUNK):
        ms = np.empty((2 * K + 1) * T, np.uint64)  # scenario s at s * T; the base last
        acc = np.empty(2 * K)
        base = 2 * K * T
        for r in range(c * _CHUNK, min(n, (c + 1) * _CHUNK)):
            S = 2 * K if moved[r] else K
            for p in range(-1, S):  # -1: the base
                if p < 0:
                    off, n_cols = base, shared.shape[0]
                    for t in range(T):
                        ms[base + t] = full[t]
                else:
                    off, n_cols = p * T, n_own
                    for t in range(T):
                        ms[off + t] = ms[base + t]
                for i in range(n_cols):
                    if p < 0:
                        f = shared[i]
                        x = X[r, f]
                    else:
                        f = own[i]
                        if f < 0:
                            continue
                        if i < n_own - 1:
                            x = values[p % K, r, i]
                        else:
                            x = tier_value if p >= K else X[r, f]
                    if x != x:
                        for j in range(nan_ptr[f], nan_ptr[f + 1]):
                            ms[off + nan_tree[j]] &= nan_mask[j]
                        continue
                    lo, hi = ptr[f], ptr[f + 1]
                    if has_zero[f] and -1e-35 <= x <= 1e-35:
                        for j in range(lo, hi):
                            if right_by_default[j] if zero_rule[j] else x > thr[j]:
                                ms[off + tree[j]] &= mask[j]
                        continue
                    a = lo
                    while lo < hi:  # the first node whose threshold the value does not pass
                        mid = (lo + hi) >> 1
                        if x > thr[mid]:
                            lo = mid + 1
                        else:
                            hi = mid
                    for j in range(a, lo):
                        ms[off + tree[j]] &= mask[j]
            for s in range(S):
                acc[s] = 0.0
            for t in range(T):  # every scenario's leaf of tree t, trees in order
                q = leaf_ptr[t]
                for s in range(S):
                    acc[s] += leaf_value[q + trailing_zeros(ms[s * T + t])]
            for k in range(K):
                main[k, r] = acc[k]
                miss[k, r] = acc[K + k] if moved[r] else acc[k]
    return main, miss
