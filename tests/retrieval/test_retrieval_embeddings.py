"""Embedders (offline only), their cache, and retrieval built from typed settings for a run."""

from __future__ import annotations

import numpy as np
import pytest
from helpers import rq, trace, w
from memlens.policies.lru import LRU
from memlens.policies.window import SlidingWindow

from memlens.analyze.metrics import compute_metrics
from memlens.retrieval.compression import CompressionConfig
from memlens.retrieval.config import RetrievalConfig
from memlens.retrieval.embeddings import EmbeddingError, EmbeddingsConfig, embed_trace
from memlens.retrieval.setup import (
    build_retriever,
    live_hook,
    retrieval_record,
    retrieval_section,
    stored_tokens_saved,
)
from memlens.retrieval.tiers import TiersConfig
from memlens.simulator import simulate
from memlens.trace.generate import generate_simple
from memlens.trace.io import load_trace, write_trace

TRACE_VECTORS = EmbeddingsConfig(kind="trace", cache=False)
TEXTS = trace(
    w("a", 5, text="refund the damaged blender order"),
    w("b", 5, text="flight to Lisbon at nine"),
    w("c", 5, text=""),
    rq("r", "b", text="when is the Lisbon flight"),
)


@pytest.mark.parametrize("kind", ["tfidf", "hashing"])
def test_sklearn_embedders_are_unit_vectors_and_find_the_match(kind):
    emb = embed_trace(TEXTS, EmbeddingsConfig(kind=kind, dim=4, cache=False))
    assert emb.items.shape[0] == 3 and emb.requests.shape[0] == 1
    norms = np.linalg.norm(emb.items, axis=1)
    assert np.allclose(norms[:2], 1.0, atol=1e-5) and norms[2] == 0.0  # empty text: zero vector
    sims = emb.items @ emb.requests[0]
    assert int(np.argmax(sims)) == 1


def test_corpus_fit(tmp_path):
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("flight Lisbon nine\nrefund blender order\nthe a to at\n", encoding="utf-8")
    emb = embed_trace(TEXTS, EmbeddingsConfig(dim=2, cache=False, corpus=str(corpus)))
    assert int(np.argmax(emb.items @ emb.requests[0])) == 1


def test_cache_is_keyed_by_trace_settings_and_seed(tmp_path):
    a = embed_trace(TEXTS, EmbeddingsConfig(dim=4, cache_dir=str(tmp_path)))
    b = embed_trace(TEXTS, EmbeddingsConfig(dim=4, cache_dir=str(tmp_path)))
    assert a.cache_file == b.cache_file and np.array_equal(a.items, b.items)
    c = embed_trace(TEXTS, EmbeddingsConfig(dim=3, cache_dir=str(tmp_path)))
    assert c.cache_file != a.cache_file
    d = embed_trace(TEXTS, EmbeddingsConfig(dim=4, cache_dir=str(tmp_path)), seed=1)
    assert d.cache_file not in (a.cache_file, c.cache_file)
    assert len(list(tmp_path.glob("*.npz"))) == 3


def test_trace_vectors_and_their_errors():
    ok = trace(w("a", 1, meta={"embedding": [3, 4]}), rq("r", "a", meta={"embedding": [0, 2]}))
    emb = embed_trace(ok, TRACE_VECTORS)
    assert emb.items.tolist() == [[pytest.approx(0.6), pytest.approx(0.8)]]
    assert emb.requests.tolist() == [[0.0, 1.0]]
    missing = trace(w("a", 1, meta={"embedding": [1, 0]}), w("b", 1), rq("r", "a"))
    with pytest.raises(
        EmbeddingError, match=r'<test>:2: field "meta.embedding" missing on write "b"'
    ):
        embed_trace(missing, TRACE_VECTORS)
    ragged = trace(w("a", 1, meta={"embedding": [1, 0]}), rq("r", "a", meta={"embedding": [1]}))
    with pytest.raises(EmbeddingError, match=r"<test>:2: .* has 1 numbers, expected 2"):
        embed_trace(ragged, TRACE_VECTORS)


