"""Embedders (offline only), their cache, and the retrieval settings wired through a run."""

from __future__ import annotations

import numpy as np
import pytest
from helpers import rq, trace, w
from omegaconf import OmegaConf

from memlens.config import CONF_DIR, policy_config
from memlens.embeddings import EmbeddingError, embed_trace
from memlens.generate import generate_simple
from memlens.run import replay
from memlens.trace_io import load_trace, write_trace

TEXTS = trace(
    w("a", 5, text="refund the damaged blender order"),
    w("b", 5, text="flight to Lisbon at nine"),
    w("c", 5, text=""),
    rq("r", "b", text="when is the Lisbon flight"),
)


@pytest.mark.parametrize("kind", ["tfidf", "hashing"])
def test_sklearn_embedders_are_unit_vectors_and_find_the_match(kind):
    emb = embed_trace(TEXTS, {"kind": kind, "dim": 4, "cache": False})
    assert emb.items.shape[0] == 3 and emb.requests.shape[0] == 1
    norms = np.linalg.norm(emb.items, axis=1)
    assert np.allclose(norms[:2], 1.0, atol=1e-5) and norms[2] == 0.0  # empty text: zero vector
    sims = emb.items @ emb.requests[0]
    assert int(np.argmax(sims)) == 1


def test_corpus_fit(tmp_path):
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("flight Lisbon nine\nrefund blender order\nthe a to at\n", encoding="utf-8")
    emb = embed_trace(TEXTS, {"dim": 2, "cache": False, "corpus": str(corpus)})
    assert int(np.argmax(emb.items @ emb.requests[0])) == 1


def test_cache_is_keyed_by_trace_and_settings(tmp_path):
    a = embed_trace(TEXTS, {"dim": 4, "cache_dir": str(tmp_path)})
    b = embed_trace(TEXTS, {"dim": 4, "cache_dir": str(tmp_path)})
    assert a.cache_file == b.cache_file and np.array_equal(a.items, b.items)
    c = embed_trace(TEXTS, {"dim": 3, "cache_dir": str(tmp_path)})
    assert c.cache_file != a.cache_file
    assert len(list(tmp_path.glob("*.npz"))) == 2


def test_trace_vectors_and_their_errors():
    ok = trace(w("a", 1, meta={"embedding": [3, 4]}), rq("r", "a", meta={"embedding": [0, 2]}))
    emb = embed_trace(ok, {"kind": "trace", "cache": False})
    assert emb.items.tolist() == [[pytest.approx(0.6), pytest.approx(0.8)]]
    assert emb.requests.tolist() == [[0.0, 1.0]]
    missing = trace(w("a", 1, meta={"embedding": [1, 0]}), w("b", 1), rq("r", "a"))
    with pytest.raises(
        EmbeddingError, match=r'<test>:2: field "meta.embedding" missing on write "b"'
    ):
        embed_trace(missing, {"kind": "trace", "cache": False})
    ragged = trace(w("a", 1, meta={"embedding": [1, 0]}), rq("r", "a", meta={"embedding": [1]}))
    with pytest.raises(EmbeddingError, match=r"<test>:2: .* has 1 numbers, expected 2"):
        embed_trace(ragged, {"kind": "trace", "cache": False})


def test_sentence_model_never_downloads():
    with pytest.raises(EmbeddingError):
        embed_trace(TEXTS, {"kind": "sentence", "model": "no-such-local-model", "cache": False})
    with pytest.raises(EmbeddingError, match="embeddings.kind"):
        embed_trace(TEXTS, {"kind": "word2vec", "cache": False})


@pytest.fixture(scope="module")
def small_trace(tmp_path_factory):
    path = tmp_path_factory.mktemp("tr") / "small.jsonl"
    write_trace(path, generate_simple(seed=5, streams=2, events_per_stream=250))
    return load_trace(path)


def _cfg(tmp_path, **over):
    base = OmegaConf.load(CONF_DIR / "base.yaml")
    base.trace = "unused"
    base.mlflow.enabled = False
    base.oracle = {"enabled": False}  # the oracle's bounds are not what these tests check
    base.embeddings.cache_dir = str(tmp_path)
    return OmegaConf.merge(base, OmegaConf.create(over))


def test_run_reports_retrieval_and_agrees_across_engines(small_trace, tmp_path):
    on = {"retrieval": {"enabled": True, "budget": 256}}
    auto = replay(_cfg(tmp_path, **on), small_trace, policy_config("lru"), 512).metrics
    ref = replay(_cfg(tmp_path, engine="reference", **on), small_trace, policy_config("lru"), 512)
    assert auto["timing"]["engine"] == "fast" and ref.metrics["timing"]["engine"] == "reference"
    for key in ("hit_rate", "context_recall", "retrieval_precision", "mean_context_tokens_total"):
        assert auto["overall"][key] == ref.metrics["overall"][key], key
    assert auto["overall"]["context_recall"] > auto["overall"]["hit_rate"]
    assert auto["retrieval"]["enabled"] and not auto["outside_oracle_class"]
    assert auto["overall"]["retrieval_latency_modeled_ms_p50"] == 21.0
    assert auto["timing"]["retrieval_latency_ms_p95"] > 0
    off = replay(_cfg(tmp_path), small_trace, policy_config("lru"), 512).metrics
    assert off["overall"]["hit_rate"] == auto["overall"]["hit_rate"]  # WM-only, unchanged
    assert off["overall"]["context_recall"] == off["overall"]["hit_rate"]
    assert off["retrieval"] == {"enabled": False}


def test_run_with_promotion_is_outside_the_oracle_class(small_trace, tmp_path):
    on = {"retrieval": {"enabled": True, "budget": 256, "promote": True}}
    out = replay(_cfg(tmp_path, **on), small_trace, policy_config("window"), 512)
    assert out.metrics["outside_oracle_class"] is True
    assert out.metrics["timing"]["engine"] == "reference"
    assert out.metrics["overall"]["promoted"] > 0
    assert out.metrics["tiers"]["moves"].get("lts->wm", 0) > 0
