"""The simulator's long-term store on each backend (``retrieval.store``, memlens.retrieval.store).

A replay with retrieval on decides the same on ``exact`` (numpy, through the ``VectorIndex``
protocol) and ``qdrant`` (Qdrant's real local mode, in the test's temporary folder, no mock),
and the same as the default ``hnsw`` where hnswlib is exact by design (every stream below
``exact_below``).  The adapter's filtered search is checked against a brute force over the
pre-filter written out by hand.
"""

from __future__ import annotations

import subprocess
import sys
import tempfile

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from memlens.policies.lru import LRU

from memlens.retrieval.config import FilterConfig, HnswConfig, RetrievalConfig
from memlens.retrieval.embeddings import EmbeddingsConfig, embed_trace
from memlens.retrieval.index import LongTermIndex, Prefilter, top_k
from memlens.retrieval.setup import make_retriever, replay_with_retrieval
from memlens.retrieval.store import ProtocolLongTermIndex, store_factory
from memlens.retrieval.tiers import TiersConfig
from memlens.trace.generate import generate_simple
from memlens.trace.io import trace_from_events

RECORD_ARRAYS = ("ret_ptr", "ret_item", "ret_form", "ret_tier", "ret_tokens", "ret_needed",
                 "need_ctx", "need_lost", "retrieved_tokens", "modeled_ms",
                 "prefetch_served")  # fmt: skip
EXACT_HNSW = HnswConfig(exact_below=10**6)  # hnswlib never walks its graph: exact by design


@pytest.fixture(scope="module")
def small():
    """Two streams of a generated trace, and its TF-IDF vectors."""
    tr = trace_from_events(list(generate_simple(seed=4, streams=2, events_per_stream=90)))
    return tr, embed_trace(tr, EmbeddingsConfig(cache=False), 0)


def decisions(tr, emb, store: str, **rc):
    """Replay at WM budget 384 (LRU) with retrieval on the given store: (result, record,
    retriever)."""
    cfg = RetrievalConfig(enabled=True, budget=192, store=store, hnsw=EXACT_HNSW, **rc)
    ret = make_retriever(tr, cfg, emb, tiers=TiersConfig(short_term_tokens=256))
    return (*replay_with_retrieval(tr, LRU(), 384, ret), ret)


@pytest.mark.parametrize(
    "rc",
    [
        {},
        {"promote": True},
        {"prefetch": True, "filter": FilterConfig(types=["tool_result", "user_input"])},
        {"filter": FilterConfig(same_task=True, max_age_s=120.0)},
    ],  # fmt: skip
    ids=["plain", "promote", "prefetch-types", "task-age"],
)
def test_a_replay_decides_the_same_on_every_store(small, rc, tmp_path, monkeypatch):
    pytest.importorskip("qdrant_client")
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))  # Qdrant's folder: in tmp_path
    tr, emb = small
    runs = {store: decisions(tr, emb, store, **rc) for store in ("hnsw", "exact", "qdrant")}
    res0, rec0, _ = runs["hnsw"]
    assert rec0.ret_item.size > 0 and np.any(rec0.ret_tier == 2)  # the LTS served something
    for store in ("exact", "qdrant"):
        res, rec, _ = runs[store]
        for name in ("need_hit", "move_event", "move_item", "move_kind"):  # WM hits, misses
            assert np.array_equal(getattr(res, name), getattr(res0, name)), (store, name)
        for name in RECORD_ARRAYS:
            assert np.array_equal(getattr(rec, name), getattr(rec0, name)), (store, name)
        assert rec.index_queries == rec0.exact_queries  # every LTS search went to the backend
    if rc.get("promote"):
        assert runs["qdrant"][1].promoted > 0
    qdrant = runs.pop("qdrant")[2].index
    folder = tmp_path / qdrant._make_store.folder
    assert folder.parent == tmp_path and sorted(qdrant._stores) == [0, 1]
    assert qdrant._stores[0].client.collection_exists("stream_0")
    qdrant.close()  # also done when the retriever is garbage-collected, or at exit
    assert not folder.exists()


