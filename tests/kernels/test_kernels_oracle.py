"""The ``oracle`` kernel replays ``Oracle`` (a plan from ``memlens.oracle.solve``, or the empty
plan: Belady-Size) exactly like the reference engine, event for event, failures included."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from memlens.policies.oracle import Oracle

from memlens.oracle import OracleSettings, solve
from memlens.policy import PolicyError, kernel_of
from memlens.simulator import MoveKind, simulate
from memlens.testing import random_events, same_result, with_alternatives
from memlens.trace.generate import generate_simple
from memlens.trace.io import trace_from_events
from memlens.trace.model import WRITE

NOCACHE = OracleSettings(cache=False)


def empty_plans(trace):
    return [np.zeros((0, 2), np.int64) for _ in range(trace.n_streams)]


def both(trace, plans, budget, demand_fetch):
    """The reference and the fast replay of ``Oracle(plans)`` (fresh instances)."""
    kw = dict(budget=budget, demand_fetch=demand_fetch, progress=False)
    ref = simulate(trace, Oracle(plans=plans), engine="reference", **kw)
    fast = simulate(trace, Oracle(plans=plans), engine="fast", **kw)
    assert (ref.engine, fast.engine) == ("reference", "fast")
    return ref, fast


def random_trace(seed, n_events, n_streams, alternatives):
    rng = np.random.default_rng(seed)
    events = random_events(rng, n_events=n_events, n_streams=n_streams)
    return trace_from_events(with_alternatives(events, rng) if alternatives else events)


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), n_events=st.integers(1, 90), n_streams=st.integers(1, 3),
       budget=st.sampled_from([1, 10, 25, 60, 150, 400]), demand_fetch=st.booleans(),
       alternatives=st.booleans())  # fmt: skip
def test_oracle_kernel_replays_the_solved_plan(seed, n_events, n_streams, budget, demand_fetch,
                                               alternatives):  # fmt: skip
    trace = random_trace(seed, n_events, n_streams, alternatives)
    plans = solve(trace, budget, demand_fetch, NOCACHE).plans
    ref, fast = both(trace, plans, budget, demand_fetch)
    assert same_result(ref, fast) is None


@settings(max_examples=100, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), n_events=st.integers(1, 250), n_streams=st.integers(1, 3),
       budget=st.sampled_from([1, 3, 10, 25, 60, 150, 400, 5000]), demand_fetch=st.booleans(),
       alternatives=st.booleans())  # fmt: skip
def test_oracle_kernel_with_the_empty_plan_is_belady_size(seed, n_events, n_streams, budget,
                                                          demand_fetch, alternatives):  # fmt: skip
    trace = random_trace(seed, n_events, n_streams, alternatives)
    ref, fast = both(trace, empty_plans(trace), budget, demand_fetch)
    assert same_result(ref, fast) is None


def outcome(trace, plans, budget, demand_fetch, engine):
    """The replay's result, or the message of the PolicyError an infeasible plan raises."""
    try:
        return simulate(trace, Oracle(plans=plans), budget, demand_fetch, engine=engine,
                        progress=False)  # fmt: skip
    except PolicyError as err:
        return str(err)


@settings(max_examples=80, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), n_events=st.integers(1, 150), n_streams=st.integers(1, 3),
       budget=st.sampled_from([1, 10, 25, 60, 150, 400]), demand_fetch=st.booleans(),
       alternatives=st.booleans(), share=st.sampled_from([0.1, 0.5, 0.9]))  # fmt: skip
