"""The compiled kernels must replay exactly like the reference loop, event for event."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from memlens.policies.lru import LRU
from memlens.policies.window import SlidingWindow

from memlens.checker import RESULT_FIELDS, random_events
from memlens.classic import classic_trace, zipf_keys
from memlens.simulator import simulate
from memlens.trace_io import trace_from_events


def assert_same(tr, policy_cls, budget, demand_fetch):
    ref = simulate(tr, policy_cls(), budget=budget, demand_fetch=demand_fetch, engine="reference")
    fast = simulate(tr, policy_cls(), budget=budget, demand_fetch=demand_fetch, engine="fast")
    assert fast.engine == "fast" and ref.engine == "reference"
    for name in RESULT_FIELDS:
        assert np.array_equal(getattr(ref, name), getattr(fast, name)), name


@given(
    seed=st.integers(0, 2**32 - 1),
    n_events=st.integers(1, 200),
    n_streams=st.integers(1, 3),
    budget=st.integers(1, 120),
    demand_fetch=st.booleans(),
    lru=st.booleans(),
)
def test_fast_equals_reference_on_random_traces(
    seed, n_events, n_streams, budget, demand_fetch, lru
):
    events = random_events(np.random.default_rng(seed), n_events=n_events, n_streams=n_streams)
    tr = trace_from_events(events)
    assert_same(tr, LRU if lru else SlidingWindow, budget, demand_fetch)


@pytest.mark.parametrize("policy_cls", [LRU, SlidingWindow])
@pytest.mark.parametrize("demand_fetch", [False, True])
def test_fast_equals_reference_on_a_zipf_trace(policy_cls, demand_fetch):
    rng = np.random.default_rng(7)
    keys = zipf_keys(20_000, 2_000, 0.8, rng)
    sizes = rng.integers(1, 64, size=2_000)
    assert_same(classic_trace(keys, sizes), policy_cls, 3_000, demand_fetch)


def test_engine_fast_requires_a_kernel():
    class NoKernel(LRU):
        fast_kernel = None

    tr = trace_from_events([{"event": "write", "id": "a", "tokens": 1, "type": "user_input"}])
    with pytest.raises(ValueError, match="no fast kernel"):
        simulate(tr, NoKernel(), budget=4, engine="fast")
