"""``memlens.oracle.bounds.highs_lp``, the LP stage's HiGHS call without scipy's result
building (issue 34), against ``scipy.optimize.linprog`` itself: the same solution and
objective to the last bit on every batched LP (every cut round) of generated many-stream
traces, with and without demand fetch, and the same refusal of an infeasible LP."""

from __future__ import annotations

import numpy as np
import pytest
from helpers import generated_agent_trace

from memlens.oracle import bounds
from memlens.oracle.model import build_model
from memlens.oracle.settings import OracleSettings
from memlens.oracle.solve import _fits


@pytest.fixture(scope="module")
def many_streams(tmp_path_factory):
    return generated_agent_trace(tmp_path_factory, streams=40, events_per_stream=80, seed=11)


def _by_linprog(c, A_eq, b_eq, A_ub, b_ub, upper):
    from scipy.optimize import linprog

    res = linprog(c, A_eq=A_eq, b_eq=b_eq, A_ub=A_ub, b_ub=b_ub,
                  bounds=np.stack([np.zeros(c.size), upper], axis=1), method="highs")  # fmt: skip
    return (res.x, float(res.fun)) if res.status == 0 else (None, None)


@pytest.mark.parametrize(("budget", "demand_fetch"), [(300, False), (512, False), (512, True)])
def test_every_batched_lp_is_solved_as_linprog_solves_it(many_streams, budget, demand_fetch,
                                                         monkeypatch):  # fmt: skip
    seen = []
    inner = bounds.highs_lp

    def both(c, A_eq, b_eq, A_ub, b_ub, upper):
        x, fun, message = inner(c, A_eq, b_eq, A_ub, b_ub, upper)
        want_x, want_fun = _by_linprog(c, A_eq, b_eq, A_ub, b_ub, upper)
        assert x.tobytes() == want_x.tobytes() and fun == want_fun
        seen.append(c.size)
        return x, fun, message

    monkeypatch.setattr(bounds, "highs_lp", both)
    models = [build_model(many_streams, s, budget, demand_fetch)
              for s in range(many_streams.n_streams)]  # fmt: skip
    models = [m for m in models if m.n_gaps and not _fits(m, OracleSettings())]
    assert len(models) >= 5
    bounds.lp_candidates_many(models, 3)  # batches, every cut round
    for m in models[:5]:
        bounds.lp_candidates(m, 1)  # one stream alone
    assert len(seen) >= 7


def test_an_infeasible_lp_is_refused():
    import scipy.sparse as sp

    # x0 = 2 with 0 <= x0 <= 1
    x, _, message = bounds.highs_lp(np.array([1.0]), sp.csr_array(np.array([[1.0]])),
                                    np.array([2.0]), None, None, np.array([1.0]))  # fmt: skip
    assert x is None and message != "optimal"


def test_without_scipys_private_binding_it_falls_back_to_linprog(many_streams, monkeypatch):
    """A scipy whose private HiGHS binding is missing (or another) gets linprog's answer."""
    import sys

    models = [build_model(many_streams, s, 300, False) for s in range(many_streams.n_streams)]
    models = [m for m in models if m.n_gaps and not _fits(m, OracleSettings())][:3]
    calls = []
    direct = bounds.highs_lp

    def record(*args):
        calls.append(args)
        return direct(*args)

    monkeypatch.setattr(bounds, "highs_lp", record)
    fast = bounds.lp_candidates_many(models, 1)
    import scipy.optimize._highspy as binding

    monkeypatch.setitem(sys.modules, "scipy.optimize._highspy._core", None)  # import fails
    monkeypatch.delattr(binding, "_core")
    for args in calls:
        x, fun, message = direct(*args)
        want_x, want_fun = _by_linprog(*args)
        assert message == "optimal" and x.tobytes() == want_x.tobytes() and fun == want_fun
    monkeypatch.setattr(bounds, "highs_lp", direct)
    slow = bounds.lp_candidates_many(models, 1)
    assert len(calls) >= 1 and len(fast) == len(slow)
    for (bound_a, x_a), (bound_b, x_b) in zip(fast, slow, strict=True):
        assert bound_a == bound_b and np.asarray(x_a).tobytes() == np.asarray(x_b).tobytes()
