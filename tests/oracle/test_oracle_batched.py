"""Small streams' LPs solved together give each stream the bound it gets alone (issue 34).

``memlens.oracle.bounds.lp_candidates_many`` solves a block-diagonal LP; every stream's bound
is read from its own block.  The expectation is the one-LP-per-stream solve, run here on the
same models: equal bounds per stream, and a lower bound that is still a valid plan.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from helpers import generated_agent_trace

from memlens.oracle import OracleSettings
from memlens.oracle.bounds import lp_candidates, lp_candidates_many
from memlens.oracle.model import build_model
from memlens.oracle.solve import _fits, stream_bounds


@pytest.fixture(scope="module")
def many_streams(tmp_path_factory):
    return generated_agent_trace(tmp_path_factory, streams=24, events_per_stream=60, seed=5)


def _lp_models(trace, budget, demand_fetch):
    models = [build_model(trace, s, budget, demand_fetch) for s in range(trace.n_streams)]
    return [m for m in models if m.n_gaps and not m.has_groups
            and not _fits(m, OracleSettings())]  # fmt: skip


@pytest.mark.parametrize("demand_fetch", [False, True])
@pytest.mark.parametrize("cut_rounds", [0, 2])
def test_each_streams_bound_is_its_own_lps(many_streams, demand_fetch, cut_rounds):
    models = _lp_models(many_streams, 300, demand_fetch)
    assert len(models) >= 5  # the budget leaves streams to solve
    together = lp_candidates_many(models, cut_rounds)
    for model, (bound, y) in zip(models, together, strict=True):
        alone, y_alone = lp_candidates(model, cut_rounds)
        assert bound == alone
        assert y.shape == y_alone.shape and np.all((y >= 0) & (y <= 1))


def test_a_batch_of_one_is_the_streams_own_solve(many_streams):
    (model,) = _lp_models(many_streams, 300, False)[:1]
    ((bound, y),) = lp_candidates_many([model], 1)
    alone, y_alone = lp_candidates(model, 1)
    assert bound == alone
    np.testing.assert_array_equal(y, y_alone)


@pytest.mark.parametrize("budget", [200, 400, 800])
def test_batched_solve_keeps_every_upper_bound(many_streams, budget):
    """Windows of 5 streams, against each stream alone: the same upper bounds and methods
    (the plans' feasibility is checked inside, which raises on a plan over budget)."""
    alone, _, _ = stream_bounds(many_streams, budget, False, OracleSettings(batch_streams=0))
    bounds, _, _ = stream_bounds(many_streams, budget, False, OracleSettings(batch_streams=5))
    assert [b.upper for b in bounds] == [a.upper for a in alone]
    for b, a in zip(bounds, alone, strict=True):
        assert dataclasses.replace(b, solve_s=0.0, lower=0) == dataclasses.replace(
            a, solve_s=0.0, lower=0
        )
        assert b.lower <= b.upper
