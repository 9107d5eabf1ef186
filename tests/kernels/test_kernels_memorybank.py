"""The ``memorybank`` kernel replays MemoryBank exactly like the reference engine."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from memlens.policies.memorybank import MemoryBank

from memlens import testing
from memlens.kernels.memorybank import strengths
from memlens.policy import kernel_of
from memlens.simulator import simulate
from memlens.testing import same_result
from memlens.trace.io import trace_from_events

# gaps between events: clocks that stand still (ties), tick, and jump by hours and days
GAPS = [0.0, 0.0, 1.0, 7.0, 3600.0, 86400.0 * 3]


def timed_events(rng: np.random.Generator, n_events: int, n_streams: int, alternatives: bool):
    return testing.timed_events(rng, n_events, n_streams, alternatives, GAPS)


assert_same = testing.assert_kernel_matches


@settings(max_examples=120, deadline=None)
@given(
    seed=st.integers(0, 2**32 - 1),
    n_events=st.integers(1, 160),
    n_streams=st.integers(1, 3),
    budget=st.sampled_from([1, 5, 20, 45, 90, 200, 1000]),
    demand_fetch=st.booleans(),
    alternatives=st.booleans(),
    initial=st.sampled_from([1.0, 0.5, 3.0]),
    increment=st.sampled_from([1.0, 0.0, 0.1, 2.5]),
    hours=st.sampled_from([24.0, 1.0, 0.001]),
)
def test_kernel_equals_reference(seed, n_events, n_streams, budget, demand_fetch, alternatives,
                                 initial, increment, hours):  # fmt: skip
    rng = np.random.default_rng(seed)
    trace = trace_from_events(timed_events(rng, n_events, n_streams, alternatives))

    def make():
        return MemoryBank(initial_strength=initial, strength_increment=increment,
                          time_unit_hours=hours)  # fmt: skip

    assert_same(trace, make, budget, demand_fetch)


def test_strengths_are_summed_one_increment_at_a_time():
    policy = MemoryBank(initial_strength=1.0, strength_increment=0.1)
    table = strengths(policy, 10)
    s = 1.0
    for k in range(11):
        assert table[k] == s
        s += 0.1
    assert table[10] != 1.0 + 10 * 0.1  # why the table is summed, not multiplied


def test_stochastic_memorybank_replays_on_the_reference_engine():
    policy = MemoryBank(stochastic=True)
    assert (
        kernel_of(policy) is None and kernel_of(MemoryBank()) == "memlens.kernels.memorybank:replay"
    )
    trace = trace_from_events(timed_events(np.random.default_rng(1), 150, 2, False))
    ref = simulate(trace, MemoryBank(stochastic=True), 40, seed=3, engine="reference",
                   progress=False)  # fmt: skip
    auto = simulate(trace, MemoryBank(stochastic=True), 40, seed=3, progress=False)
    assert auto.engine == "reference" and same_result(ref, auto) is None
    assert ref.evictions.sum() > 0
    with pytest.raises(ValueError, match="no fast kernel"):
        simulate(trace, MemoryBank(stochastic=True), 40, engine="fast", progress=False)
