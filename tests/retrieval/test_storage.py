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