def _index(cls, vectors, stream, types, tasks, times, **kw):
    return cls(vectors, stream, 2, item_type=types, item_task=tasks, item_t=times, **kw)


@settings(max_examples=40, deadline=None)
@given(
    seed=st.integers(0, 2**16),
    types=st.none() | st.sets(st.integers(0, 2), min_size=1).map(tuple),
    task=st.none() | st.integers(0, 1),
    min_t=st.none() | st.floats(0, 30),
    k=st.integers(1, 6),
)
def test_filtered_search_is_brute_force_over_the_prefilter(seed, types, task, min_t, k):
    """Items enter and leave the store; a search of each stream returns the exact top ``k`` of
    the stored items that pass the pre-filter, the same as the default index scoring exactly."""
    rng = np.random.default_rng(seed)
    n = 40
    vectors = rng.normal(size=(n, 4)).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    stream, types_, tasks = rng.integers(0, 2, n), rng.integers(0, 3, n), rng.integers(0, 2, n)
    times = rng.uniform(0, 40, n)
    ours = _index(ProtocolLongTermIndex, vectors, stream, types_, tasks, times,
                  make_store=store_factory("exact", 4))  # fmt: skip
    default = _index(LongTermIndex, vectors, stream, types_, tasks, times, exact_below=n)
    stored = set()
    for i in rng.permutation(n).tolist() + rng.choice(n, 15).tolist():
        for index in (ours, default):
            (index.lts_leave if i in stored else index.lts_enter)(i)
        stored ^= {i}
    pre = None if (types, task, min_t) == (None, None, None) else Prefilter(types, task, min_t)
    for s in (0, 1):
        q = rng.normal(size=4).astype(np.float32)
        passing = [i for i in sorted(stored) if stream[i] == s
                   and (types is None or types_[i] in types) and (task is None or tasks[i] == task)
                   and (min_t is None or times[i] >= min_t)]  # fmt: skip
        want_items, want_sims = top_k(vectors, passing, q, k)
        got_items, got_sims = ours.search(s, q, k, pre)
        assert got_items.tolist() == want_items.tolist()
        # the same dot products, over k rows instead of all: BLAS may round the last bit apart
        np.testing.assert_allclose(got_sims, want_sims, rtol=1e-6)
        assert default.search(s, q, k, pre)[0].tolist() == want_items.tolist()


def test_a_bad_store_is_refused_naming_the_setting(monkeypatch):
    with pytest.raises(ValueError, match=r"retrieval.store must be one of hnsw, exact, qdrant, "
                                         r"got 'faiss'"):  # fmt: skip
        RetrievalConfig(store="faiss")
    monkeypatch.setitem(sys.modules, "qdrant_client", None)  # as if it were not installed
    with pytest.raises(ValueError, match=r"retrieval.store=qdrant needs the qdrant-client "
                                         r"package.*memlens\[qdrant\]"):  # fmt: skip
        RetrievalConfig(enabled=True, store="qdrant")
    RetrievalConfig(store="exact")  # needs nothing beyond numpy


CLI = """import sys
if sys.argv[1] == "hide": sys.modules["qdrant_client"] = None
from memlens.cli.main import main
sys.argv = ["memlens", "simulate", *sys.argv[2:]]
main()
"""


@pytest.mark.parametrize(
    "hide, store, message",
    [
        ("keep", "faiss", "retrieval.store must be one of hnsw, exact, qdrant"),
        ("hide", "qdrant", "retrieval.store=qdrant needs the qdrant-client package"),
    ],  # fmt: skip
)
def test_the_cli_exits_2_before_any_work(tmp_path, hide, store, message):
    run_dir = tmp_path / "run"
    proc = subprocess.run([sys.executable, "-c", CLI, hide, "retrieval.enabled=true",
                           f"retrieval.store={store}", "mlflow.enabled=false",
                           f"hydra.run.dir={run_dir}"], cwd=tmp_path, capture_output=True,
                          text=True)  # fmt: skip
    assert proc.returncode == 2, proc.stderr
    assert f"error: {message}" in proc.stderr and "Traceback" not in proc.stderr
    assert not (run_dir / "metrics.json").exists()


