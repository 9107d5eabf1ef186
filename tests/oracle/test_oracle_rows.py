"""The oracle's LP rows built from raw CSR arrays (``memlens.oracle.rows``) are the matrices
scipy.sparse builds, entry for entry, so HiGHS gets the same LPs and the bounds do not move.

The expectations are built here the straightforward way, with scipy.sparse's COO constructor,
``vstack``, ``block_diag`` and row indexing, as the oracle built them before issue 34.
"""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp
from helpers import generated_agent_trace
from hypothesis import given
from hypothesis import strategies as st

from memlens.oracle import OracleSettings, bounds, rows
from memlens.oracle.bounds import ChainLP, _chains, lp_candidates_many
from memlens.oracle.cuts import _occupancy, _separate
from memlens.oracle.model import build_model
from memlens.oracle.solve import _fits, stream_bounds


def _same(mine: rows.Rows, ref) -> None:
    """Equal CSR arrays: the same entries in the same order, explicit zeros included."""
    ref = sp.csr_matrix(ref)
    assert mine.shape == ref.shape
    np.testing.assert_array_equal(mine.indptr, ref.indptr)
    np.testing.assert_array_equal(mine.indices, ref.indices)
    np.testing.assert_array_equal(mine.data, ref.data)  # bitwise: no tolerance
    assert mine.data.dtype == np.float64


def _random(rng, n_rows: int, n_cols: int):
    """Random distinct (row, col) positions in random order, a few values exactly zero."""
    n = int(rng.integers(0, n_rows * n_cols + 1))
    flat = rng.choice(n_rows * n_cols, size=n, replace=False)
    data = rng.normal(size=n)
    data[rng.random(n) < 0.1] = 0.0
    return flat // n_cols, flat % n_cols, data


@given(seed=st.integers(0, 2**32 - 1), n_rows=st.integers(0, 7), n_cols=st.integers(1, 7))
def test_the_helpers_are_scipys_constructor_indexing_and_stacking(seed, n_rows, n_cols):
    rng = np.random.default_rng(seed)
    r, c, v = _random(rng, n_rows, n_cols)
    mine, ref = rows.from_coo(r, c, v, (n_rows, n_cols)), sp.csr_matrix((v, (r, c)),
                                                                       shape=(n_rows, n_cols))  # fmt: skip
    _same(mine, ref)
    pick = rng.integers(0, max(n_rows, 1), size=int(rng.integers(0, 6))) if n_rows else []
    _same(mine.take(np.asarray(pick, np.int64)), ref[np.asarray(pick, np.int64)])
    x = rng.normal(size=n_cols)
    assert mine.matvec(x).tolist() == (ref @ x).tolist()  # the same sums, bit for bit
    r2, c2, v2 = _random(rng, 3, n_cols)
    other, other_ref = rows.from_coo(r2, c2, v2, (3, n_cols)), sp.csr_matrix(
        (v2, (r2, c2)), shape=(3, n_cols))  # fmt: skip
    _same(rows.vstack([mine, other, rows.empty(n_cols)]), sp.vstack([ref, other_ref]))
    _same(rows.block_diag([other, mine, other]),
          sp.block_diag([other_ref, ref, other_ref], format="csr"))  # fmt: skip


def test_duplicate_entries_are_refused_not_summed():
    with pytest.raises(ValueError, match="duplicate"):
        rows.from_coo(np.array([1, 1]), np.array([2, 2]), np.ones(2), (3, 3))


def _reference_program(model, head):
    """The chain LP's rows as scipy.sparse built them (``bounds._chain_program`` before)."""
    G, K = model.n_gaps, model.points.shape[0]
    size = model.size.astype(np.float64)
    inner = model.k_end < K
    A_eq = sp.csr_matrix(
        (np.concatenate([size, -size[inner], np.ones(K), -np.ones(K - 1)]),
         (np.concatenate([model.k_start[head], model.k_end[inner], np.arange(K), np.arange(1, K)]),
          np.concatenate([np.arange(G), np.flatnonzero(inner), G + np.arange(K),
                          G + np.arange(K - 1)]))),
        shape=(K, G + K))  # fmt: skip
    members = np.flatnonzero(np.bincount(head, minlength=G)[head] > 1)
    _, row = np.unique(head[members], return_inverse=True)
    n_rows = int(row.max()) + 1 if members.size else 0
    A_ub = sp.csr_matrix((np.ones(members.size), (row, members)), shape=(n_rows, G + K))
    return A_eq, A_ub


def _reference_cuts(lp: ChainLP):
    """The cover cut rows of ``lp``'s last optimum, one row per cut point, a 1 for every
    interval of a cover chain that ends after the point (``cuts.cover_cuts`` before)."""
    m, G = lp.model, lp.G
    size_of_chain = np.zeros(G, np.int64)
    size_of_chain[lp.head] = m.size
    ptr, chain, occ = _occupancy(lp.a, m.k_end, lp.head, lp.x[:G], m.capacity.shape[0])
    cut_k, cut_c = _separate(ptr, chain, occ, size_of_chain, m.capacity, np.zeros(G))
    r, c = [], []
    for row, k in enumerate(np.unique(cut_k)):
        for chain_ in cut_c[cut_k == k]:
            for g in range(G):
                if lp.head[g] == chain_ and m.k_end[g] > k:
                    r.append(row), c.append(g)
    return sp.csr_matrix((np.ones(len(r)), (r, c)), shape=(np.unique(cut_k).size, G + lp.K))


