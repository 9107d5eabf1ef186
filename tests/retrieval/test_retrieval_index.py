"""The long-term index against brute force, membership moves, and the pre-filter paths."""

from __future__ import annotations

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from memlens.retrieval.index import LongTermIndex, Prefilter, top_k


def unit(rng, n, d):
    x = rng.standard_normal((n, d)).astype(np.float32)
    return x / np.linalg.norm(x, axis=1, keepdims=True)


def brute(vecs, items, q, k):
    sims = vecs[items] @ q
    return set(np.asarray(items)[np.argsort(-sims)[:k]].tolist())


def test_hnsw_matches_brute_force_on_a_small_store():
    rng = np.random.default_rng(0)
    vecs = unit(rng, 600, 16)
    streams = np.zeros(600, dtype=np.int64)
    idx = LongTermIndex(vecs, streams, 1, ef_search=200, exact_below=0)
    idx.add_many(np.arange(600))
    for q in unit(rng, 25, 16):
        items, sims = idx.search(0, q, 10)
        assert set(items.tolist()) == brute(vecs, np.arange(600), q, 10)
        assert np.allclose(sims, vecs[items] @ q, atol=1e-5)
        assert np.all(np.diff(sims) <= 1e-6)  # best first
    assert idx.index_queries == 25 and idx.exact_queries == 0


def test_leave_and_reenter_and_streams():
    rng = np.random.default_rng(1)
    vecs = unit(rng, 40, 8)
    streams = np.arange(40) % 2
    idx = LongTermIndex(vecs, streams, 2, exact_below=0)
    for i in range(40):
        idx.lts_enter(i)
    q = vecs[4]
    assert idx.search(0, q, 1)[0].tolist() == [4]
    assert 4 not in idx.search(1, q, 20)[0].tolist()  # stream 1 never sees stream 0's items
    idx.lts_leave(4)
    assert 4 not in idx.search(0, q, 19)[0].tolist() and idx.live[0] == 19
    idx.lts_leave(4)  # leaving twice is a no-op
    assert idx.live[0] == 19
    idx.lts_enter(4)  # comes back: un-marked, not added twice
    assert idx.search(0, q, 1)[0].tolist() == [4] and idx.live[0] == 20
    assert idx._index[0].get_current_count() == 20


@given(
    n=st.integers(1, 120),
    k=st.integers(1, 12),
    types=st.sets(st.integers(0, 3), min_size=1),
    task=st.sampled_from([None, 0, 1]),
    min_t=st.sampled_from([None, 0.0, 50.0, 110.0]),
    exact_below=st.sampled_from([0, 5, 1000]),
)
def test_prefiltered_search_returns_only_eligible_and_at_most_k(
    n, k, types, task, min_t, exact_below
):
    rng = np.random.default_rng(n * 31 + k)
    vecs = unit(rng, n, 6)
    meta = {
        "item_type": rng.integers(4, size=n),
        "item_task": rng.integers(2, size=n),
        "item_t": np.arange(n, dtype=np.float64),
    }
    idx = LongTermIndex(vecs, np.zeros(n, dtype=np.int64), 1, ef_search=128,
                        exact_below=exact_below, **meta)  # fmt: skip
    idx.add_many(np.arange(n))
    idx.lts_leave(0)  # one item left the store: never returned
    pre = Prefilter(types=tuple(sorted(types)), task=task, min_t=min_t)
    allowed = idx.mask(np.arange(n), pre)
    allowed[0] = False
    assert idx.members(0, pre).tolist() == np.flatnonzero(allowed).tolist()
    q = unit(rng, 1, 6)[0]
    items, _ = idx.search(0, q, k, pre)
    assert len(set(items.tolist())) == len(items) == min(k, int(allowed.sum()))
    assert allowed[items].all()
    # small sets are scored exactly: then the answer is exactly brute force
    if allowed.sum() <= max(exact_below, k):
        assert set(items.tolist()) == brute(vecs, np.flatnonzero(allowed), q, k)


def test_top_k_ties_go_to_the_lower_index():
    vecs = np.asarray([[1, 0], [1, 0], [0, 1]], dtype=np.float32)
    items, sims = top_k(vecs, [2, 1, 0], np.asarray([1, 0], np.float32), 2)
    assert items.tolist() == [0, 1] and sims.tolist() == [1.0, 1.0]
