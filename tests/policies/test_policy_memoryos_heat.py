"""MemoryOS: a short-term FIFO queue, then heat (paper) or access-frequency (code) eviction."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from memlens.policies.memoryos_heat import MemoryOSHeat
from policy_cases import PIN, R, Run, W, traces

H = 3600.0


def test_variant_defaults_are_the_sources_constants():
    paper, code = MemoryOSHeat(), MemoryOSHeat(variant="code")
    assert (paper.tau_s, paper.short_term_pages, paper.lfu) == (1e7, 7, False)
    assert (code.tau_s, code.short_term_pages, code.lfu) == (24 * H, 10, True)
    assert paper.alpha == paper.beta == paper.gamma == 1.0 and paper.threshold == 5.0


def test_heat_by_hand_counts_pages_not_tokens():
    events = [W("a", 0, tokens=500), W("b", 1), R("q1", 2 * H, ["a"]), R("q2", 3 * H, ["a"])]
    run = Run(events, MemoryOSHeat(short_term_pages=0, recency_tau_hours=24), budget=1000)
    a = run.trace.item_index["a"]
    # 2 visits + 1 page + exp(-(27 - 3) / 24)
    assert run.policy.heat(a, 27 * H) == pytest.approx(2 + 1 + math.exp(-1.0))
    tokens = MemoryOSHeat(short_term_pages=0, recency_tau_hours=24, length="tokens")
    run = Run(events, tokens, budget=1000)
    assert run.policy.heat(a, 27 * H) == pytest.approx(2 + 0.5 + math.exp(-1.0))


def test_the_short_term_queue_protects_the_newest_pages():
    # budget 3 of 4 pages.  Without a queue a's visit makes it hot and the coldest page, b,
    # goes; with a 3-page queue a was visited while queued (not counted) and is the only
    # mid-term page when d arrives, so it goes.
    events = [W("a", 0), R("q", 1, ["a"]), W("b", 2), W("c", 3), W("d", 4)]
    assert Run(events, MemoryOSHeat(short_term_pages=0), budget=300).evicted == ["b"]
    assert Run(events, MemoryOSHeat(short_term_pages=3), budget=300).evicted == ["a"]


def test_visits_in_the_queue_do_not_count():
    # a is needed while still in the 2-page queue, so it is as cold as b once both left it
    events = [W("a", 0), R("q", 1, ["a"]), W("b", 2), W("c", 3), W("d", 4), W("e", 5)]
    run = Run(events, MemoryOSHeat(variant="code", short_term_pages=2), budget=400)
    assert run.evicted == ["a"]  # LFU tie (0 visits each): first inserted into mid-term


def test_code_variant_is_lfu_with_ties_by_entry_order_not_recency():
    # a and b both visited twice: the code's tie goes to a (entered mid-term first) whichever
    # was visited last; the paper's heat tie goes to the least recently visited
    for last in ("b", "a"):
        first = "a" if last == "b" else "b"
        events = [W("a", 0), W("b", 1), R("q1", 2, [first]), R("q2", 3, [last]),
                  R("q3", 4, [first]), R("q4", 5, [last])]  # fmt: skip
        run = Run(events, MemoryOSHeat(variant="code", short_term_pages=0), budget=1000)
        index = run.trace.item_index
        assert run.policy._mid_term_victim(6.0) == index["a"]
        paper = Run(events, MemoryOSHeat(short_term_pages=0, heat_threshold=None), budget=1000)
        assert paper.policy._mid_term_victim(6.0) == index[first]  # heat: least recent visit


def test_promotion_resets_the_page_count_under_the_paper():
    # three visits: heat 3 + 1 + 1 = 5 >= 5, so a is promoted and its L drops to 0
    events = [W("a", 0), R("q1", 1, ["a"]), R("q2", 2, ["a"]), R("q3", 3, ["a"])]
    run = Run(events, MemoryOSHeat(short_term_pages=0), budget=1000)
    a = run.trace.item_index["a"]
    assert run.policy._pages[a] == 0.0 and run.policy._visits[a] == 3
    run = Run(events, MemoryOSHeat(short_term_pages=0, heat_threshold=None), budget=1000)
    assert run.policy._pages[run.trace.item_index["a"]] == 1.0


def test_queue_pages_go_when_only_pins_are_in_mid_term():
    events = [W("a", 0), PIN("a", 1), W("b", 2), W("c", 3), W("d", 4)]
    run = Run(events, MemoryOSHeat(short_term_pages=2), budget=300)
    assert run.evicted == ["b"]  # a (pinned) is the only mid-term page; b is the oldest queued


def test_bad_settings_are_refused():
    with pytest.raises(ValueError, match="variant"):
        MemoryOSHeat(variant="both")
    with pytest.raises(ValueError, match="length"):
        MemoryOSHeat(length="words")
    with pytest.raises(ValueError):
        MemoryOSHeat(short_term_pages=-1)


@settings(max_examples=60, deadline=None, derandomize=True)
@given(events=traces(), budget=st.sampled_from([1, 40, 100, 250]),
       demand_fetch=st.booleans(), variant=st.sampled_from(["paper", "code"]))  # fmt: skip
def test_runs_on_any_trace(events, budget, demand_fetch, variant):
    run = Run(events, MemoryOSHeat(variant=variant), budget, demand_fetch=demand_fetch)
    r = run.result
    assert ((r.context_tokens - r.pinned_tokens) <= budget).all()
