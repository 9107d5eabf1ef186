"""The ``rule`` kernel replays the rule scorer exactly: hypothesis differential tests against the
reference engine (the class is the specification), hand-computed cases, a larger generated
trace, and the registration."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from memlens.policies import rule as rule_policy
from memlens.policies.rule import RuleScorer

from memlens.kernels import rule as rule_kernel
from memlens.policy import kernel_of
from memlens.simulator import MoveKind, simulate
from memlens.testing import (
    annotate,
    pin,
    random_events,
    rq,
    same_result,
    traces,
    unpin,
    w,
    with_alternatives,
)
from memlens.trace.classic import classic_trace, zipf_keys
from memlens.trace.io import trace_from_events
from memlens.trace.model import ITEM_TYPES

NO_BOOSTS = dict.fromkeys(("error", "conclusion", "numbers", "identifiers", "entities", "length"),
                         0.0)  # fmt: skip
# parameter sets: the defaults, then ones that move every knob (short half-lives reach the
# floors within the hypothesis traces' clock jumps; a high threshold declines often)
PARAMS = [
    {},
    {"admit_threshold": 0.9, "admit_fetched": False, "use_boost": 0.3, "use_cap": 0.5},
    {"half_life_hours": {"user_input": 0.01, "tool_result": 0.002, "agent_state": 0.005,
                         "llm_thought": 0.001},
     "floor": {"user_input": 0.3, "tool_result": 0.2, "agent_state": 0.25, "llm_thought": 0.1},
     "admit_threshold": 0.7},
    {"type_base": {"user_input": 0.2, "tool_result": 0.9, "agent_state": 0.4, "llm_thought": 0.4},
     "boosts": {"error": 0.0, "conclusion": 0.5, "numbers": 0.0, "identifiers": 0.3,
                "entities": 0.0, "length": 0.2, "length_ref_tokens": 50},
     "cost_threshold": 0.1, "cost_boost": 0.4, "use_boost": 0.0, "admit_threshold": 0.0},
    {"admit_threshold": 2.0, "admit_fetched": False, "use_cap": 0.0,
     "half_life_hours": {"user_input": 1e-4, "tool_result": 1e-4, "agent_state": 1e-4,
                         "llm_thought": 1e-4}},
    # every type alike, and no boosts: items of different lanes tie (decided by recency, then
    # item index), and a write at t = 0 sits exactly on its floor (log value == log floor)
    {"type_base": dict.fromkeys(ITEM_TYPES, 0.5), "boosts": NO_BOOSTS, "cost_boost": 0.0,
     "half_life_hours": dict.fromkeys(ITEM_TYPES, 0.05), "floor": dict.fromkeys(ITEM_TYPES, 0.5),
     "use_boost": 0.0},
    {"type_base": dict.fromkeys(ITEM_TYPES, 0.5), "boosts": NO_BOOSTS, "cost_boost": 0.0,
     "half_life_hours": dict.fromkeys(ITEM_TYPES, 0.5), "use_cap": 0.0, "admit_threshold": 0.6},
]  # fmt: skip


def assert_same(tr, params: dict, budget: int, demand_fetch: bool):
    ref = simulate(tr, RuleScorer(**params), budget, demand_fetch, engine="reference")
    fast = simulate(tr, RuleScorer(**params), budget, demand_fetch, engine="fast")
    assert fast.engine == "fast" and ref.engine == "reference"
    assert same_result(ref, fast) is None, same_result(ref, fast)
    return ref


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    events=traces(max_events=60, streams=("a", "b", "c")),
    budget=st.sampled_from([1, 5, 20, 60, 150, 400, 10_000]),
    demand_fetch=st.booleans(),
    params=st.sampled_from(PARAMS),
    alternatives=st.integers(-1, 3),
)
def test_kernel_equals_reference_on_hypothesis_traces(
    events, budget, demand_fetch, params, alternatives
):
    if alternatives >= 0:  # trace format 1.1: some needs are groups of alternatives
        events = with_alternatives(events, np.random.default_rng(alternatives))
    assert_same(trace_from_events(events), params, budget, demand_fetch)


@settings(max_examples=30, deadline=None)
@given(
    seed=st.integers(0, 2**32 - 1),
    n_streams=st.integers(1, 3),
    budget=st.integers(1, 200),
    demand_fetch=st.booleans(),
    params=st.sampled_from(PARAMS),
)
def test_kernel_equals_reference_on_random_traces(seed, n_streams, budget, demand_fetch, params):
    rng = np.random.default_rng(seed)
    events = random_events(rng, n_events=200, n_streams=n_streams)
    if seed % 2:
        events = with_alternatives(events, rng)
    assert_same(trace_from_events(events), params, budget, demand_fetch)


def moves(res, tr, kind: MoveKind) -> list[str]:
    return [tr.item_id[i] for i, k in zip(res.move_item, res.move_kind) if k == kind]


def test_hand_computed_decay_floor_and_admission():
    # agent state 0.5 written at t=0; thoughts (0.4) at t=1 and t=2; budget: two items.
    # By t=2 the state has decayed by 2 s of a 10-minute half-life, still > 0.4: a thought goes,
    # the older one (lower value: decayed longer).
    params = {"boosts": NO_BOOSTS, "cost_boost": 0.0, "admit_threshold": 0.0}
    tr = trace_from_events([w("s", 10, "agent_state", t=0.0), w("a", 10, t=1.0),
                            w("b", 10, t=2.0)])  # fmt: skip
    assert moves(assert_same(tr, params, 20, False), tr, MoveKind.EVICT) == ["a"]
    # an hour later both thoughts hit their floor 0.01 and the state 0.02: the floored
    # thought "a" (ties with "b" on value: older first) goes before the state
    tr = trace_from_events([w("s", 10, "agent_state", t=0.0), w("a", 10, t=1.0),
                            w("b", 10, t=2.0), w("c", 10, "user_input", t=3600.0)])  # fmt: skip
    assert moves(assert_same(tr, params, 30, False), tr, MoveKind.EVICT) == ["a"]
    # default threshold 0.5: a thought (0.4) is declined when admitting it would evict the
    # user's words (0.7), admitted while there is room
    tr = trace_from_events([w("u", 10, "user_input"), w("a", 10)])
    res = assert_same(tr, {**params, "admit_threshold": 0.5}, 10, False)
    assert moves(res, tr, MoveKind.ADMIT) == ["u"] and moves(res, tr, MoveKind.BYPASS) == ["a"]
    res = assert_same(tr, {**params, "admit_threshold": 0.5}, 20, False)
    assert moves(res, tr, MoveKind.ADMIT) == ["u", "a"]
    # a second thought ties the first (same time): admitted, and the older one goes
    tr = trace_from_events([w("u", 10, "user_input"), w("a", 10), w("b", 10)])
    res = assert_same(tr, {**params, "admit_threshold": 0.5}, 20, False)
    assert moves(res, tr, MoveKind.EVICT) == ["a"]


def test_a_tie_lost_to_rounding_is_still_a_tie():
    # two thoughts (0.4 < threshold 0.5) written at the same time t, room for one: the first
    # one's value is exp((log 0.4 + lam t) - lam t), which rounds to just above 0.4 at some t;
    # TIE_RTOL makes that a tie, so the second is admitted and the older one evicted
    params = {"boosts": NO_BOOSTS, "cost_boost": 0.0}
    lam, lb = RuleScorer(**params).lam[3], float(np.log(0.4))
    t = next(float(t) for t in range(1, 10_000)
             if math.exp((lb + lam * t) - lam * t) > 0.4)  # fmt: skip
    tr = trace_from_events([w("a", 10, t=t), w("b", 10, t=t)])
    res = assert_same(tr, params, 10, False)
    assert moves(res, tr, MoveKind.EVICT) == ["a"] and moves(res, tr, MoveKind.BYPASS) == []


def test_lanes_tie_by_recency_then_item_index():
    # same base and half-life for every type: a request using "x" (agent state) and "y"
    # (thought) gives them the same key and the same recency; the lower item index goes
    params = PARAMS[-1]
    tr = trace_from_events([w("x", 10, "agent_state", t=0.0), w("y", 10, t=1.0),
                            rq("r", "y", "x", t=2.0), w("z", 10, "user_input", t=3.0)])  # fmt: skip
    res = assert_same(tr, {**params, "admit_threshold": 0.0}, 20, False)
    assert moves(res, tr, MoveKind.EVICT) == ["x"]


def test_pins_annotations_and_fetches_by_hand():
    tr = trace_from_events([
        w("a", 10, "user_input", t=0.0), w("b", 10, t=1.0), pin("a", t=2.0),
        annotate("b", value=0.95, t=3.0), annotate("a", note="just a note", t=3.5),
        w("c", 10, "tool_result", t=4.0), unpin("a", t=5.0), rq("r", "c", t=6.0),
    ])  # fmt: skip
    res = assert_same(tr, {}, 20, True)
    # b (annotated 0.95) outranks c (0.6 + boosts < 0.95), so c is evicted at its write; after
    # the unpin, a (0.7 and decaying) is the cheapest: r's fetch of c evicts a
    assert moves(res, tr, MoveKind.EVICT) == ["c", "a"]
    assert moves(res, tr, MoveKind.FETCH) == ["c"]


def test_kernel_equals_reference_on_a_zipf_trace():
    rng = np.random.default_rng(5)
    keys = zipf_keys(4000, 600, 0.9, rng)
    tr = classic_trace(keys, rng.integers(1, 64, size=600))
    assert_same(tr, PARAMS[1], 2000, True)


class Ablated(RuleScorer):
    name = "rule-ablated"


def test_registration_is_for_the_exact_class():
    assert kernel_of(RuleScorer()) == "memlens.kernels.rule:replay" and kernel_of(Ablated()) is None
    assert rule_kernel.TIE_RTOL == rule_policy.TIE_RTOL
    assert rule_kernel.STATIC == rule_policy.STATIC
    tr = trace_from_events(random_events(np.random.default_rng(3), n_events=80))
    with pytest.raises(ValueError, match="no fast kernel"):
        simulate(tr, Ablated(), 50, engine="fast")
    auto = simulate(tr, Ablated(), 50, engine="auto")
    assert auto.engine == "reference"
    assert same_result(auto, simulate(tr, RuleScorer(), 50, engine="fast")) is None
