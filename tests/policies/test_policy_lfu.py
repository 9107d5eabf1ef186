"""LFU: hand-computed cases and a property test against a naive rescan."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from memlens.policies.lfu import LFU
from memlens.policies.lru import LRU
from policy_cases import PIN, UNPIN, NaiveRescan, R, Run, W, traces


def test_frequency_beats_recency():
    # a needed twice long ago (count 3); b written later (1); c arrives: b and c tie at 1
    events = [W("a", 0), R("q1", 1, ["a"]), R("q2", 2, ["a"]), W("b", 3), W("c", 4)]
    assert Run(events, LFU(), budget=200).evicted == ["b"]
    assert Run(events, LRU(), budget=200).evicted == ["a"]


def test_ties_go_to_the_least_recently_used():
    events = [W("a", 0), W("b", 1), R("q1", 2, ["a"]), R("q2", 3, ["b"]), W("c", 4), W("d", 5)]
    # at c: a=2, b=2, c=1 -> c; at d: d=1 -> d (the newcomer loses, the classic LFU trait)
    assert Run(events, LFU(), budget=200).evicted == ["c", "d"]
    events = [W("a", 0), W("b", 1), W("c", 2)]
    assert Run(events, LFU(), budget=200).evicted == ["a"]


def test_counts_are_forgotten_on_eviction():
    events = [
        W("a", 0),
        R("q1", 1, ["a"]),
        R("q2", 2, ["a"]),  # a=3
        W("b", 3),
        R("q3", 4, ["b"]),
        R("q4", 5, ["b"]),
        R("q5", 6, ["b"]),  # b=4
        W("c", 7),  # c=1: evicted at once
        PIN("c", 8),  # forced back in and pinned: a (3) goes
        UNPIN("c", 9),
        R("q6", 10, ["a"]),  # a fetched back: count 1 again; c (1, older) goes
        W("d", 11),
    ]  # a=1 (older than d) goes: its old count 3 was forgotten
    # fmt: skip
    run = Run(events, LFU(), budget=200, demand_fetch=True)
    assert run.evicted == ["c", "a", "c", "a"]


def test_pinned_item_keeps_count_and_is_skipped():
    events = [W("a", 0), PIN("a", 1), W("b", 2), R("q", 3, ["b"]), W("c", 4), W("d", 5),
              UNPIN("a", 6), W("e", 7)]  # fmt: skip
    run = Run(events, LFU(), budget=300)
    # c evicted at d (a pinned, b=2, c=1 older than d); after unpin a=1 is the oldest count-1
    assert run.evicted == ["c", "a"]


class NaiveLFU(NaiveRescan):
    name = "naive-lfu"

    def reset(self, ctx):
        super().reset(ctx)
        self.count, self.last = {}, {}

    def insert(self, i, now):
        self.count[i], self.last[i] = 1, now

    def touch(self, i, now):
        self.count[i] += 1
        self.last[i] = now

    def key(self, i, t):
        return self.count[i], self.last[i], i

    def forget(self, i):
        del self.count[i]


@settings(max_examples=150, deadline=None, derandomize=True)
@given(events=traces(), budget=st.sampled_from([1, 40, 100, 250]),
       demand_fetch=st.booleans())  # fmt: skip
@pytest.mark.slow  # kept out of the default run (6-minute budget); make test-all runs it
def test_heap_agrees_with_naive_rescan(events, budget, demand_fetch):
    fast = Run(events, LFU(), budget, demand_fetch=demand_fetch)
    naive = Run(events, NaiveLFU(), budget, demand_fetch=demand_fetch)
    assert fast.moves == naive.moves
