"""MemoryOS heat = alpha * visits + beta * length + gamma * exp(-hours / 24)."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from memlens.policies.lru import LRU
from memlens.policies.memoryos_heat import MemoryOSHeat
from policy_cases import R, Run, W, traces

H = 3600.0


def test_heat_by_hand():
    events = [W("a", 0, tokens=500), R("q1", 2 * H, ["a"]), R("q2", 3 * H, ["a"])]
    run = Run(events, MemoryOSHeat(), budget=1000)
    a = run.trace.item_index["a"]
    # 2 visits + 500/1000 pages + exp(-(27 - 3) / 24)
    assert run.policy.heat(a, 27 * H) == pytest.approx(2 + 0.5 + math.exp(-1.0))


def test_visited_memory_outlives_a_recent_unvisited_one():
    events = [W("a", 0), R("q", 60, ["a"]), W("b", 5 * H), W("c", 6 * H)]
    assert Run(events, MemoryOSHeat(), budget=200).evicted == ["b"]
    assert Run(events, LRU(), budget=200).evicted == ["a"]


def test_long_interaction_outlives_a_short_one():
    events = [W("long", 0, tokens=900), W("short", 1, tokens=50), W("c", 2, tokens=50)]
    # heat: long 0.9 + ~1, short 0.05 + ~1, c 0.05 + 1: short (older than c) goes
    assert Run(events, MemoryOSHeat(), budget=999).evicted == ["short"]
    # without the length term recency decides: long is the oldest
    assert Run(events, MemoryOSHeat(beta=0.0), budget=999).evicted == ["long"]


@settings(max_examples=60, deadline=None, derandomize=True)
@given(events=traces(), budget=st.sampled_from([1, 40, 100, 250]),
       demand_fetch=st.booleans())  # fmt: skip
def test_runs_on_any_trace(events, budget, demand_fetch):
    run = Run(events, MemoryOSHeat(), budget, demand_fetch=demand_fetch)
    r = run.result
    assert ((r.context_tokens - r.pinned_tokens) <= budget).all()