def test_oracle_kernel_follows_any_plan_feasible_or_not(seed, n_events, n_streams, budget,
                                                        demand_fetch, alternatives, share):  # fmt: skip
    """Random plans: a share of the pairs the policy looks up (each write and unpin with its
    item, each request with every item it lists), plus random pairs in random streams' plans
    (most never looked up: other items, other streams' events, pins, events past the end); an
    infeasible plan must fail with the same message."""
    trace = random_trace(seed, n_events, n_streams, alternatives)
    rng = np.random.default_rng(seed)
    anchors = trace.req_event[trace.group_request]
    looked_up = np.concatenate([
        np.stack([np.arange(trace.n_events), trace.ev_ref], axis=1),
        np.stack([anchors, trace.group_items], axis=1),
    ]).astype(np.int64)  # fmt: skip
    noise = np.stack([rng.integers(-2, trace.n_events + 3, 20),
                      rng.integers(0, max(trace.n_items, 1), 20)], axis=1)  # fmt: skip
    pairs = looked_up[rng.random(len(looked_up)) < share]
    stream = trace.ev_stream[pairs[:, 0]]
    noise_stream = rng.integers(0, trace.n_streams, len(noise))  # in any stream's plan
    pairs, stream = np.concatenate([pairs, noise]), np.concatenate([stream, noise_stream])
    plans = [pairs[stream == s] for s in range(trace.n_streams)]
    ref = outcome(trace, plans, budget, demand_fetch, "reference")
    fast = outcome(trace, plans, budget, demand_fetch, "fast")
    if isinstance(ref, str) or isinstance(fast, str):
        assert ref == fast
    else:
        assert same_result(ref, fast) is None


@pytest.mark.parametrize("demand_fetch", [False, True])
def test_oracle_kernel_on_a_generated_trace_with_pins(demand_fetch):
    events = generate_simple(seed=4, streams=2, events_per_stream=1500, pin_rate=0.05)
    trace = trace_from_events(list(events))
    for budget in (200, 700, 2500):
        plans = solve(trace, budget, demand_fetch, NOCACHE).plans
        ref, fast = both(trace, plans, budget, demand_fetch)
        assert same_result(ref, fast) is None
        # the replayed plan scores the solver's lower bound
        assert int(fast.need_hit.sum()) == solve(trace, budget, demand_fetch, NOCACHE).lower


def test_oracle_kernel_solves_with_the_run_settings_when_given_no_plan():
    trace = random_trace(11, 150, 2, False)
    results = []
    for engine in ("reference", "fast"):
        oracle = Oracle()
        oracle.use_oracle_settings(NOCACHE)
        results.append(simulate(trace, oracle, 60, True, engine=engine, progress=False))
    assert same_result(*results) is None


def test_belady_size_evicts_the_item_needed_furthest_ahead():
    # budget 2 items: c arrives; a is needed next, b later, c never: c goes at once
    # (furthest next use: "never"); then d arrives, needed before b: b goes
    def write(i):
        return {"event": "write", "id": i, "tokens": 10, "type": "user_input"}

    def need(r, *ids):
        return {"event": "request", "id": r, "needs": list(ids)}

    events = [write("a"), write("b"), write("c"), write("d"), need("q1", "a"), need("q2", "d"),
              need("q3", "b")]  # fmt: skip
    trace = trace_from_events(events)
    ref, fast = both(trace, empty_plans(trace), 20, False)
    assert same_result(ref, fast) is None
    evicted = [trace.item_id[i] for i, k in zip(fast.move_item, fast.move_kind)
               if k == MoveKind.EVICT]  # fmt: skip
    assert evicted == ["c", "b"]


def test_an_infeasible_plan_fails_the_same_way_on_both_engines():
    """A plan that keeps every write cannot fit: the Python class raises at the first stream
    (in stream order) over budget with only protected items; the kernel raises the same,
    although it meets stream 1's failure first (stream 0 keeps only its later writes)."""
    trace = random_trace(2, 200, 3, False)
    writes = np.flatnonzero(trace.ev_kind == WRITE)
    plans = []
    for s in range(trace.n_streams):
        mine = writes[trace.ev_stream[writes] == s]
        if s == 0:
            mine = mine[mine > 100]
        plans.append(np.stack([mine, trace.ev_ref[mine]], axis=1).astype(np.int64))
    messages = []
    for engine in ("reference", "fast"):
        with pytest.raises(PolicyError, match="only protected items resident") as err:
            simulate(trace, Oracle(plans=plans), 40, False, engine=engine, progress=False)
        messages.append(str(err.value))
    assert messages[0] == messages[1]
    assert "stream 0 over budget at event 1" in messages[0]  # (event 1xx, after stream 1's)


def test_oracle_is_registered():
    assert kernel_of(Oracle(plans=[])) == "memlens.kernels.oracle:replay"
