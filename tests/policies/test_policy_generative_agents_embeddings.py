"""Generative Agents' relevance from the run's embeddings (``relevance=embeddings``): the
stand-in for the released code's ada-002 cosine (``retrieve.py`` ``extract_relevance``)."""

from __future__ import annotations

import importlib.util
import os

import numpy as np
import pytest
from memlens.policies.generative_agents import GenerativeAgents

from memlens import testing
from memlens.config.compose import run_settings
from memlens.retrieval.embeddings import EmbeddingError, EmbeddingsConfig
from memlens.runs.pipeline import replay
from memlens.simulator import MoveKind, simulate
from memlens.trace.io import trace_from_events

HAS_SENTENCE_TRANSFORMERS = importlib.util.find_spec("sentence_transformers") is not None


def ev(kind, ident, t, vector, text, *needs):
    """A write (10 tokens) or request of stream "s" carrying ``meta.embedding``."""
    meta = {"embedding": vector}
    if kind == "write":
        return testing.w(ident, 10, stream="s", t=t, text=text, meta=meta)
    return testing.rq(ident, *needs, stream="s", t=t, text=text, meta=meta)


#: Hand-checkable: a, b, c fill the budget (30 tokens); r ("alpha", vector (0.6, 0.8)) needs a;
#: d's write needs room for one more.  With relevance alone (weights 0, 0, 1):
#:   TF-IDF: only a shares a word with r: relevance a > 0, b = c = d = 0; the least recent
#:           of the zeros goes: b (a was used by r after c's write).
#:   trace vectors: a (1, 0) -> 0.6, b (0, 1) -> 0.8, c (-1, 0) -> -0.6, d (0.6, 0.8) -> 1.0:
#:           c goes.
#: Then s2 needs c: a miss with embeddings, a hit with TF-IDF.
HAND = [ev("write", "a", 0.0, [1.0, 0.0], "alpha"),
        ev("write", "b", 1.0, [0.0, 1.0], "beta"),
        ev("write", "c", 2.0, [-1.0, 0.0], "gamma"),
        ev("request", "r", 3.0, [0.6, 0.8], "alpha", "a"),
        ev("write", "d", 4.0, [0.6, 0.8], "delta"),
        ev("request", "s2", 5.0, [1.0, 0.0], "gamma", "c")]  # fmt: skip
TRACE_VECTORS = EmbeddingsConfig(kind="trace", cache=False)


def relevance_only(relevance: str) -> GenerativeAgents:
    policy = GenerativeAgents(relevance=relevance, w_recency=0.0, w_importance=0.0)
    policy.use_embeddings_settings(TRACE_VECTORS, seed=0)
    return policy


def evicted(trace, result) -> list[str]:
    return [trace.item_id[i] for i in result.move_item[result.move_kind == MoveKind.EVICT]]


@pytest.mark.parametrize("engine", ["reference", "fast"])
def test_embedding_relevance_picks_another_victim_than_tfidf(engine):
    trace = trace_from_events(HAND)
    results = {}
    for relevance in ("tfidf", "embeddings"):
        res = simulate(trace, relevance_only(relevance), 30, engine=engine, progress=False)
        assert res.engine == engine
        results[relevance] = res
    assert evicted(trace, results["tfidf"]) == ["b"]
    assert evicted(trace, results["embeddings"]) == ["c"]
    assert results["tfidf"].need_hit.tolist() == [True, True]
    assert results["embeddings"].need_hit.tolist() == [True, False]


def test_embedding_relevance_is_the_cosine_of_the_hand_vectors():
    trace = trace_from_events(HAND)
    policy = relevance_only("embeddings")
    policy.prepare(trace)
    policy._query = policy._req_vec[0]  # r's vector (0.6, 0.8)
    got = [policy.relevance(trace.item_index[k]) for k in "abcd"]
    assert got == pytest.approx([0.6, 0.8, -0.6, 1.0], abs=1e-6)  # float32 vectors
    tfidf = relevance_only("tfidf")
    tfidf.prepare(trace)
    tfidf._query = tfidf._req_vec[0]
    assert [tfidf.relevance(trace.item_index[k]) for k in "bcd"] == [0.0, 0.0, 0.0]
    assert tfidf.relevance(trace.item_index["a"]) == pytest.approx(1.0)


def test_new_settings_take_effect_on_the_trace_the_policy_last_replayed():
    """One instance, one trace: TF-IDF-reduced vectors first, then the trace's own (the hand
    case's victim c), then back; the reference engine prepares its vectors again each time."""
    trace = trace_from_events(HAND)
    policy = relevance_only("embeddings")
    victims = []
    for cfg in (EmbeddingsConfig(kind="tfidf", dim=2, cache=False), TRACE_VECTORS):
        policy.use_embeddings_settings(cfg, seed=0)
        res = simulate(trace, policy, 30, engine="reference", progress=False)
        victims.append(evicted(trace, res))
    assert victims[1] == ["c"] and victims[0] != victims[1]


