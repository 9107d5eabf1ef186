"""Retrieval from the lower tiers in ``MemoryManager.context(stream, query=...)``: a session
computed by hand (where each evicted item sits, what a query brings back under the retrieval
budget), the settings refused live, and the record's header and overrides carrying them."""

from __future__ import annotations

import pytest
from helpers import Tick

from memlens.live import MemoryManager
from memlens.live.replay import replay_record_retrieval, simulate_overrides

TEXTS = ["the weather in paris is sunny", "flight booking to rome done",
         "hotel price in paris 200", "user likes tea", "more about rome flight", "x y z"]  # fmt: skip


@pytest.fixture
def corpus(tmp_path):
    path = tmp_path / "corpus.txt"
    path.write_text("the weather in paris\nflight booking to rome\nhotel price in paris\n"
                    "user likes tea\n")  # fmt: skip
    return path


def session(path, corpus, budget=100):
    # LRU, 30 tokens of working memory, six writes of 10: m0..m2 are evicted in that order;
    # the short-term cache (20 tokens) keeps the last two (m1, m2), m0 overflows to long term
    m = MemoryManager("lru", 30, path, clock=Tick(), retrieval={"k": 4, "budget": budget},
                      tiers={"short_term_tokens": 20},
                      embeddings={"corpus": str(corpus), "cache": False})  # fmt: skip
    for text in TEXTS:
        m.write("s", text, "tool_result", tokens=10)
    return m


def test_context_brings_back_from_both_tiers_best_first(tmp_path, corpus):
    with session(tmp_path / "r.jsonl", corpus) as m:
        assert [(i.id, i.tier) for i in m.context("s")] == [
            ("m3", "working"), ("m4", "working"), ("m5", "working")]  # fmt: skip
        ctx = m.context("s", query="paris weather")
        # working memory first, then: m0 (both words) from long term, m2 (paris) from short
        # term, m1 (no shared word: similarity 0, kept by min_similarity 0) last
        assert [(i.id, i.tier, i.tokens) for i in ctx] == [
            ("m3", "working", 10), ("m4", "working", 10), ("m5", "working", 10),
            ("m0", "long_term", 10), ("m2", "short_term", 10), ("m1", "short_term", 10)]  # fmt: skip
        m.used("s", ["m0"], text="paris weather")
    _, record = replay_record_retrieval(tmp_path / "r.jsonl", engine="reference")
    assert record.ret_item.tolist() == [0, 2, 1]


def test_the_retrieval_budget_caps_what_comes_back(tmp_path, corpus):
    with session(tmp_path / "r.jsonl", corpus, budget=20) as m:
        ctx = m.context("s", query="paris weather")
        assert [(i.id, i.tier) for i in ctx if i.tier != "working"] == [
            ("m0", "long_term"), ("m2", "short_term")]  # fmt: skip


def test_the_header_and_the_simulate_overrides_carry_the_settings(tmp_path, corpus):
    session(tmp_path / "r.jsonl", corpus).close()
    reopened = MemoryManager.reopen(tmp_path / "r.jsonl")
    try:
        assert reopened.config["retrieval"]["retrieval"]["k"] == 4
        assert reopened.config["retrieval"]["tiers"]["short_term_tokens"] == 20
        assert [i.id for i in reopened.context("s", query="paris")][3] in {"m0", "m2"}
    finally:
        reopened.close()
    overrides = simulate_overrides(tmp_path / "r.jsonl")
    for wanted in ("retrieval.enabled=true", "retrieval.k=4", "tiers.short_term_tokens=20",
                   f"embeddings.corpus={corpus}"):  # fmt: skip
        assert wanted in overrides


@pytest.mark.parametrize(("blocks", "field"), [
    (dict(retrieval={"promote": True}, embeddings={"corpus": "c.txt"}), "retrieval.promote"),
    (dict(retrieval={}), "embeddings.corpus"),
    (dict(retrieval={}, embeddings={"kind": "trace"}), "embeddings.kind"),
    (dict(retrieval={"k": -1}, embeddings={"corpus": "c.txt"}), "retrieval.k"),
    (dict(retrieval={"nope": 1}, embeddings={"corpus": "c.txt"}), "nope"),
    (dict(tiers={"short_term_tokens": 5}), "tiers"),
])  # fmt: skip
def test_settings_that_cannot_run_live_are_refused(tmp_path, blocks, field):
    with pytest.raises(ValueError, match=field):
        MemoryManager("lru", 30, tmp_path / "r.jsonl", **blocks)
    assert not (tmp_path / "r.jsonl").exists() or (tmp_path / "r.jsonl").stat().st_size == 0


def test_a_policy_replayed_from_the_record_retrieves_as_its_replay(tmp_path, corpus):
    # memorybank has no grow: its state is replayed from the session's events per call
    path = tmp_path / "r.jsonl"
    got = []
    with MemoryManager("memorybank", 30, path, clock=Tick(), retrieval={"k": 4, "budget": 100},
                       tiers={"short_term_tokens": 20},
                       embeddings={"corpus": str(corpus), "cache": False}) as m:  # fmt: skip
        for k, text in enumerate(TEXTS):
            m.write("s", text, "tool_result", tokens=10)
            if k >= 3:
                query = ["paris weather", "rome flight", "tea"][k - 3]
                got.append([i.id for i in m.context("s", query=query) if i.tier != "working"])
                m.used("s", [f"m{k - 3}"], text=query)
    _, record = replay_record_retrieval(path, engine="reference")
    ptr, item = record.ret_ptr.tolist(), record.ret_item.tolist()
    assert got == [[f"m{i}" for i in item[a:b]] for a, b in zip(ptr[:-1], ptr[1:])]
    assert any(got)


def test_from_config_reads_a_runs_retrieval_blocks(tmp_path, corpus):
    config = tmp_path / "resolved_config.yaml"
    config.write_text(f"""
policy: {{_target_: memlens.policies.lru.LRU}}
budget: 30
retrieval: {{enabled: true, k: 3, budget: 50}}
tiers: {{short_term_tokens: 20}}
embeddings: {{corpus: {corpus}, cache: false}}
compression: {{}}
""")
    with MemoryManager.from_config(config, clock=Tick()) as m:
        assert m.config["retrieval"]["retrieval"]["k"] == 3
        for text in TEXTS:
            m.write("s", text, "tool_result", tokens=10)
        retrieved = [i for i in m.context("s", query="paris weather") if i.tier != "working"]
        assert [i.id for i in retrieved] == ["m0", "m2", "m1"]
    config.write_text(config.read_text().replace("enabled: true", "enabled: false"))
    with MemoryManager.from_config(config, clock=Tick()) as m:
        assert "retrieval" not in m.config  # off: the header of a session without retrieval
