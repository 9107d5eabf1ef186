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
from memlens.simulator import MoveKind, simulate
from memlens.testing import rq, same_result, w
from memlens.trace.io import trace_from_events

# gaps between events: clocks that stand still (ties), tick, and jump by hours and days
GAPS = [0.0, 0.0, 1.0, 7.0, 3600.0, 86400.0 * 3]


def timed_events(rng: np.random.Generator, n_events: int, n_streams: int, alternatives: bool):
    return testing.timed_events(rng, n_events, n_streams, alternatives, GAPS)


assert_same = testing.assert_kernel_matches


@pytest.mark.parametrize("variant", ["paper", "code"])
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
    # days of 3.6 s and 1.8 s: the 1 s and 7 s gaps cross day boundaries within a trace
    hours=st.sampled_from([24.0, 1.0, 0.001, 0.0005]),
)
def test_kernel_equals_reference(variant, seed, n_events, n_streams, budget, demand_fetch,
                                 alternatives, initial, increment, hours):  # fmt: skip
    """Both variants: the paper's continuous exponent and the code's whole days."""
    rng = np.random.default_rng(seed)
    trace = trace_from_events(timed_events(rng, n_events, n_streams, alternatives))

    def make():
        return MemoryBank(variant=variant, initial_strength=initial,
                          strength_increment=increment, time_unit_hours=hours)  # fmt: skip

    assert_same(trace, make, budget, demand_fetch)


def _days_trace():
    """Written a (day 0), b (day 1), c (day 2); a recalled on day 2 (S = 2), then d and e
    written on day 4: on day 4 a's exponent is -(2/5)*2 = -0.8, b's -(3/5)*1 = -0.6, c's
    -(2/5)*1 = -0.4, d's 0; so the code variant evicts a, then b (LRU: b, then c; the
    paper's continuous retention: b first, a recalled later and stronger)."""
    d = 86400.0
    return trace_from_events([w("a", 10, stream="s", t=0.0), w("b", 10, stream="s", t=1.2 * d),
                              w("c", 10, stream="s", t=2.1 * d),
                              rq("r", "a", stream="s", t=2.5 * d),
                              w("d", 10, stream="s", t=4.3 * d),
                              w("e", 10, stream="s", t=4.4 * d)])  # fmt: skip


def test_code_variant_kernel_evicts_by_whole_days_as_computed_by_hand():
    trace = _days_trace()
    res = simulate(trace, MemoryBank(variant="code"), 30, engine="fast", progress=False)
    assert res.engine == "fast"
    evicted = res.move_item[res.move_kind == MoveKind.EVICT].tolist()
    names = {v: k for k, v in trace.item_index.items()}
    assert [names[i] for i in evicted] == ["a", "b"]
    paper = simulate(trace, MemoryBank(), 30, engine="fast", progress=False)
    assert [names[i] for i in paper.move_item[paper.move_kind == MoveKind.EVICT].tolist()] == [
        "b", "c"]  # fmt: skip


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
    assert kernel_of(MemoryBank(variant="code")) == "memlens.kernels.memorybank:replay"
    assert kernel_of(MemoryBank(variant="code", stochastic=True)) is None
    trace = trace_from_events(timed_events(np.random.default_rng(1), 150, 2, False))
    ref = simulate(trace, MemoryBank(stochastic=True), 40, seed=3, engine="reference",
                   progress=False)  # fmt: skip
    auto = simulate(trace, MemoryBank(stochastic=True), 40, seed=3, progress=False)
    assert auto.engine == "reference" and same_result(ref, auto) is None
    assert ref.evictions.sum() > 0
    with pytest.raises(ValueError, match="no fast kernel"):
        simulate(trace, MemoryBank(stochastic=True), 40, engine="fast", progress=False)


def test_code_variant_kernel_refuses_day_numbers_past_exact_float_arithmetic():
    # trace times reach 1e15 s (``trace.limits.MAX_MAGNITUDE``): with a day of 3.6 us, 2.8e20 days
    trace = trace_from_events([w("a", 10, stream="s", t=0.0), w("b", 10, stream="s", t=1e15)])
    policy = MemoryBank(variant="code", time_unit_hours=1e-9)
    with pytest.raises(ValueError, match="counts days exactly"):
        simulate(trace, policy, 10, engine="fast", progress=False)
    far = MemoryBank(variant="code", time_unit_hours=24.0)  # day numbers up to 1.2e10: exact
    assert simulate(trace, far, 10, engine="fast", progress=False).engine == "fast"
