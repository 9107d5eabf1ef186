"""The ``lfu`` kernel replays ``LFU`` exactly like the reference engine, event for event."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st
from memlens.policies.lfu import LFU

from memlens.policy import kernel_of
from memlens.simulator import MoveKind, simulate
from memlens.testing import random_events, same_result, with_alternatives
from memlens.trace.classic import classic_trace, zipf_keys
from memlens.trace.io import trace_from_events

BUDGETS = st.sampled_from([1, 3, 10, 25, 60, 150, 400, 5000])


def both(trace, budget, demand_fetch):
    """The reference and the fast replay of ``LFU`` (fresh instances)."""
    kw = dict(budget=budget, demand_fetch=demand_fetch, progress=False)
    ref = simulate(trace, LFU(), engine="reference", **kw)
    fast = simulate(trace, LFU(), engine="fast", **kw)
    assert (ref.engine, fast.engine) == ("reference", "fast")
    return ref, fast


@settings(max_examples=150, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), n_events=st.integers(1, 250), n_streams=st.integers(1, 3),
       budget=BUDGETS, demand_fetch=st.booleans(), alternatives=st.booleans())  # fmt: skip
def test_lfu_kernel_equals_reference(seed, n_events, n_streams, budget, demand_fetch, alternatives):
    rng = np.random.default_rng(seed)
    events = random_events(rng, n_events=n_events, n_streams=n_streams)
    if alternatives:
        events = with_alternatives(events, rng)
    ref, fast = both(trace_from_events(events), budget, demand_fetch)
    assert same_result(ref, fast) is None


def test_lfu_kernel_on_a_zipf_trace_keeps_the_popular_items():
    rng = np.random.default_rng(3)
    trace = classic_trace(zipf_keys(6000, 600, 0.9, rng), rng.integers(1, 40, size=600))
    ref, fast = both(trace, 1500, True)
    assert same_result(ref, fast) is None
    # an independent expectation: frequency beats recency on a Zipf workload
    lru = simulate(trace, make_lru(), 1500, demand_fetch=True, progress=False)
    assert fast.need_hit.sum() > lru.need_hit.sum()


def make_lru():
    from memlens.policies.lru import LRU

    return LRU()


def test_lfu_ties_go_to_the_least_recently_used_then_the_smaller_item():
    # budget 2 items: c evicts a, d evicts b (count 1, older first); the request misses b and a
    # and fetches both (count 1, same event): c then d make room; f then finds a and b tied on
    # (count, last use) and evicts the smaller item, a (index 0)
    def write(i):
        return {"event": "write", "id": i, "tokens": 10, "type": "user_input"}

    events = [write(i) for i in "abcd"] + [{"event": "request", "id": "q", "needs": ["b", "a"]},
                                           write("f")]  # fmt: skip
    trace = trace_from_events(events)
    ref, fast = both(trace, 20, True)
    assert same_result(ref, fast) is None
    evicted = [trace.item_id[i] for i, k in zip(fast.move_item, fast.move_kind)
               if k == MoveKind.EVICT]  # fmt: skip
    assert evicted == ["a", "b", "c", "d", "a"]


def test_lfu_is_registered():
    assert kernel_of(LFU()) == "memlens.kernels.lfu:replay"
