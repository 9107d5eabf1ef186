"""The dynamic program of ``memlens.oracle.exact`` finds a stream's integer optimum (issue 34).

Against answers found independently of it: a model worked by hand; every 0/1 selection of a
hypothesis-drawn trace's gaps enumerated; HiGHS's branch and bound run to optimality; and the
LP path (``exact_max_states=0``) on a golden trace and a generated many-stream trace, whose
bounds the exact ones may never be looser than, stream by stream.
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from helpers import generated_agent_trace
from hypothesis import given, settings
from hypothesis import strategies as st

from memlens.config.store import DATA_DIR
from memlens.oracle import OracleSettings, solve
from memlens.oracle.bounds import milp_schedule
from memlens.oracle.exact import DENSE_SLOTS, exact_schedule
from memlens.oracle.model import build_model, schedule_load_ok
from memlens.oracle.solve import clear_memo
from memlens.testing import random_events, rq, trace, traces, w, with_alternatives
from memlens.trace.io import load_trace, trace_from_events

STATES = OracleSettings().exact_max_states


def _hand_trace():
    # a, b, c all open after c's write (6 + 6 + 4 > 10); then a's second use needs a kept
    # through its first gap (no demand fetch); a2 is open with b and c after a's use
    return trace(w("a", 6), w("b", 6), w("c", 4), rq("r1", "a"), rq("r2", "b"), rq("r3", "c"),
                 rq("r4", "a"))  # fmt: skip


def test_a_hand_worked_model():
    model = build_model(_hand_trace(), 0, 10, False)
    # gaps in order of their uses: a1 (write a -> r1), b, c, a2 (r1 -> r4)
    assert model.item.tolist() == [0, 1, 2, 0] and model.prev.tolist() == [-1, -1, -1, 0]
    # {a1, c, a2}: 6 + 4 at every point; b with anything else but c breaks 10; {b, c} is 2
    chosen = exact_schedule(model, STATES)
    assert chosen.tolist() == [True, False, True, True]
    assert model.planned_hits(chosen) == 3


def test_nesting_is_respected_and_demand_fetch_frees_it():
    # a (6) and b (6) never fit together in 10: keep a through both its gaps, or b through
    # both of its; a's second gap (after its first use) needs its first kept, unless demand
    # fetch starts it free, and then b, b and a's second gap make 3
    tr = trace(w("a", 6), w("b", 6), rq("r1", "b"), rq("r2", "b"), rq("r3", "a"),
               rq("r4", "a"))  # fmt: skip
    no_fetch = build_model(tr, 0, 10, False)
    # gaps in order of their uses: b1, b2, a1, a2
    assert no_fetch.item.tolist() == [1, 1, 0, 0] and no_fetch.prev.tolist() == [-1, 0, -1, 2]
    chosen = exact_schedule(no_fetch, STATES)
    assert no_fetch.planned_hits(chosen) == 2 and schedule_load_ok(no_fetch, chosen)
    fetch = build_model(tr, 0, 10, True)
    chosen = exact_schedule(fetch, STATES)
    assert chosen.tolist() == [True, True, False, True]
    assert fetch.planned_hits(chosen) == 3


def _brute(model) -> int:
    """The most planned hits of any 0/1 selection of the model's gaps (every one tried)."""
    best = model.forced_hits
    for bits in itertools.product((False, True), repeat=model.n_gaps):
        sel = np.array(bits, dtype=bool)
        if schedule_load_ok(model, sel):
            best = max(best, model.planned_hits(sel))
    return best


def _against_brute_force(tr, budget: int, fetch: bool, max_gaps: int) -> list:
    """Every stream of at most ``max_gaps`` gaps: the exact schedule is feasible and plans
    what the best enumerated selection plans; the streams' models."""
    models = []
    for s in range(tr.n_streams):
        model = build_model(tr, s, budget, fetch)
        if model.n_gaps == 0 or model.n_gaps > max_gaps:
            continue
        chosen = exact_schedule(model, STATES)
        assert chosen is not None
        assert schedule_load_ok(model, chosen)
        assert model.planned_hits(chosen) == _brute(model)
        np.testing.assert_array_equal(exact_schedule(model, STATES, dense_slots=0), chosen)
        models.append(model)
    return models


@settings(max_examples=150)
@given(events=traces(max_events=30), budget=st.sampled_from([20, 60, 130, 250]),
       fetch=st.booleans())  # fmt: skip
def test_every_selection_enumerated_finds_no_better_schedule(events, budget, fetch):
    _against_brute_force(trace_from_events(events), budget, fetch, 12)


@settings(max_examples=100)
@given(events=traces(max_events=30), budget=st.sampled_from([20, 60, 130, 250]),
       seed=st.integers(0, 2**16))  # fmt: skip
def test_with_alternatives_every_selection_enumerated_finds_no_better_schedule(events, budget,
                                                                               seed):  # fmt: skip
    # a need with alternatives is served by any of its gaps; each need counts once
    tr = trace_from_events(with_alternatives(events, np.random.default_rng(seed)))
    for model in _against_brute_force(tr, budget, False, 10):
        # with demand fetch its model lets any alternative in: the LP path's roundings stay
        if model.has_groups:
            fetch = build_model(tr, model.stream, budget, True)
            assert exact_schedule(fetch, STATES) is None


