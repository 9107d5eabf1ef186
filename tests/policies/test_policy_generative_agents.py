"""Generative Agents' score (recency + importance + relevance, min-max normalised)."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from memlens.policies.generative_agents import GenerativeAgents, tfidf_rows
from memlens.policies.lru import LRU
from policy_cases import R, Run, W, traces

from memlens import testing
from memlens.trace.io import trace_from_events


def test_relevant_memory_outlives_more_recent_irrelevant_ones():
    events = [W("x", 0, text="invoice refund"), W("y", 10, text="flight booking"),
              W("z", 15, text="seat"), R("r", 20, ["z"], text="refund the invoice please"),
              W("w", 30, text="nothing")]  # fmt: skip
    # candidates at w: recency (normalised) x 0, y 1/3, z 2/3, w 1; relevance x 1, others 0;
    # importance equal (no spread, no weight): scores x 1, y 1/3, z 2/3, w 1 -> y goes
    run = Run(events, GenerativeAgents(), budget=300)
    assert run.evicted == ["y"]
    assert Run(events, LRU(), budget=300).evicted == ["x"]
    p, ix = run.policy, run.trace.item_index
    assert p.relevance(ix["x"]) > 0.5
    assert p.relevance(ix["y"]) == 0.0
    # without the relevance term x is just the oldest
    assert Run(events, GenerativeAgents(w_relevance=0.0), budget=300).evicted == ["x"]


def test_variant_defaults_are_the_sources_constants():
    paper, code = GenerativeAgents(), GenerativeAgents(variant="code")
    assert (paper.w_recency, paper.w_importance, paper.w_relevance) == (1.0, 1.0, 1.0)
    assert (paper.recency_decay, paper.rank_recency) == (0.995, False)
    # retrieve.py:244 gw = [0.5, 3, 2] for recency, relevance, importance; scratch.py:60 0.99
    assert (code.w_recency, code.w_relevance, code.w_importance) == (0.5, 3.0, 2.0)
    assert (code.recency_decay, code.rank_recency) == (0.99, True)
    with pytest.raises(ValueError, match="variant"):
        GenerativeAgents(variant="both")
    with pytest.raises(ValueError, match="recency"):
        GenerativeAgents(recency="days")


def test_the_codes_rank_recency_is_inverted():
    # equal importance, no request: recency alone.  The paper evicts the oldest (a); the
    # code's extract_recency ranks by last access, oldest first, and gives rank i the
    # recency 0.99 ** i: the newest (d, rank 4) scores lowest and goes
    events = [W("a", 0), W("b", 3600), W("c", 7200), W("d", 10800)]
    assert Run(events, GenerativeAgents(), budget=300).evicted == ["a"]
    run = Run(events, GenerativeAgents(variant="code"), budget=300)
    assert run.evicted == ["d"]
    assert run.result.engine == "reference"
    # a use makes a the most recently accessed of the plain pages, so under the code it goes
    # first (c, important, is kept by its importance); the paper evicts b, the least recent
    events = [
        W("a", 0),
        W("b", 1),
        R("r", 2, ["a"]),
        W("c", 3, "tool_result", text="error: failed"),
    ]
    assert Run(events, GenerativeAgents(variant="code"), budget=250).evicted == ["a"]
    assert Run(events, GenerativeAgents(), budget=250).evicted == ["b"]


def test_importance_can_come_from_the_traces_own_ratings():
    # a (oldest) rated 9 of 10 in its meta, b and c unrated (the rule's stand-in: equal)
    events = [{**W("a", 0), "meta": {"importance": 9}}, W("b", 10), W("c", 20)]
    assert Run(events, GenerativeAgents(), budget=200).evicted == ["a"]
    run = Run(events, GenerativeAgents(importance="meta"), budget=200)
    assert run.evicted == ["b"]
    assert run.policy.importance_of(run.trace)[0] == 0.9
    assert run.result.engine == "reference"  # Run replays on the reference engine
    testing.assert_kernel_matches(run.trace, lambda: GenerativeAgents(importance="meta"), 200,
                                  False)  # fmt: skip
    with pytest.raises(ValueError, match="importance"):
        GenerativeAgents(importance="llm")


def test_important_memory_outlives_more_recent_plain_ones():
    events = [W("a", 0, "tool_result", text="error: failed"), W("b", 10, text="hmm"),
              W("c", 20, text="hmm")]  # fmt: skip
    # recency a 0, b 1/2, c 1; importance a 1, b 0, c 0 -> scores 1, 1/2, 1 -> b goes
    assert Run(events, GenerativeAgents(), budget=200).evicted == ["b"]
    assert Run(events, GenerativeAgents(w_importance=0.0), budget=200).evicted == ["a"]


def test_recency_is_per_hour_without_normalisation():
    events = [W("a", 0), W("b", 7200)]
    run = Run(events, GenerativeAgents(normalize=False), budget=1000)
    p = run.policy
    rec = p.scores([0, 1], 7200.0)
    imp = p._importance[0]
    assert rec[0] == pytest.approx(0.995**2 + imp)
    assert rec[1] == pytest.approx(1.0 + imp)


def test_tfidf_vectors_are_unit_length_and_cached():
    trace = trace_from_events([W("a", 0, text="refund invoice"), W("b", 1, text=""),
                               R("r", 2, ["a"], text="refund")])  # fmt: skip
    items, reqs = tfidf_rows(trace)
    assert math.isclose(sum(w * w for w in items[0].values()), 1.0)
    assert items[1] == {}
    assert tfidf_rows(trace)[0] is items


@settings(max_examples=60, deadline=None, derandomize=True)
@given(events=traces(), budget=st.sampled_from([1, 40, 100, 250]),
       demand_fetch=st.booleans(), normalize=st.booleans(),
       variant=st.sampled_from(["paper", "code"]))  # fmt: skip
def test_runs_on_any_trace(events, budget, demand_fetch, normalize, variant):
    run = Run(events, GenerativeAgents(variant=variant, normalize=normalize), budget,
              demand_fetch=demand_fetch)  # fmt: skip
    r = run.result
    assert ((r.context_tokens - r.pinned_tokens) <= budget).all()
