"""The forest at several budgets by leaf bit masks (memlens.scorer.leafmasks) gives the walk's
scores bit for bit: a hand-built tree scored by hand, forests LightGBM trained (every missing
type, NaN, zeros, values near zero and on thresholds) against the walk, a forest too large for
masks walked instead."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from memlens.scorer.leafmasks import leaf_masks
from memlens.scorer.model import CompiledForest, load_model


def three_leaves() -> CompiledForest:
    """node 0: x1 <= 0.5 ? leaf 0 : node 1;  node 1: x2 <= 2.5 ? leaf 1 : leaf 2 (a NaN x2
    goes left: missing type NaN, default left; a NaN x1 is read as 0.0: missing type None)."""
    return CompiledForest(
        roots=np.array([0]), feature=np.array([1, 2]), threshold=np.array([0.5, 2.5]),
        left=np.array([-1, -2]), right=np.array([1, -3]), default_left=np.array([True, True]),
        missing=np.array([0, 2], np.int8), leaf_value=np.array([0.1, 0.2, 0.4]),
    )  # fmt: skip


def test_a_hand_built_tree_s_masks_and_scores():
    m = three_leaves().leaf_masks
    # leaves left to right: 0, 1, 2; node 0 going right rules out leaf 0, node 1 leaf 1
    assert m.full.tolist() == [0b111]
    assert m.leaf_value.tolist() == [0.1, 0.2, 0.4]
    assert m.ptr.tolist() == [0, 0, 1, 2]  # feature 0: no node; 1: node 0; 2: node 1
    assert m.mask.tolist() == [0b110, 0b101]
    assert m.nan_ptr.tolist() == [0, 0, 0, 0]  # a NaN sends neither node right
    X = np.array([[0.0, 1.0, 0.0], [0.0, 0.2, 0.0], [0.0, 1.0, 0.0], [0.0, np.nan, 9.0]])
    values = np.array([[[3.0], [3.0], [np.nan], [3.0]],  # budget 0: x2 per row
                       [[1.0], [1.0], [2.5], [1.0]]])  # budget 1  # fmt: skip
    main, miss = three_leaves().raw_budgets(X, np.zeros(4, bool), 0, 2.0, [2], values)
    # row 0: right, then x2 = 3 > 2.5 right (leaf 2) / x2 = 1 left (leaf 1); row 1: x1 = 0.2
    # left (leaf 0); row 2: NaN x2 left (leaf 1), 2.5 is not above 2.5 (leaf 1); row 3: NaN
    # x1 read as 0.0, left (leaf 0)
    assert main.tolist() == [[0.4, 0.1, 0.2, 0.1], [0.2, 0.1, 0.2, 0.1]]
    assert miss.tolist() == main.tolist()  # no row moved


def test_the_bundled_model_is_scored_by_masks():
    assert load_model("default").forest.leaf_masks is not None


def _trained(seed: int, leaves: int, rounds: int, zero_as_missing: bool, nan: float):
    import lightgbm as lgb

    rng = np.random.default_rng(seed)
    X = rng.normal(size=(400, 6))
    X[:, 2] = rng.integers(0, 3, 400)  # the "tier" column
    X[rng.random(X.shape) < nan] = np.nan
    X[rng.random(X.shape) < 0.1] = 0.0
    y = (np.nan_to_num(X[:, 0]) + 0.5 * np.nan_to_num(X[:, 3]) + rng.normal(scale=0.7, size=400)
         > 0.2).astype(float)  # fmt: skip
    params = {"objective": "binary", "verbose": -1, "num_leaves": leaves, "min_data_in_leaf": 2,
              "zero_as_missing": zero_as_missing, "num_threads": 1, "seed": seed}  # fmt: skip
    booster = lgb.train(params, lgb.Dataset(X, y), num_boost_round=rounds)
    return CompiledForest.from_dump(booster.dump_model())


def _hard_rows(forest: CompiledForest, rng, n: int, n_features: int) -> np.ndarray:
    """Rows with NaN, zeros, values within 1e-35 of zero and values on thresholds."""
    X = rng.normal(size=(n, n_features))
    X[rng.random(X.shape) < 0.15] = np.nan
    X[rng.random(X.shape) < 0.1] = 0.0
    X[rng.random(X.shape) < 0.05] = 1e-36
    X[rng.random(X.shape) < 0.05] = -0.0
    on = rng.random(X.shape) < 0.1
    if len(forest.threshold):
        X[on] = rng.choice(forest.threshold, size=int(on.sum()))
    return X


@settings(max_examples=30, deadline=None)
@given(seed=st.integers(0, 10_000), leaves=st.integers(2, 64), rounds=st.integers(1, 15),
       zero_as_missing=st.booleans(), nan=st.sampled_from([0.0, 0.2]),
       n_budgets=st.integers(1, 6),
       columns=st.sampled_from([[0], [3, 5], [1, 3, 4], [2, 3], [7]]),
       column=st.sampled_from([2, 4, 9]))  # fmt: skip
def test_masks_give_the_walk_s_scores_bit_for_bit(seed, leaves, rounds, zero_as_missing, nan,
                                                   n_budgets, columns, column):  # fmt: skip
    """Columns past the forest's features (7, 9), the tier column among the budget columns
    (2), every missing type, a row's budgets agreeing on some rows."""
    forest = _trained(seed, leaves, rounds, zero_as_missing, nan)
    rng = np.random.default_rng(seed + 1)
    X = _hard_rows(forest, rng, 300, 10)
    values = _hard_rows(forest, rng, n_budgets * 300, len(columns)).reshape(
        n_budgets, 300, len(columns))  # fmt: skip
    values[1::2, ::5] = values[0, ::5]
    moved = rng.random(300) < 0.4
    assert forest.leaf_masks is not None
    got = forest.raw_budgets(X, moved, column, 0.0, columns, values)
    want = forest.walk_budgets(X, moved, column, 0.0, columns, values)
    assert got[0].tobytes() == want[0].tobytes()
    assert got[1].tobytes() == want[1].tobytes()