def test_an_item_scores_the_same_whatever_it_is_scored_with():
    """top_k's similarity of an item does not depend on the other items in the batch (a BLAS
    matrix product's does, in the last bit), so the default store's exact path over all
    members and a backend's k candidates give the same numbers."""
    rng = np.random.default_rng(0)
    vectors = rng.normal(size=(200, 256)).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    q = rng.normal(size=256).astype(np.float32)
    items, sims = top_k(vectors, np.arange(200), q, 200)
    full = dict(zip(items.tolist(), sims.tolist()))
    for _ in range(100):
        some = np.sort(rng.choice(200, rng.integers(1, 30), replace=False))
        got_items, got_sims = top_k(vectors, some, q, some.size)
        assert got_sims.tolist() == [full[i] for i in got_items.tolist()]


class CoarseScores:
    """A VectorIndex whose cosines are rounded to 4 decimals (a backend with its own arithmetic):
    near ties come back in its order, not the trace's."""

    def __init__(self, dim: int) -> None:
        from memlens.retrieval.storage import ExactVectorIndex

        self.exact = ExactVectorIndex(dim)
        self.add, self.delete = self.exact.add, self.exact.delete

    def search(self, vector, k, allowed=None):
        every = self.exact.search(vector, 10**9, allowed)
        coarse = sorted(((key, round(sim, 4)) for key, sim in every), key=lambda h: (-h[1], h[0]))
        return coarse[:k]


def test_near_ties_are_settled_by_the_trace_not_by_the_backends_rounding():
    """Items 0..5 are within 2e-6 of one another; a backend that rounds them equal would hand
    back the smallest keys, the adapter asks for more and keeps the truly nearest."""
    base = np.asarray([1.0, 0.0], np.float32)
    angles = np.asarray([3e-3 + 1e-4 * (5 - i) for i in range(6)])  # item 5 nearest
    vectors = np.stack([np.cos(angles), np.sin(angles)], axis=1).astype(np.float32)
    index = ProtocolLongTermIndex(
        vectors, np.zeros(6, np.int64), 1, make_store=lambda s: CoarseScores(2)
    )
    for i in range(6):
        index.lts_enter(i)
    assert [k for k, _ in index._store(0).search(base, 2)] == [0, 1]  # the backend's order
    assert index.search(0, base, 2)[0].tolist() == top_k(vectors, np.arange(6), base, 2)[0].tolist()
    assert index.search(0, base, 2)[0].tolist() == [5, 4]


@pytest.mark.slow  # ~30 s: the bundled trace (10,033 events) replayed on three stores
def test_the_bundled_trace_decides_the_same_on_every_store(tmp_path, monkeypatch):
    """Where near ties are many (TF-IDF vectors of repeated texts): LRU at 512 tokens, a
    256-token short-term cache, so the long-term store serves most retrievals."""
    pytest.importorskip("qdrant_client")
    from memlens.config.store import DATA_DIR
    from memlens.trace.io import load_trace

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    tr = load_trace(DATA_DIR / "default" / "agent-small.jsonl.gz")
    emb = embed_trace(tr, EmbeddingsConfig(cache=False), 0)
    runs = {}
    for store in ("hnsw", "exact", "qdrant"):
        cfg = RetrievalConfig(enabled=True, store=store)  # default exact_below: no stream over
        ret = make_retriever(tr, cfg, emb, tiers=TiersConfig(short_term_tokens=256))
        runs[store] = replay_with_retrieval(tr, LRU(), 512, ret)[1]
    assert runs["hnsw"].index_queries == 0 and np.sum(runs["hnsw"].ret_tier == 2) > 1000
    for store in ("exact", "qdrant"):
        for name in RECORD_ARRAYS:
            assert np.array_equal(getattr(runs[store], name), getattr(runs["hnsw"], name)), name
