"""The LP proofs before HiGHS's integer programs (``memlens.oracle.proofs``): sound, and the
bounds with them are the bounds without them.

Soundness against the brute-force optimum of small random streams (a proof at ``best - 1``
would be a false one); on generated many-stream traces every proof is one HiGHS's own
feasibility proof also finds, and the whole solve gives the same bounds, methods and plans
with the proofs as with HiGHS alone.
"""

from __future__ import annotations

import importlib

import numpy as np
import pytest
from helpers import brute_force, generated_agent_trace
from hypothesis import given, settings
from hypothesis import strategies as st

from memlens.oracle import OracleSettings, proofs
from memlens.oracle.batch import _pieces
from memlens.oracle.bounds import milp_schedule, none_reaches, none_reaches_chain
from memlens.oracle.model import build_model
from memlens.testing import random_events
from memlens.trace.io import trace_from_events

solve_mod = importlib.import_module("memlens.oracle.solve")  # the package re-exports solve()


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), budget=st.integers(5, 60), demand_fetch=st.booleans(),
       cut_rounds=st.integers(0, 2))  # fmt: skip
def test_no_proof_claims_fewer_hits_than_the_best_schedule(seed, budget, demand_fetch, cut_rounds):
    tr = trace_from_events(random_events(np.random.default_rng(seed), 18, 1))
    model = build_model(tr, 0, budget, demand_fetch)
    best = brute_force(tr, budget, demand_fetch)
    assert not proofs.proven_optimal({0: model}, {0: best - 1}, cut_rounds, 64)
    if proofs.proven_optimal({0: model}, {0: best}, cut_rounds, 64):
        assert none_reaches(model, best + 1, 500)  # HiGHS agrees: nothing plans best + 1


@pytest.fixture(scope="module")
def many_streams(tmp_path_factory):
    return generated_agent_trace(tmp_path_factory, streams=160, events_per_stream=80, seed=34)


def _solved(trace, budget, demand_fetch, settings_):
    r = solve_mod._compute(trace, budget, demand_fetch, settings_)
    return [(b.upper, b.lower, b.upper_method, b.lower_method) for b in r.streams], r.plans


@pytest.mark.parametrize(("budget", "demand_fetch"), [(256, False), (512, False), (512, True),
                                                      (1024, False)])  # fmt: skip
def test_the_proofs_change_no_bound_and_save_highs_proofs(many_streams, budget, demand_fetch,
                                                          monkeypatch):  # fmt: skip
    """With the LP rounds and with HiGHS alone (rounds off): the same bounds, methods and
    plans; every stream the LP proved, HiGHS proves too; every stream the rounds found
    improvable, HiGHS's feasibility problem has a solution for (it cannot prove it); on the
    streams left, that problem asked of the cut chain form answers as on the gap form; and at
    least one proof is the LP's."""
    opts = OracleSettings(cache=False, batch_streams=16, exact_max_states=0)
    found, better, left = [], [], []
    inner = proofs.settle

    def recorded(models, lowers, cut_rounds, window):
        out = inner(models, lowers, cut_rounds, window)
        found.extend((models[s], lowers[s]) for s in out.proven)
        better.extend((models[s], lowers[s]) for s in out.improvable)
        left.extend((models[s], out.lps[s], lowers[s]) for s in out.lps)
        assert not (set(out.proven) | set(out.improvable)) & set(out.lps)
        assert not set(out.proven) & set(out.improvable)
        return out

    monkeypatch.setattr(solve_mod, "settle", recorded)
    bounds, plans = _solved(many_streams, budget, demand_fetch, opts)
    monkeypatch.setattr(solve_mod, "settle", lambda *args: proofs.Settled())
    alone, alone_plans = _solved(many_streams, budget, demand_fetch, opts)
    assert bounds == alone
    for a, b in zip(plans, alone_plans, strict=True):
        np.testing.assert_array_equal(a, b)
    assert found
    assert all(none_reaches(model, lower + 1, opts.milp_node_limit) for model, lower in found)
    assert not any(none_reaches(model, lower + 1, opts.milp_node_limit)
                   for model, lower in better)  # fmt: skip
    # HiGHS's feasibility problem on the cut chain form answers as on the gap form (at 512
    # without demand fetch some streams are left to it; elsewhere the rounds may settle all)
    assert left or (budget, demand_fetch) != (512, False)
    for model, lp, lower in left:
        for hits in (lower, lower + 1, lower + 2):
            assert none_reaches_chain(lp, hits, opts.milp_node_limit) == none_reaches(
                model, hits, opts.milp_node_limit
            )


@pytest.mark.parametrize("budget", [256, 512])
def test_an_improvable_stream_has_a_schedule_planning_one_hit_more(many_streams, budget):
    """Independently of the rounding: HiGHS's branch and bound finds an optimum above the
    replayed score for every stream the rounds call improvable, and at most it where proven."""
    opts = OracleSettings(cache=False, batch_streams=16, exact_max_states=0)
    r = solve_mod.finish(many_streams, budget, False,
                         solve_mod.stream_bounds(many_streams, budget, False, opts), 0.0)  # fmt: skip
    open_ = solve_mod.open_gaps(r, opts)
    models = {s: build_model(many_streams, s, budget, False) for s in open_}
    lowers = {s: r.streams[s].lower for s in open_}
    out = proofs.settle(models, lowers, opts.cut_rounds, 16)
    for s, want_more in [(s, True) for s in out.improvable] + [(s, False) for s in out.proven]:
        exact, dual = milp_schedule(models[s], 10**6)
        assert (models[s].planned_hits(exact) > lowers[s]) == want_more
        assert want_more or dual == lowers[s]


def test_without_batching_highs_proves_alone():
    tr = trace_from_events(random_events(np.random.default_rng(3), 18, 1))
    assert proofs.proven_optimal({0: build_model(tr, 0, 20, False)}, {0: 10**6}, 1, 0) == {}


@pytest.mark.parametrize("n_workers", [1, 2, 5])
def test_pieces_keep_each_window_whole_and_in_order(n_workers):
    items = [0, 3, 9, 10, 11, 25, 26, 40, 41, 42, 43, 79]
    pieces = _pieces(items, n_workers, 10)
    assert [s for p in pieces for s in p] == items
    windows = [{s // 10 for s in p} for p in pieces]
    assert all(not (a & b) for i, a in enumerate(windows) for b in windows[i + 1 :])
    assert len(pieces) == min(4 * n_workers, len({s // 10 for s in items}))
    assert _pieces([], n_workers, 10) == []