def test_a_forest_with_more_than_64_leaves_in_a_tree_is_walked():
    forest = _trained(3, 120, 2, False, 0.0)
    assert max(np.diff(leaf_masks_counts(forest))) > 64
    assert forest.leaf_masks is None
    rng = np.random.default_rng(0)
    X, values = rng.normal(size=(50, 6)), rng.normal(size=(2, 50, 1))
    main, miss = forest.raw_budgets(X, np.ones(50, bool), 2, 1.0, [3], values)
    for k in range(2):
        Xk = X.copy()
        Xk[:, 3] = values[k, :, 0]
        want = forest.raw_pair(Xk, np.ones(50, bool), 2, 1.0)
        assert np.array_equal(main[k], want[0]) and np.array_equal(miss[k], want[1])


def leaf_masks_counts(forest: CompiledForest) -> np.ndarray:
    """Cumulative leaf counts per tree (from the children arrays, not from the masks)."""
    counts = [0]
    for root in forest.roots.tolist():
        stack, n = [root], 0
        while stack:
            node = stack.pop()
            if node < 0:
                n += 1
            else:
                stack += [int(forest.left[node]), int(forest.right[node])]
        counts.append(counts[-1] + n)
    return np.array(counts)


@pytest.mark.parametrize("n_leaves", [1, 64])
def test_single_leaf_and_full_64_leaf_trees(n_leaves):
    """A constant tree (its root a leaf) and a 64-leaf chain: every bit of the mask used."""
    if n_leaves == 1:
        forest = CompiledForest(np.array([-1]), np.zeros(0, np.int64), np.zeros(0),
                                np.zeros(0, np.int64), np.zeros(0, np.int64),
                                np.zeros(0, bool), np.zeros(0, np.int8), np.array([0.75]))  # fmt: skip
    else:  # node k: x0 <= k ? leaf k : node k + 1 (the last: leaf 63 on the right)
        k = np.arange(63)
        forest = CompiledForest(np.array([0]), np.zeros(63, np.int64), k.astype(float),
                                -(k + 1), np.append(k[1:], -64), np.ones(63, bool),
                                np.zeros(63, np.int8), np.arange(64) / 64.0)  # fmt: skip
    masks = leaf_masks(forest.roots, forest.feature, forest.threshold, forest.children,
                       forest.default_left, forest.missing, forest.leaf_value)  # fmt: skip
    assert masks is not None
    X = np.zeros((6, 6))
    X[:, 0] = [-1.0, 0.5, 30.2, 62.0, 63.5, np.nan]
    values = np.zeros((1, len(X), 1))
    main, _ = forest.raw_budgets(X, np.zeros(len(X), bool), 5, 0.0, [4], values)
    want = forest.walk_budgets(X, np.zeros(len(X), bool), 5, 0.0, [4], values)
    assert main.tobytes() == want[0].tobytes()
    if n_leaves == 64:  # x0 = 62.0 stops at node 62 (62 <= 62): leaf 62; 63.5: leaf 63
        assert main[0].tolist() == [0 / 64, 1 / 64, 31 / 64, 62 / 64, 63 / 64, 0 / 64]


def test_a_budget_column_listed_twice_reads_as_the_walk_reads_it():
    """The walk reads a column listed twice from its last position; so does ``raw_budgets``
    (it walks such a call)."""
    forest = three_leaves()
    X = np.array([[0.0, 1.0, 0.0], [0.0, 1.0, 0.0]])
    values = np.array([[[3.0, 1.0], [1.0, 3.0]]])  # x2 per row: first 3 then 1, then 1 then 3
    main, _ = forest.raw_budgets(X, np.zeros(2, bool), 0, 2.0, [2, 2], values)
    assert main.tolist() == [[0.2, 0.4]]  # the last value of each row: 1 (left), 3 (right)


def test_the_lowest_bit_by_de_bruijn_multiplication_is_numba_s_count():
    """The fallback for numba's ``trailing_zeros`` (in a module numba calls unsafe) finds the
    lowest set bit of every 64-bit word it is given as the intrinsic does."""
    import numba

    from memlens.scorer import leafmasks

    @numba.njit
    def both(words):
        out = np.empty((2, len(words)), np.int64)
        for k in range(len(words)):
            out[0, k] = leafmasks._de_bruijn_zeros(words[k])
            out[1, k] = leafmasks.trailing_zeros(words[k])
        return out

    rng = np.random.default_rng(0)
    words = rng.integers(1, 2**63, size=2000, dtype=np.uint64) << rng.integers(
        0, 40, size=2000
    ).astype(np.uint64)
    words = np.concatenate([words[words > 0], np.uint64(1) << np.arange(64, dtype=np.uint64)])
    got = both(words)
    assert np.array_equal(got[0], got[1])
    assert got[0][-64:].tolist() == list(range(64))
