"""The ``memoryos_heat`` kernel replays MemoryOS heat exactly like the reference engine."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from memlens.policies.memoryos_heat import MemoryOSHeat

from memlens import testing
from memlens.policy import kernel_of
from memlens.trace.generate import generate_simple
from memlens.trace.io import trace_from_events

# gaps between events: clocks that stand still (ties), tick, and jump by minutes and hours
GAPS = [0.0, 0.0, 1.0, 7.0, 600.0, 3600.0 * 5]


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
    alpha=st.sampled_from([1.0, 0.0, 0.3, -1.0]),
    beta=st.sampled_from([1.0, 0.0, 2.0, -0.5]),
    gamma=st.sampled_from([1.0, 0.0, 5.0, -2.0]),
    tau_hours=st.sampled_from([24.0, 0.5, 0.001]),
    length_unit=st.sampled_from([1000, 7, 1]),
)
def test_kernel_equals_reference(seed, n_events, n_streams, budget, demand_fetch, alternatives,
                                 alpha, beta, gamma, tau_hours, length_unit):  # fmt: skip
    rng = np.random.default_rng(seed)
    trace = trace_from_events(timed_events(rng, n_events, n_streams, alternatives))

    def make():
        return MemoryOSHeat(alpha=alpha, beta=beta, gamma=gamma, recency_tau_hours=tau_hours,
                            length_unit_tokens=length_unit)  # fmt: skip

    assert_same(trace, make, budget, demand_fetch)


@pytest.mark.parametrize("budget", [300, 3000])
def test_kernel_equals_reference_when_the_envelope_is_rebased_often(budget):
    """A ``tau`` of a few events: the kernel moves its envelope's base time again and again
    (``scantree._heat_rebase_due``), with many items held between two moves."""
    events = list(generate_simple(streams=2, events_per_stream=1500, pin_rate=0.05, seed=7))
    trace = trace_from_events(events)
    span = float(trace.ev_t.max() - trace.ev_t.min())
    tau_hours = span / len(events) * 20 / 3600.0  # about 20 events per tau

    def make():
        return MemoryOSHeat(recency_tau_hours=tau_hours)

    assert_same(trace, make, budget, False)


def test_kernel_is_registered_for_every_configuration():
    assert kernel_of(MemoryOSHeat()) == "memlens.kernels.memoryos_heat:replay"
    assert kernel_of(MemoryOSHeat(alpha=-1.0, gamma=-3.0)) == "memlens.kernels.memoryos_heat:replay"
