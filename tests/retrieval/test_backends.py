"""The server and database backends of the storage protocols, against the real thing: Debian's
``redis-server`` started on a free 127.0.0.1 port in a temporary folder, and Qdrant's local
mode in a temporary folder (no mock anywhere).  Each meets its protocol and behaves like the
embedded default (a dict, a TTL cache, exact cosine search with ties to the smaller key); a
live session gives the same decisions with each backend as without one, and survives a
restart (record and backend reopened: same state, same contexts, same documents)."""

from __future__ import annotations

import shutil
import socket
import subprocess
import time

import numpy as np
import pytest
from helpers import Tick
from storage_checks import check_exact_cosine_with_deletes, check_put_get_delete

from memlens.live import MemoryManager
from memlens.live.replay import replay_record
from memlens.retrieval.storage import ShortTermCache

REDIS = shutil.which("redis-server")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def redis_url(tmp_path_factory):
    if REDIS is None:
        pytest.skip("redis-server is not installed (Debian: apt-get install redis-server)")
    redis = pytest.importorskip("redis")
    port, folder = free_port(), tmp_path_factory.mktemp("redis")
    proc = subprocess.Popen([REDIS, "--port", str(port), "--bind", "127.0.0.1", "--dir",
                             str(folder), "--save", "", "--appendonly", "no"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
    client = redis.Redis(host="127.0.0.1", port=port)
    for _ in range(200):  # until it accepts connections (a readiness wait, not a time limit)
        try:
            client.ping()
            break
        except redis.ConnectionError:
            time.sleep(0.05)
    client.close()
    yield f"redis://127.0.0.1:{port}/0"
    proc.terminate()
    proc.wait()


@pytest.fixture
def redis_cache(redis_url, request):
    from memlens.retrieval.redis_store import RedisCache

    cache = RedisCache(redis_url, prefix=f"{request.node.name}:")
    yield cache
    cache.close()


def test_redis_cache_is_a_short_term_cache_with_expiry(redis_cache):
    assert isinstance(redis_cache, ShortTermCache)
    redis_cache.set("a", {"v": [1, 2]}, ttl_s=0.2)
    redis_cache.set("b", "kept")
    assert redis_cache.get("a") == {"v": [1, 2]}
    assert redis_cache.get("missing") is None
    time.sleep(0.3)  # past the TTL: Redis's own expiry, on its own clock
    assert (redis_cache.get("a"), redis_cache.get("b")) == (None, "kept")
    with pytest.raises(ValueError, match="ttl_s"):
        redis_cache.set("c", 1, ttl_s=0)


@pytest.fixture(params=["redis", "qdrant"])
def documents(request, tmp_path):
    if request.param == "redis":
        from memlens.retrieval.redis_store import RedisDocuments

        store = RedisDocuments(request.getfixturevalue("redis_url"),
                               prefix=f"{request.node.name}:")  # fmt: skip
    else:
        pytest.importorskip("qdrant_client")
        from memlens.retrieval.qdrant_store import QdrantDocuments

        store = QdrantDocuments(path=tmp_path / "qdrant")
    yield store
    store.close()


def test_documents_put_get_delete(documents):
    check_put_get_delete(documents)


def test_qdrant_index_is_exact_cosine_with_deletes_and_ties_to_the_smaller_key(tmp_path):
    pytest.importorskip("qdrant_client")
    from memlens.retrieval.qdrant_store import QdrantVectorIndex

    rng = np.random.default_rng(3)
    index = QdrantVectorIndex(8, path=tmp_path / "q")
    check_exact_cosine_with_deletes(index, rng)
    same = np.eye(8, dtype=np.float32)[0]
    for key in (107, 103, 105, 101):  # four equal vectors: ties, smallest keys first
        index.add(key, same)
    assert [i for i, _ in index.search(same, 2)] == [101, 103]
    index.close()
    reopened = QdrantVectorIndex(8, path=tmp_path / "q")  # the folder survives a restart
    assert [i for i, _ in reopened.search(same, 4)] == [101, 103, 105, 107]
    reopened.close()


# ------------------------------------------------------------------ the live manager on each
def drive(m: MemoryManager, steps: range) -> list[list[str]]:
    """A fixed session slice: writes, uses, a pin; the context ids after each step."""
    out = []
    for k in steps:
        ident = m.write("s", f"note {k} about order_{k % 3}", "tool_result", tokens=10 + k % 4)
        if k % 3 == 2:
            m.used("s", [ident, f"m{k - 2}"])
        if k == 4:
            m.pin("m1")
        out.append([i.id for i in m.context("s")])
    return out


def open_backend(kind: str, folder, url: str | None):
    if kind == "none":
        return None
    if kind == "redis":
        from memlens.retrieval.redis_store import RedisDocuments

        return RedisDocuments(url, prefix=f"{folder.name}:")
    from memlens.retrieval.qdrant_store import QdrantDocuments

    return QdrantDocuments(path=folder / "qdrant")


@pytest.mark.parametrize("kind", ["redis", "qdrant"])
def test_a_session_decides_the_same_on_every_backend_and_survives_a_restart(kind, tmp_path,
                                                                           request):  # fmt: skip
    url = request.getfixturevalue("redis_url") if kind == "redis" else None
    if kind == "qdrant":
        pytest.importorskip("qdrant_client")
    plain = MemoryManager("lru", 40, tmp_path / "plain.jsonl", clock=Tick())
    expected = drive(plain, range(12))
    plain.close()
    store = open_backend(kind, tmp_path, url)
    clock = Tick()
    m = MemoryManager("lru", 40, tmp_path / "r.jsonl", clock=clock, documents=store)
    seen = drive(m, range(6))
    m.close()
    store.close()  # a restart: the process lets go of both the record and the backend
    store = open_backend(kind, tmp_path, url)
    assert store.get("m3")["text"] == "note 3 about order_0"  # it kept the documents
    m = MemoryManager.reopen(tmp_path / "r.jsonl", clock=clock, documents=store)
    seen += drive(m, range(6, 12))
    assert m.document("m10")["text"] == "note 10 about order_1"
    m.close()
    store.close()
    assert seen == expected
    for field in ("need_hit", "move_event", "move_item", "move_kind"):
        a = getattr(replay_record(tmp_path / "r.jsonl", engine="reference"), field)
        b = getattr(replay_record(tmp_path / "plain.jsonl", engine="reference"), field)
        assert np.array_equal(a, b), field


def test_cached_contexts_in_redis_survive_a_restart_and_equal_computed_ones(tmp_path, redis_url,
                                                                            monkeypatch):  # fmt: skip
    from memlens.retrieval.redis_store import RedisCache

    corpus = tmp_path / "corpus.txt"
    corpus.write_text("note about order_0\nnote about order_1\nnote about order_2\n")
    blocks = dict(retrieval={"k": 3, "budget": 40}, tiers={"short_term_tokens": 30},
                  embeddings={"corpus": str(corpus), "cache": False})  # fmt: skip
    clock = Tick()
    cache = RedisCache(redis_url, prefix="ctx-test:")
    m = MemoryManager("lru", 40, tmp_path / "r.jsonl", clock=clock, short_term=cache, **blocks)
    drive(m, range(9))
    clock.t = 99.0  # the context reads 100.0
    first = m.context("s", query="order_1")
    assert any(i.tier != "working" for i in first)
    m.close()
    clock.t = 99.0  # the reopened manager reads 100.0 again: the same point of the session
    m = MemoryManager.reopen(tmp_path / "r.jsonl", clock=clock, short_term=cache)
    import memlens.live.retrieval as live_retrieval

    def not_again(*args, **kwargs):
        raise AssertionError("computed again: the cached context was not used")

    with monkeypatch.context() as patch:
        patch.setattr(live_retrieval, "retrieve", not_again)  # the rebuild
        patch.setattr(live_retrieval.IncrementalRetrieval, "context", not_again)
        assert m.context("s", query="order_1") == first  # from Redis, after the restart
        with pytest.raises(AssertionError, match="computed again"):
            m.context("s", query="order_2")  # a different question is not in the cache
    m.close()
    clock.t = 99.0
    m = MemoryManager.reopen(tmp_path / "r.jsonl", clock=clock)  # no cache: computed again
    assert m.context("s", query="order_1") == first
    m.close()
    cache.close()
