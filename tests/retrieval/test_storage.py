"""The storage protocols' embedded defaults: each meets its protocol and behaves like a dict,
a TTL cache, or an exact nearest-neighbour search (hnswlib checked against the exact one)."""

from __future__ import annotations

import numpy as np
import pytest
from storage_checks import brute_force, check_exact_cosine_with_deletes, check_put_get_delete

from memlens.retrieval.storage import (
    ExactVectorIndex,
    HnswVectorIndex,
    InProcessCache,
    InProcessDocuments,
    ShortTermCache,
    SQLiteDocuments,
    VectorIndex,
)


@pytest.fixture(params=["memory", "sqlite"])
def documents(request, tmp_path):
    return InProcessDocuments() if request.param == "memory" else SQLiteDocuments(tmp_path / "d.db")


def test_documents_put_get_delete(documents):
    check_put_get_delete(documents)


def test_sqlite_documents_survive_a_restart(tmp_path):
    store = SQLiteDocuments(tmp_path / "d.db")
    store.put("m1", {"text": "kept"})
    store.close()
    assert SQLiteDocuments(tmp_path / "d.db").get("m1") == {"text": "kept"}


def test_cache_entries_expire_after_their_ttl():
    now = [100.0]
    cache = InProcessCache(clock=lambda: now[0])
    assert isinstance(cache, ShortTermCache)
    cache.set("a", 1, ttl_s=10)
    cache.set("b", 2)  # no TTL: kept
    now[0] = 109.9
    assert (cache.get("a"), cache.get("b")) == (1, 2)
    now[0] = 110.0
    assert (cache.get("a"), cache.get("b")) == (None, 2)
    with pytest.raises(ValueError, match="ttl_s"):
        cache.set("c", 3, ttl_s=0)


def test_exact_index_is_brute_force_cosine_with_deletes():
    rng = np.random.default_rng(1)
    index = ExactVectorIndex(8)
    check_exact_cosine_with_deletes(index, rng)
    with pytest.raises(ValueError, match="vector"):
        index.add(99, np.ones(3))


def test_hnsw_index_finds_the_exact_neighbours_on_a_small_set_and_grows():
    rng = np.random.default_rng(2)
    index = HnswVectorIndex(8, capacity=16, ef=200, seed=0)
    assert isinstance(index, VectorIndex)
    vectors = {i: rng.normal(size=8).astype(np.float32) for i in range(60)}  # past capacity
    for i, v in vectors.items():
        index.add(i, v)
    index.delete(5)
    del vectors[5]
    index.add(7, vectors[7])  # re-adding a live key keeps it once
    for _ in range(10):
        q = rng.normal(size=8).astype(np.float32)
        assert [i for i, _ in index.search(q, 4)] == brute_force(vectors, q, 4)
    assert 5 not in [i for i, _ in index.search(vectors[0], 59)]


@pytest.mark.parametrize("size", [1, 2, 9, 30])
def test_hnsw_index_searches_only_the_allowed_keys(size):
    """hnswlib's filter callable admits only ``allowed`` during the walk; a narrow filter
    (the walk may come back short) is answered exactly.  Deleted allowed keys never return."""
    rng = np.random.default_rng(size)
    index = HnswVectorIndex(8, capacity=64, ef=200, seed=0)
    vectors = {i: rng.normal(size=8).astype(np.float32) for i in range(60)}
    for i, v in vectors.items():
        index.add(i, v)
    allowed = rng.choice(60, size=size, replace=False).tolist()
    index.delete(allowed[0])
    admitted = {i: vectors[i] for i in allowed[1:]}
    for _ in range(5):
        q = rng.normal(size=8).astype(np.float32)
        got = index.search(q, 4, allowed=allowed)
        assert [i for i, _ in got] == brute_force(admitted, q, 4)


def test_hnsw_filtered_walk_that_comes_back_short_is_answered_exactly():
    """A sparse graph (M=2, ef=2) and three allowed keys of 2000: some walks reach fewer than
    k admitted keys (hnswlib raises); those searches are scored exactly, the rest walk."""
    rng = np.random.default_rng(0)
    index = HnswVectorIndex(8, capacity=2000, M=2, ef=2, seed=0)
    vectors = {i: rng.normal(size=8).astype(np.float32) for i in range(2000)}
    for i, v in vectors.items():
        index.add(i, v)
    short = 0
    for _ in range(50):
        allowed = rng.choice(2000, size=3, replace=False).tolist()
        q = rng.normal(size=8).astype(np.float32)
        try:  # does hnswlib's own walk come back short for this query?
            index._index.knn_query(q[None, :], k=3, filter=set(allowed).__contains__)
        except RuntimeError:
            short += 1
        got = [i for i, _ in index.search(q, 3, allowed=allowed)]
        assert got == brute_force({i: vectors[i] for i in allowed}, q, 3)
    assert short > 0  # the exact answer was needed at least once
