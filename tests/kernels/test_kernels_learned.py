"""The ``learned`` kernel replays the learned scorer exactly (the class is the specification):
hypothesis differential tests against the reference engine in trusted mode, through a cold
start that ends mid-stream or in a later stream, and with no model at all; online retraining
is left to the reference engine."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from memlens.policies.learned import LearnedScorer
from memlens.policies.rule import RuleScorer

from memlens.policy import kernel_of
from memlens.simulator import simulate
from memlens.testing import random_events, same_result, traces, with_alternatives
from memlens.trace.generate import generate_simple
from memlens.trace.io import trace_from_events

# one instance per setting (loading the bundled model once); a replay resets it per stream
SETTINGS = [
    {},
    {"min_feedback": 2},
    {"min_feedback": 5, "admit_compare": False},
    {"decay_per_request": 0.0, "size_exponent": 0.0},
    {"decay_per_request": 5.0, "size_exponent": 2.0, "min_feedback": 1},
    {"model": None},
    {"model": None, "min_feedback": 3},
]
POLICIES = [LearnedScorer(**kw) for kw in SETTINGS]


def assert_same(tr, policy: LearnedScorer, budget: int, demand_fetch: bool):
    ref = simulate(tr, policy, budget, demand_fetch, engine="reference")
    fast = simulate(tr, policy, budget, demand_fetch, engine="fast")
    assert fast.engine == "fast" and ref.engine == "reference" and fast.policy == "learned"
    assert same_result(ref, fast) is None, same_result(ref, fast)
    return ref


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    events=traces(max_events=60, streams=("a", "b", "c")),
    budget=st.sampled_from([1, 5, 20, 60, 150, 400, 10_000]),
    demand_fetch=st.booleans(),
    k=st.integers(0, len(POLICIES) - 1),
    alternatives=st.integers(-1, 3),
)
def test_kernel_equals_reference_on_hypothesis_traces(events, budget, demand_fetch, k,
                                                      alternatives):  # fmt: skip
    if alternatives >= 0:  # trace format 1.1: some needs are groups of alternatives
        events = with_alternatives(events, np.random.default_rng(alternatives))
    assert_same(trace_from_events(events), POLICIES[k], budget, demand_fetch)


@settings(max_examples=25, deadline=None)
@given(
    seed=st.integers(0, 2**32 - 1),
    n_streams=st.integers(1, 3),
    budget=st.integers(1, 200),
    demand_fetch=st.booleans(),
    k=st.integers(0, len(POLICIES) - 1),
)
def test_kernel_equals_reference_on_random_traces(seed, n_streams, budget, demand_fetch, k):
    rng = np.random.default_rng(seed)
    events = random_events(rng, n_events=200, n_streams=n_streams)
    if seed % 2:
        events = with_alternatives(events, rng)
    assert_same(trace_from_events(events), POLICIES[k], budget, demand_fetch)


@pytest.mark.parametrize("demand_fetch", [False, True])
def test_cold_start_ends_mid_trace_on_a_generated_trace(demand_fetch):
    # 4 streams of 800 events with pins (feedback): the cold start ends inside stream 0 with
    # min_feedback 3, and only in a later stream with a threshold near the total
    tr = trace_from_events(list(generate_simple(streams=4, events_per_stream=800, seed=3,
                                                pin_rate=0.05)))  # fmt: skip
    n_feedback = int(np.isin(tr.ev_kind, (2, 3)).sum())
    assert n_feedback > 20
    budget = 600
    results = [assert_same(tr, LearnedScorer(min_feedback=m), budget, demand_fetch)
               for m in (0, 3, n_feedback - 5, 10**6)]  # fmt: skip
    rule = simulate(tr, RuleScorer(), budget, demand_fetch, engine="reference")
    # never trusted: the rule scorer's decisions; trusted from the start: the model's
    assert same_result(results[3], rule) is None
    assert same_result(results[0], rule) is not None
    # a late wake differs from both pure modes
    assert same_result(results[2], rule) is not None
    assert same_result(results[2], results[0]) is not None


def test_no_model_is_the_rule_scorer():
    tr = trace_from_events(random_events(np.random.default_rng(8), n_events=300, n_streams=2))
    res = assert_same(tr, LearnedScorer(model=None), 80, True)
    assert same_result(res, simulate(tr, RuleScorer(), 80, True, engine="fast")) is None


def test_online_retraining_is_left_to_the_reference_engine():
    policy = LearnedScorer(retrain_every=4)
    assert (
        kernel_of(policy) is None and kernel_of(LearnedScorer()) == "memlens.kernels.learned:replay"
    )
    assert kernel_of(LearnedScorer(model=None, retrain_every=2)) is None
    tr = trace_from_events(random_events(np.random.default_rng(2), n_events=200, n_streams=2))
    with pytest.raises(ValueError, match="no fast kernel"):
        simulate(tr, policy, 60, engine="fast")
    auto = simulate(tr, policy, 60, engine="auto")
    ref = simulate(tr, LearnedScorer(retrain_every=4), 60, engine="reference")
    assert auto.engine == "reference" and same_result(auto, ref) is None
