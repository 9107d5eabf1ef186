"""The ``memoryos_heat`` kernel replays both MemoryOS variants exactly like the reference engine."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st
from memlens.policies.memoryos_heat import MemoryOSHeat

from memlens import testing
from memlens.policy import kernel_of
from memlens.trace.io import trace_from_events

# gaps between events: clocks that stand still (ties), tick, and jump by minutes and hours
GAPS = [0.0, 0.0, 1.0, 7.0, 600.0, 3600.0 * 5]


@settings(max_examples=120, deadline=None)
@given(
    seed=st.integers(0, 2**32 - 1),
    n_events=st.integers(1, 160),
    n_streams=st.integers(1, 3),
    budget=st.sampled_from([1, 5, 20, 45, 90, 200, 1000]),
    demand_fetch=st.booleans(),
    alternatives=st.booleans(),
    variant=st.sampled_from(["paper", "code"]),
    alpha=st.sampled_from([1.0, 0.0, -1.0]),
    beta=st.sampled_from([1.0, 0.0, -0.5]),
    gamma=st.sampled_from([1.0, 5.0, -2.0]),
    tau_hours=st.sampled_from([None, 0.5, 0.001]),
    length=st.sampled_from(["pages", "tokens"]),
    short_term_pages=st.sampled_from([None, 0, 1, 3]),
    heat_threshold=st.sampled_from([5.0, 2.5, None]),
)
def test_kernel_equals_reference(seed, n_events, n_streams, budget, demand_fetch, alternatives,
                                 variant, alpha, beta, gamma, tau_hours, length,
                                 short_term_pages, heat_threshold):  # fmt: skip
    rng = np.random.default_rng(seed)
    trace = trace_from_events(testing.timed_events(rng, n_events, n_streams, alternatives, GAPS))

    def make():
        return MemoryOSHeat(variant=variant, alpha=alpha, beta=beta, gamma=gamma,
                            recency_tau_hours=tau_hours, length=length, length_unit_tokens=7,
                            short_term_pages=short_term_pages, heat_threshold=heat_threshold)  # fmt: skip

    testing.assert_kernel_matches(trace, make, budget, demand_fetch)


def test_kernel_is_registered_for_every_configuration():
    for variant in ("paper", "code"):
        policy = MemoryOSHeat(variant=variant, short_term_pages=0, length="tokens")
        assert kernel_of(policy) == "memlens.kernels.memoryos_heat:replay"