@pytest.fixture(scope="module")
def many_streams(tmp_path_factory):
    return generated_agent_trace(tmp_path_factory, streams=40, events_per_stream=60, seed=12)


def _lp_models(trace, budget, demand_fetch):
    models = [build_model(trace, s, budget, demand_fetch) for s in range(trace.n_streams)]
    return [m for m in models if m.n_gaps and not _fits(m, OracleSettings())]


@pytest.mark.parametrize("demand_fetch", [False, True])
@pytest.mark.parametrize("budget", [200, 500])
def test_chain_lp_rows_and_their_cuts_are_scipys(many_streams, budget, demand_fetch):
    """Each stream's rows, and after every cut round its cut rows as scipy would stack them
    (the old rows the last optimum keeps tight, then the new cuts)."""
    models = _lp_models(many_streams, budget, demand_fetch)
    assert len(models) >= 5
    cut = 0
    for model in models:
        lp = ChainLP(model)
        A_eq, A_ub = _reference_program(model, _chains(model)[0])
        _same(lp.A_eq, A_eq), _same(lp.A_ub, A_ub)
        for _ in range(3):
            lp.take(*bounds._solve_blocks([lp])[0])
            A_ub, b_ub = _reference_stack(lp, A_ub, lp.b_ub)
            if not lp.add_cuts():
                assert A_ub is None  # no cut either way
                break
            _same(lp.A_ub, A_ub)
            np.testing.assert_array_equal(lp.b_ub, b_ub)
            cut += 1
    assert cut > 0  # the budgets leave cuts to add


def test_a_window_is_handed_to_highs_as_scipys_block_diagonal(many_streams):
    lps = [ChainLP(m) for m in _lp_models(many_streams, 300, False)[:9]]
    _same(rows.block_diag([lp.A_eq for lp in lps]),
          sp.block_diag([lp.A_eq.to_scipy() for lp in lps], format="csr"))  # fmt: skip
    _same(rows.block_diag([lp.A_ub for lp in lps]),
          sp.block_diag([lp.A_ub.to_scipy() for lp in lps], format="csr"))  # fmt: skip


@pytest.mark.parametrize("budget", [200, 400, 800])
def test_the_bounds_and_lp_values_are_those_of_scipys_rows(many_streams, budget, monkeypatch):
    """The whole LP stage once with the rows built here by scipy.sparse (handed over as raw
    arrays), once as the oracle builds them: the same bounds, plans and LP values."""
    models = _lp_models(many_streams, budget, False)
    settings = OracleSettings(cache=False, batch_streams=8)
    mine = stream_bounds(many_streams, budget, False, settings)
    mine_lp = lp_candidates_many(models, 2)

    def as_rows(matrix):
        m = sp.csr_matrix(matrix)
        return rows.Rows(m.indptr.astype(np.int64), m.indices.astype(np.int64), m.data,
                         m.shape[1])  # fmt: skip

    def scipy_program(model, head):
        A_eq, A_ub = _reference_program(model, head)
        b_eq = np.diff(model.capacity.astype(np.float64), prepend=0.0)
        return as_rows(A_eq), b_eq, as_rows(A_ub), np.ones(A_ub.shape[0])

    monkeypatch.setattr(bounds, "_chain_program", scipy_program)
    monkeypatch.setattr(ChainLP, "add_cuts", _scipy_add_cuts)
    ref = stream_bounds(many_streams, budget, False, settings)
    ref_lp = lp_candidates_many(models, 2)
    assert [b.upper for b in mine[0]] == [b.upper for b in ref[0]]
    assert [b.lower for b in mine[0]] == [b.lower for b in ref[0]]
    assert mine[2] == ref[2]
    for a, b in zip(mine[1] + mine_lp, ref[1] + ref_lp, strict=True):
        for x, y in zip(a, b, strict=True):
            np.testing.assert_array_equal(x, y)


def _reference_stack(lp: ChainLP, A_ub, b_ub):
    """``lp``'s inequality rows and right-hand sides after a cut round, stacked by
    scipy.sparse: the chain rows, the earlier cuts the last optimum keeps tight, the new cuts
    (right-hand side: the number of chains in the cover, less one); None without new cuts."""
    new = _reference_cuts(lp)
    if new.shape[0] == 0:
        return None, None
    tight = A_ub[lp.n_base :] @ lp.x >= b_ub[lp.n_base :] - 1e-7
    keep = np.concatenate([np.arange(lp.n_base), lp.n_base + np.flatnonzero(tight)])
    covers = [np.unique(lp.head[new.indices[new.indptr[r] : new.indptr[r + 1]]]).size
              for r in range(new.shape[0])]  # fmt: skip
    return sp.vstack([A_ub[keep], new]).tocsr(), np.concatenate([b_ub[keep],
                                                                 np.array(covers) - 1.0])  # fmt: skip


def _scipy_add_cuts(lp: ChainLP) -> bool:
    """``ChainLP.add_cuts`` done by scipy.sparse (:func:`_reference_stack`)."""
    A_ub, b_ub = _reference_stack(lp, lp.A_ub.to_scipy(), lp.b_ub)
    if A_ub is None:
        return False
    lp.A_ub = rows.Rows(A_ub.indptr.astype(np.int64), A_ub.indices.astype(np.int64),
                        A_ub.data, A_ub.shape[1])  # fmt: skip
    lp.b_ub = b_ub
    return True