def test_a_tiny_state_limit_gives_up_rather_than_answer():
    model = build_model(_hand_trace(), 0, 10, False)
    assert exact_schedule(model, 1) is None
    assert exact_schedule(model, 0) is None


@pytest.fixture(scope="module")
def many_streams(tmp_path_factory):
    return generated_agent_trace(tmp_path_factory, streams=40, events_per_stream=60, seed=11)


@pytest.mark.parametrize("budget,fetch", [(256, False), (512, False), (512, True), (1024, False)])
def test_highs_branch_and_bound_run_to_the_end_agrees(many_streams, budget, fetch):
    checked = 0
    for s in range(many_streams.n_streams):
        model = build_model(many_streams, s, budget, fetch)
        chosen = exact_schedule(model, STATES)
        if chosen is None:
            continue
        _, optimum = milp_schedule(model, 10**7)
        assert model.planned_hits(chosen) == optimum, f"stream {s}"
        checked += 1
    assert checked >= many_streams.n_streams // 2


def _both_ways(tr, budget, fetch):
    clear_memo()
    exact = solve(tr, budget, fetch, OracleSettings(cache=False))
    clear_memo()
    lp = solve(tr, budget, fetch, OracleSettings(cache=False, exact_max_states=0))
    clear_memo()
    return exact, lp


@pytest.mark.parametrize("budget,fetch", [(256, False), (512, False), (512, True), (2048, False)])
def test_never_looser_than_the_lp_path_on_many_streams(many_streams, budget, fetch):
    exact, lp = _both_ways(many_streams, budget, fetch)
    used = 0
    for s, (a, b) in enumerate(zip(exact.streams, lp.streams, strict=True)):
        assert a.upper <= b.upper and a.lower >= b.lower, f"stream {s}"
        if a.upper_method == "exact":
            used += 1
            assert a.lower == a.upper  # the replay reaches the optimum it planned
    assert used > 0 or budget == 2048  # at 2048 most streams fit in closed form


@pytest.mark.parametrize("budget", [512, 1024])
def test_never_looser_than_the_lp_path_on_a_golden_trace(budget):
    tr = load_trace(str(DATA_DIR / "default/agent-small.jsonl.gz"))
    for fetch in (False, True):
        exact, lp = _both_ways(tr, budget, fetch)
        methods = [s.upper_method for s in exact.streams]
        assert "exact" in methods
        for s, (a, b) in enumerate(zip(exact.streams, lp.streams, strict=True)):
            assert a.upper <= b.upper and a.lower >= b.lower, f"stream {s}"


@pytest.mark.parametrize("budget", [1024, 2048])
def test_with_alternatives_never_looser_than_the_lp_path(budget):
    tr = load_trace(str(DATA_DIR / "taubench/airline.jsonl.gz"))
    assert tr.has_alternatives
    exact, lp = _both_ways(tr, budget, False)
    assert sum(s.upper_method == "exact" for s in exact.streams) > tr.n_streams // 2
    for s, (a, b) in enumerate(zip(exact.streams, lp.streams, strict=True)):
        assert a.upper <= b.upper and a.lower >= b.lower, f"stream {s}"
        if a.upper_method == "exact":
            assert a.lower == a.upper


def test_the_state_limit_changes_no_answer_it_gives(many_streams):
    # the stored states start small and grow by doubling up to the limit: a limit low enough
    # to refuse some streams must give the others the same schedule as a generous one
    given_up = answered = 0
    for s in range(many_streams.n_streams):
        model = build_model(many_streams, s, 512, False)
        full = exact_schedule(model, STATES)
        if full is None:
            continue
        tight = exact_schedule(model, 100)
        if tight is None:
            given_up += 1
        else:
            answered += 1
            np.testing.assert_array_equal(tight, full)
    assert given_up > 0 and answered > 0


@pytest.mark.parametrize("budget,fetch", [(256, False), (512, False), (512, True), (1024, False)])
def test_the_hash_table_finds_what_the_dense_one_finds(many_streams, budget, fetch):
    # wide streams find their states in a hash table; forced here on every stream (dense
    # tables for at most 0 open gaps), it must give the dense table's schedule, stream by stream
    for s in range(many_streams.n_streams):
        model = build_model(many_streams, s, budget, fetch)
        dense = exact_schedule(model, STATES)
        hashed = exact_schedule(model, STATES, dense_slots=0)
        assert (dense is None) == (hashed is None), f"stream {s}"
        if dense is not None:
            np.testing.assert_array_equal(hashed, dense)


def test_a_wide_stream_is_solved_in_the_hash_table_and_closes_the_lp_gap():
    # one random stream of 400 events: 202 gaps, more open at once than a dense table takes
    tr = trace_from_events(random_events(np.random.default_rng(4), 400, 1))
    model = build_model(tr, 0, 30, False)
    open_at = np.zeros(model.points.shape[0] + 1, np.int64)
    np.add.at(open_at, model.k_start, 1)
    np.add.at(open_at, model.k_end, -1)
    assert np.cumsum(open_at).max() > DENSE_SLOTS
    _, optimum = milp_schedule(model, 10**7)
    exact, lp = _both_ways(tr, 30, False)
    assert exact.streams[0].upper_method == "exact"
    assert exact.upper == exact.lower == optimum  # HiGHS run to the end agrees
    assert lp.lower <= exact.lower and exact.upper < lp.upper  # the LP path left a gap here