def test_sentence_model_never_downloads():
    local = EmbeddingsConfig(kind="sentence", model="no-such-local-model", cache=False)
    with pytest.raises(EmbeddingError):
        embed_trace(TEXTS, local)


@pytest.mark.parametrize(
    "bad, key", [({"kind": "word2vec"}, "embeddings.kind"), ({"dim": 0}, "embeddings.dim")]
)
def test_bad_embeddings_settings_are_rejected_naming_the_key(bad, key):
    with pytest.raises(ValueError, match=key.replace(".", r"\.")):
        EmbeddingsConfig(**bad)


@pytest.fixture(scope="module")
def small_trace(tmp_path_factory):
    path = tmp_path_factory.mktemp("tr") / "small.jsonl"
    write_trace(path, generate_simple(seed=5, streams=2, events_per_stream=250))
    return load_trace(path)


def replay(trace, policy, engine, tmp_path, retrieval=None, compression=None):
    """What a run does with retrieval: build, hook if live, replay, record (WM budget 512)."""
    retriever = build_retriever(
        trace,
        RetrievalConfig() if retrieval is None else retrieval,
        TiersConfig(),
        EmbeddingsConfig(cache_dir=str(tmp_path)),
        CompressionConfig() if compression is None else compression,
        seed=0,
    )
    hook = live_hook(retriever, engine)
    res = simulate(trace, policy, 512, engine=engine, progress=False, hook=hook)
    rec = retrieval_record(trace, res, retriever, hook)
    return res, rec, compute_metrics(trace, res, retrieval=rec)


def test_run_reports_retrieval_and_agrees_across_engines(small_trace, tmp_path):
    on = RetrievalConfig(enabled=True, budget=256)
    res, rec, auto = replay(small_trace, LRU(), "auto", tmp_path, on)
    _, _, ref = replay(small_trace, LRU(), "reference", tmp_path, on)
    assert not res.extra.get("outside_oracle_class")
    assert auto["timing"]["engine"] == "fast" and ref["timing"]["engine"] == "reference"
    for key in ("hit_rate", "context_recall", "retrieval_precision", "mean_context_tokens_total"):
        assert auto["overall"][key] == ref["overall"][key], key
    assert auto["overall"]["context_recall"] > auto["overall"]["hit_rate"]
    section = retrieval_section(rec)
    assert section["enabled"] and section["budget"] == 256
    assert section["short_term_latency_ms"] == 1.0 and section["long_term_latency_ms"] == 20.0
    assert auto["overall"]["retrieval_latency_modeled_ms_p50"] == 21.0
    assert auto["timing"]["retrieval_latency_ms_p95"] > 0
    _, off_rec, off = replay(small_trace, LRU(), "auto", tmp_path)
    assert off_rec is None and retrieval_section(off_rec) == {"enabled": False}
    assert off["overall"]["hit_rate"] == auto["overall"]["hit_rate"]  # WM-only, unchanged
    assert off["overall"]["context_recall"] == off["overall"]["hit_rate"]


def test_run_with_promotion_is_outside_the_oracle_class(small_trace, tmp_path):
    on = RetrievalConfig(enabled=True, budget=256, promote=True)
    res, rec, m = replay(small_trace, SlidingWindow(), "auto", tmp_path, on)
    assert res.extra.get("outside_oracle_class") is True
    assert m["timing"]["engine"] == "reference"
    assert m["overall"]["promoted"] > 0
    assert rec.tiers.counts().get("lts->wm", 0) > 0


def test_stored_tokens_saved_matches_the_record(small_trace, tmp_path):
    """Compression's saving over the LTS: the same from the record and from the tier log."""
    on = RetrievalConfig(enabled=True, budget=256)
    thoughts = CompressionConfig(by_type={"llm_thought": "summary"})
    _, rec, m = replay(small_trace, LRU(), "auto", tmp_path, on, thoughts)
    saved = stored_tokens_saved(small_trace, rec.tiers, thoughts)
    assert saved > 0 and saved == rec.stored_tokens_saved
    assert m["overall"]["compression_stored_tokens_saved"] == saved
    assert stored_tokens_saved(small_trace, rec.tiers, CompressionConfig()) == 0
