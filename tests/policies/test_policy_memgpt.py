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
    events = writes(10) + [W("one", 11, tokens=1), R("q", 20, ["i1", "i6", "one"])]
    run = Run(events, MemGPT(), budget=1000)
    # 1001 > 1000: the oldest items until >= 500 tokens freed; summary = ceil(0.1 * 500) = 50
    assert run.evicted == ["i1", "i2", "i3", "i4", "i5"]
    assert run.policy.extra_tokens == 50
    assert run.policy.flushes == 1
    assert run.result.context_tokens.tolist() == [501 + 50]  # the summary is in the context
    assert run.hits("q") == [False, True, True]  # the summary is lossy


def test_summary_is_recursive_and_counts_against_the_budget():
    events = writes(11)  # flush at i11: evict i1..i5, summary 50; 600 + 50 resident
    events += writes(3, start=12)  # 950
    events += [W("fill", 15, tokens=50)]  # exactly 1000 with the summary: no flush
    events += [R("q1", 16, ["i6"])]
    events += [W("over", 17, tokens=1)]  # 1001: flush i6..i10 (500) + old summary 50
    events += [R("q2", 18, ["i6", "i11"])]
    run = Run(events, MemGPT(), budget=1000)
    assert run.evicted == [f"i{k}" for k in range(1, 11)]
    assert run.policy.extra_tokens == 55  # ceil(0.1 * (50 + 500))
    assert run.result.context_tokens.tolist() == [1000, 1001 - 500 - 50 + 55]
    assert run.hits("q2") == [False, True]


def test_summary_ratio_and_evict_fraction_are_parameters():
    events = writes(10) + [W("one", 11, tokens=1)]
    run = Run(events, MemGPT(evict_fraction=0.25, summary_ratio=0.0), budget=1000)
    assert run.evicted == ["i1", "i2", "i3"]  # 300 >= 250 tokens
    assert run.policy.extra_tokens == 0


def test_memory_pressure_is_counted_at_70_percent():
    run = Run(writes(6), MemGPT(), budget=1000)  # 600 tokens: no pressure yet
    assert run.policy.pressure_warnings == 0
    run = Run(writes(7), MemGPT(), budget=1000)  # 700 = 70%: one warning
    assert run.policy.pressure_warnings == 1
    # the flush at i11 brings it down to 650, the next write back up to 750: a second warning
    run = Run(writes(12), MemGPT(), budget=1000)
    assert run.policy.pressure_warnings == 2
    assert run.evicted == [f"i{k}" for k in range(1, 6)]


def test_pinned_item_never_goes_into_the_summary():
    events = writes(2) + [PIN("i1", 2.5)] + writes(9, start=3) + [R("q", 30, ["i1"])]
    run = Run(events, MemGPT(), budget=1000)
    assert "i1" not in run.evicted
    assert run.evicted[0] == "i2"
    assert run.hits("q") == [True]


def test_pins_squeeze_the_summary_out():
    events = writes(11)  # flush at i11: summary 50, i6..i11 resident (600)
    events += [W("w", 12, tokens=300)]  # 900 + 50
    events += [PIN(f"i{k}", 13) for k in range(6, 12)] + [PIN("w", 13)]  # 900 pinned
    events += [R("q1", 14, ["w"])]
    events += [PIN("i1", 15)]  # forced back in: pins alone fill the budget (1000)
    events += [R("q2", 16, ["i1"])]
    run = Run(events, MemGPT(), budget=1000)
    assert run.result.context_tokens.tolist() == [950, 1000]  # summary 50, then squeezed to 0
    assert run.policy.extra_tokens == 0


def test_bad_parameters_are_rejected():
    with pytest.raises(ValueError):
        MemGPT(summary_ratio=0.6)
    with pytest.raises(ValueError):
        MemGPT(pressure_fraction=0.0)


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
