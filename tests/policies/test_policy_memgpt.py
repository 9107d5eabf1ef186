"""MemGPT's queue manager: the flush at exactly 100%, the recursive summary, memory pressure."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from memlens.policies.memgpt import MemGPT
from policy_cases import PIN, R, Run, W, traces


def writes(n, start=1, tokens=100):
    return [W(f"i{k}", k, "user_input", tokens=tokens) for k in range(start, start + n)]


def test_no_flush_at_exactly_the_budget():
    run = Run(writes(10) + [R("q", 20, ["i1"])], MemGPT(), budget=1000)
    assert run.evicted == []
    assert run.policy.extra_tokens == 0
    assert run.result.context_tokens.tolist() == [1000]
    assert run.hits("q") == [True]


def test_flush_one_token_past_the_budget_evicts_oldest_half_into_a_summary():
    events = writes(10) + [W("one", 11, tokens=1), R("q", 20, ["i1", "i7", "one"])]
    run = Run(events, MemGPT(), budget=1000)
    # 1001 > 1000: the oldest items until >= 50% of the 1001 message tokens (500.5) are freed;
    # summary = ceil(0.1 * 600) = 60
    assert run.evicted == ["i1", "i2", "i3", "i4", "i5", "i6"]
    assert run.policy.extra_tokens == 60
    assert run.policy.flushes == 1
    assert run.result.context_tokens.tolist() == [401 + 60]  # the summary is in the context
    assert run.hits("q") == [False, True, True]  # the summary is lossy


def test_summary_is_recursive_and_counts_against_the_budget():
    events = writes(11)  # flush at i11: 1100 > 1000, evict i1..i6 (600 >= 550), summary 60
    events += writes(3, start=12)  # 800 + 60
    events += [W("fill", 15, tokens=140)]  # exactly 1000 with the summary: no flush
    events += [R("q1", 16, ["i7"])]
    events += [W("over", 17, tokens=1)]  # 941 + 60: target 500.5, i7..i12 (600) go
    events += [R("q2", 18, ["i7", "i13"])]
    run = Run(events, MemGPT(), budget=1000)
    assert run.evicted == [f"i{k}" for k in range(1, 13)]
    assert run.policy.extra_tokens == 66  # ceil(0.1 * (60 + 600))
    assert run.result.context_tokens.tolist() == [1000, 941 - 600 + 66]
    assert run.hits("q2") == [False, True]


def test_the_flush_target_is_a_share_of_the_messages_not_of_the_budget():
    # a 700-token pinned system prompt: the queue holds 400 when the budget overflows; half
    # the budget (500) would empty it, half the messages (200) leaves i3 and i4
    events = [W("sys", 0, tokens=700), PIN("sys", 0.5)] + writes(4)
    run = Run(events, MemGPT(), budget=1000)
    assert run.evicted == ["i1", "i2"]
    assert run.policy.extra_tokens == 20


def test_the_released_code_keeps_the_last_three_and_summarises_at_most_75_percent():
    # letta 8bd29c9 agent.py:662-742: target int(0.75 * 1001) = 750; 8 candidates (3 kept
    # back); the longest prefix within the target: i1..i7 (700); a 130-token summary
    events = writes(10) + [W("one", 11, tokens=1)]
    run = Run(events, MemGPT(variant="code"), budget=1000)
    assert run.evicted == [f"i{k}" for k in range(1, 8)]
    assert run.policy.extra_tokens == 130
    # next overflow: 871 + 130; the old summary (130) comes first in the walk, then i8 and
    # i9 (the 2 candidates); i10, one and big are kept back; 871 - 200 + 130 fits
    run = Run(events + [W("big", 12, tokens=570), R("q", 13, ["i10"])], MemGPT(variant="code"),
              budget=1000)  # fmt: skip
    assert run.evicted == [f"i{k}" for k in range(1, 10)]
    assert run.result.context_tokens.tolist() == [871 - 200 + 130]
    assert run.policy.pressure_fraction == 0.75 and run.policy.keep_last == 3


def test_kept_back_messages_go_when_nothing_else_fits():
    # three 400-token messages in a 1000 budget: the rule may take nothing (all kept back),
    # so the oldest goes anyway: MemLens's budget is hard
    events = [W(f"i{k}", k, "user_input", tokens=400) for k in range(1, 4)]
    run = Run(events, MemGPT(variant="code"), budget=1000)
    assert run.evicted == ["i1"]
    assert run.policy.extra_tokens == 130  # 800 + 130 fits


def test_summary_ratio_and_evict_fraction_are_parameters():
    events = writes(10) + [W("one", 11, tokens=1)]
    run = Run(events, MemGPT(evict_fraction=0.25, summary_ratio=0.0), budget=1000)
    assert run.evicted == ["i1", "i2", "i3"]  # 300 >= 250.25 tokens
    assert run.policy.extra_tokens == 0
    run = Run(events, MemGPT(summary_tokens=42), budget=1000)
    assert run.policy.extra_tokens == 42


def test_memory_pressure_is_counted_at_70_percent():
    run = Run(writes(6), MemGPT(), budget=1000)  # 600 tokens: no pressure yet
    assert run.policy.pressure_warnings == 0
    run = Run(writes(7), MemGPT(), budget=1000)  # 700 = 70%: one warning
    assert run.policy.pressure_warnings == 1
    # the flush at i11 brings it down to 560, i12 to 660, i13 back up to 760: a second warning
    assert Run(writes(12), MemGPT(), budget=1000).policy.pressure_warnings == 1
    run = Run(writes(13), MemGPT(), budget=1000)
    assert run.policy.pressure_warnings == 2
    assert run.evicted == [f"i{k}" for k in range(1, 7)]


def test_pinned_item_never_goes_into_the_summary():
    events = writes(2) + [PIN("i1", 2.5)] + writes(9, start=3) + [R("q", 30, ["i1"])]
    run = Run(events, MemGPT(), budget=1000)
    assert "i1" not in run.evicted
    assert run.evicted[0] == "i2"
    assert run.hits("q") == [True]


def test_pins_squeeze_the_summary_out():
    events = writes(11)  # flush at i11: summary 60, i7..i11 resident (500)
    events += [W("w", 12, tokens=400)]  # 900 + 60
    events += [PIN(f"i{k}", 13) for k in range(7, 12)] + [PIN("w", 13)]  # 900 pinned
    events += [R("q1", 14, ["w"])]
    events += [PIN("i1", 15)]  # forced back in: pins alone fill the budget (1000)
    events += [R("q2", 16, ["i1"])]
    run = Run(events, MemGPT(), budget=1000)
    assert run.result.context_tokens.tolist() == [960, 1000]  # summary 60, then squeezed to 0
    assert run.policy.extra_tokens == 0


def test_bad_parameters_are_rejected():
    with pytest.raises(ValueError):
        MemGPT(summary_ratio=0.6)
    with pytest.raises(ValueError):
        MemGPT(pressure_fraction=0.0)
    with pytest.raises(ValueError, match="variant"):
        MemGPT(variant="letta")
    with pytest.raises(ValueError):
        MemGPT(keep_last=-1)


@settings(max_examples=100, deadline=None, derandomize=True)
@given(events=traces(), budget=st.sampled_from([30, 100, 250]),
       demand_fetch=st.booleans())  # fmt: skip
@pytest.mark.slow  # kept out of the default run (6-minute budget); make test-all runs it
def test_context_never_exceeds_budget_unless_pins_do(events, budget, demand_fetch):
    run = Run(events, MemGPT(), budget, demand_fetch=demand_fetch)
    r = run.result
    # whatever the pins do, the unpinned items and the summary fit in the budget
    assert ((r.context_tokens - r.pinned_tokens) <= budget).all()
    assert (r.context_tokens[r.pinned_tokens == 0] <= budget).all()


@pytest.mark.slow  # builds an embedding index and a retriever: about 5 s on 2 cores
def test_recall_storage_is_the_retrieval_tier():
    """MemGPT's recall storage: a summarised message is a working-memory miss but, with the
    tiers on, it is in the long-term store and the retrieval tier brings it back (every
    policy's victims go there; nothing MemGPT-specific is needed)."""
    from memlens.analyze.metrics import compute_metrics
    from memlens.retrieval.config import HnswConfig, RerankConfig, RetrievalConfig
    from memlens.retrieval.embeddings import EmbeddingsConfig, embed_trace
    from memlens.retrieval.setup import make_retriever, replay_with_retrieval
    from memlens.retrieval.tiers import TiersConfig
    from memlens.testing import rq, trace, w

    def vec(k):
        return {"embedding": [1.0 if j == k else 0.0 for j in range(4)]}

    events = [w(f"m{k}", 100, "user_input", meta=vec(k)) for k in range(4)]
    events += [w("m4", 1, "user_input", meta=vec(3)), rq("q", "m0", meta=vec(0))]
    tr = trace(*events)
    cfg = RetrievalConfig(enabled=True, budget=200, k=1, hnsw=HnswConfig(exact_below=0),
                          rerank=RerankConfig(value=0.0, freshness=0.0))  # fmt: skip
    emb = embed_trace(tr, EmbeddingsConfig(kind="trace", cache=False))
    ret = make_retriever(tr, cfg, emb, tiers=TiersConfig(short_term_tokens=0))
    res, rec = replay_with_retrieval(tr, MemGPT(), 400, ret)
    m = compute_metrics(tr, res, retrieval=rec)["overall"]
    assert m["hit_rate"] == 0.0  # m0 went into the summary at m4's write (401 > 400)
    assert m["context_recall"] == 1.0  # and the retrieval tier found it
