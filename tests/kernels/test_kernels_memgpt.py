"""The ``memgpt`` kernel replays ``MemGPT`` exactly like the reference engine, event for event,
with default and other parameters, and leaves the same counters on the policy."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from memlens.policies.memgpt import MemGPT

from memlens.policy import kernel_of
from memlens.simulator import MoveKind, simulate
from memlens.testing import random_events, same_result, with_alternatives
from memlens.trace.generate import generate_simple
from memlens.trace.io import trace_from_events

PARAMS = st.fixed_dictionaries({
    "variant": st.sampled_from(["paper", "code"]),
    "keep_last": st.sampled_from([None, 0, 1, 3]),
    "summary_tokens": st.sampled_from([None, 0, 5, 130]),
    "pressure_fraction": st.sampled_from([0.7, 0.05, 0.5, 0.999, 1.0]),
    "evict_fraction": st.sampled_from([0.5, 0.0, 0.1, 0.33, 1.0]),
    "summary_ratio": st.sampled_from([0.1, 0.0, 0.07, 0.3, 0.49]),
})  # fmt: skip


def both(trace, budget, demand_fetch, **params):
    """The reference and the fast replay of ``MemGPT(**params)``, and the two policies."""
    kw = dict(budget=budget, demand_fetch=demand_fetch, progress=False)
    ref_policy, fast_policy = MemGPT(**params), MemGPT(**params)
    ref = simulate(trace, ref_policy, engine="reference", **kw)
    fast = simulate(trace, fast_policy, engine="fast", **kw)
    assert (ref.engine, fast.engine) == ("reference", "fast")
    counters = [(p.pressure_warnings, p.flushes) for p in (ref_policy, fast_policy)]
    assert counters[0] == counters[1]
    return ref, fast


@settings(max_examples=150, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), n_events=st.integers(1, 250), n_streams=st.integers(1, 3),
       budget=st.sampled_from([1, 3, 10, 25, 60, 150, 400, 5000]), demand_fetch=st.booleans(),
       alternatives=st.booleans(), params=PARAMS)  # fmt: skip
def test_memgpt_kernel_equals_reference(seed, n_events, n_streams, budget, demand_fetch,
                                        alternatives, params):  # fmt: skip
    rng = np.random.default_rng(seed)
    events = random_events(rng, n_events=n_events, n_streams=n_streams)
    if alternatives:
        events = with_alternatives(events, rng)
    ref, fast = both(trace_from_events(events), budget, demand_fetch, **params)
    assert same_result(ref, fast) is None


@pytest.mark.parametrize("demand_fetch", [False, True])
def test_memgpt_kernel_equals_reference_on_a_generated_trace_with_pins(demand_fetch):
    events = generate_simple(seed=6, streams=3, events_per_stream=1500, pin_rate=0.05)
    trace = trace_from_events(list(events))
    for budget in (150, 900, 4000):
        for params in ({}, {"evict_fraction": 0.2, "summary_ratio": 0.3}, {"variant": "code"}):
            ref, fast = both(trace, budget, demand_fetch, **params)
            assert same_result(ref, fast) is None


def test_memgpt_kernel_flushes_half_the_messages_into_a_summary():
    """Hand-computed: ten 100-token writes fill 1000; one more token flushes the oldest six
    (600 >= half of the 1001 message tokens) into a summary of ceil(0.1 * 600) = 60, counted
    in the context."""
    events = [{"event": "write", "id": f"i{k}", "tokens": 100, "type": "user_input"}
              for k in range(10)]  # fmt: skip
    events += [{"event": "write", "id": "one", "tokens": 1, "type": "user_input"},
               {"event": "request", "id": "q", "needs": ["i0", "i6"]}]  # fmt: skip
    trace = trace_from_events(events)
    ref, fast = both(trace, 1000, False)
    assert same_result(ref, fast) is None
    evicted = [trace.item_id[i] for i, k in zip(fast.move_item, fast.move_kind)
               if k == MoveKind.EVICT]  # fmt: skip
    assert evicted == ["i0", "i1", "i2", "i3", "i4", "i5"]
    assert fast.context_tokens.tolist() == [401 + 60]
    assert fast.need_hit.tolist() == [0, 1]


def test_memgpt_counters_are_the_last_streams_as_after_a_reference_replay():
    events = generate_simple(seed=2, streams=2, events_per_stream=400)
    policy = MemGPT()
    simulate(trace_from_events(list(events)), policy, 300, engine="fast", progress=False)
    assert policy.flushes > 0 and policy.pressure_warnings > 0


def test_memgpt_is_registered():
    assert kernel_of(MemGPT()) == "memlens.kernels.memgpt:replay"