def test_tfidf_stays_the_default_and_a_bad_source_is_refused():
    assert GenerativeAgents().relevance_source == "tfidf"
    assert not GenerativeAgents().reads_embeddings
    assert GenerativeAgents(relevance="embeddings").reads_embeddings
    with pytest.raises(ValueError, match="relevance must be tfidf or embeddings, not 'ada'"):
        GenerativeAgents(relevance="ada")


def test_the_run_hands_its_embeddings_settings_and_seed_to_the_policy():
    """``memlens simulate policy=generative_agents policy.relevance=embeddings
    embeddings.kind=trace``: the pipeline's policy reads the trace's vectors (the hand case's
    victim), with the run's seed."""
    trace = trace_from_events(HAND)
    settings = run_settings(["policy=generative_agents", "policy.relevance=embeddings",
                             "policy.w_recency=0", "policy.w_importance=0",
                             "embeddings.kind=trace", "embeddings.cache=false", "seed=7",
                             "budget=30", "oracle.enabled=false"])  # fmt: skip
    done = replay(settings, trace)
    assert done.policy.embeddings.kind == "trace" and done.policy.embeddings_seed == 7
    assert evicted(trace, done.result) == ["c"]


def test_a_trace_without_vectors_is_an_error_naming_the_field_and_the_policy():
    trace = trace_from_events([testing.w("a", 10, stream="s", t=0.0, text="x"),
                               testing.rq("r", "a", stream="s", t=1.0, text="x")])  # fmt: skip
    with pytest.raises(EmbeddingError, match=r'generative_agents relevance=embeddings: '
                                             r'<events>:1: field "meta.embedding" missing'):  # fmt: skip
        simulate(trace, relevance_only("embeddings"), 30, engine="reference", progress=False)


def sentence_policy(model: str) -> GenerativeAgents:
    policy = GenerativeAgents(relevance="embeddings")
    policy.use_embeddings_settings(EmbeddingsConfig(kind="sentence", model=model, cache=False), 0)
    return policy


def test_a_sentence_model_that_is_not_here_is_a_clear_error_never_a_download(tmp_path):
    """No model at the path (and here no sentence-transformers either): the error names the
    setting; Hugging Face is put offline first, so nothing is fetched."""
    trace = trace_from_events(HAND)
    missing = str(tmp_path / "no-such-model")
    want = (r"generative_agents relevance=embeddings: (embeddings\.kind=sentence needs the "
            r"sentence-transformers package|sentence model '.*no-such-model' is not available "
            r"locally)")  # fmt: skip
    for engine in ("reference", "fast"):
        with pytest.raises(EmbeddingError, match=want):
            simulate(trace, sentence_policy(missing), 30, engine=engine, progress=False)
    assert not (tmp_path / "no-such-model").exists()


@pytest.mark.skipif(HAS_SENTENCE_TRANSFORMERS, reason="the package is installed here")
def test_the_command_refuses_sentence_embeddings_without_the_package(capsys):
    """Before any work starts (what ``memlens simulate`` runs first): exit 2, one line."""
    from memlens.cli.replay import check_simulate
    from memlens.config.app import validate

    argv = ["policy=generative_agents", "policy.relevance=embeddings",
            "embeddings.kind=sentence", "embeddings.model=/nowhere/model"]  # fmt: skip
    with pytest.raises(SystemExit) as exc:
        validate("simulate", argv, check_simulate)
    assert exc.value.code == 2
    line = capsys.readouterr().err.strip()
    assert line == ("error: embeddings.kind=sentence (for policy generative_agents "
                    "relevance=embeddings) needs the sentence-transformers package, which is "
                    "not installed (embeddings.kind=tfidf needs nothing)")  # fmt: skip


LOCAL_MODEL = os.environ.get("MEMLENS_TEST_SENTENCE_MODEL")


@pytest.mark.skipif(not (HAS_SENTENCE_TRANSFORMERS and LOCAL_MODEL),
                    reason="needs sentence-transformers and a local model in "
                           "MEMLENS_TEST_SENTENCE_MODEL")  # fmt: skip
def test_a_local_sentence_model_gives_the_same_replay_on_both_engines():
    rng = np.random.default_rng(0)
    trace = trace_from_events(testing.random_events(rng, 60, 1))
    testing.assert_kernel_matches(trace, lambda: sentence_policy(LOCAL_MODEL), 60, False)
