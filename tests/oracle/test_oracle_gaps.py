"""The integer programs run after the replay, only where it left a gap (issue 34).

The solver used to start HiGHS's branch and bound for every small stream whose rounded plan
promised fewer hits than the LP bound, before replaying anything.  Now the plans are replayed
first, and a stream gets an integer program only where its best replay is still short of the LP
bound: first a feasibility problem (can any schedule plan one hit more?), the branch and bound
only where one can.  The expectation is the old order, written again here from the solver's
public pieces: every stream's lower bound the same, its upper bound the same or tighter.
"""

from __future__ import annotations

import numpy as np
import pytest
from helpers import brute_force, generated_agent_trace, rq, trace, w

from memlens.oracle import OracleSettings, clear_memo, solve
from memlens.oracle import bounds as bounds_mod
from memlens.oracle.model import build_model, keep_pairs, schedule_load_ok
from memlens.oracle.solve import _replay, finish, open_gaps, stream_bounds

NOCACHE = OracleSettings(cache=False, exact_max_states=0)  # the LP and MILP path


@pytest.fixture(scope="module")
def many_streams(tmp_path_factory):
    return generated_agent_trace(tmp_path_factory, streams=24, events_per_stream=60, seed=5)


def _milp_before_the_replay(t, budget: int, demand_fetch: bool, settings: OracleSettings):
    """Per stream (upper, lower) as the solver had them: a branch and bound for every small
    stream whose uncut plan promised less than the LP bound, its incumbent replayed beside the
    LP plans and Belady-Size, the best replay kept."""
    parts = stream_bounds(t, budget, demand_fetch, settings)
    bounds, _, planned = parts
    upper = [b.upper for b in bounds]
    incumbents = {}
    for s, b in enumerate(bounds):
        model = build_model(t, s, budget, demand_fetch)
        small = b.upper_method == "lp" and 0 < model.n_gaps <= settings.milp_max_gaps
        if small and planned[s][0] < b.upper:
            exact, dual = bounds_mod.milp_schedule(model, settings.milp_node_limit)
            upper[s] = min(upper[s], dual) if dual is not None else upper[s]
            if exact is not None and schedule_load_ok(model, exact):
                incumbents[s] = keep_pairs(model, exact)
    lower = [b.lower for b in finish(t, budget, demand_fetch, parts, 0.0).streams]
    empty = np.zeros((0, 2), dtype=np.int64)
    hits = _replay(t, [incumbents.get(s, empty) for s in range(t.n_streams)], budget,
                   demand_fetch)  # fmt: skip
    for s in incumbents:
        lower[s] = max(lower[s], int(hits[s]))
    return upper, lower


def _counting(monkeypatch) -> dict[str, int]:
    calls = {"milp_schedule": 0, "none_reaches": 0, "none_reaches_chain": 0}
    solve_mod = __import__("memlens.oracle.solve", fromlist=["x"])
    for name in calls:
        real = getattr(solve_mod, name)

        def counted(*args, _real=real, _name=name):
            calls[_name] += 1
            return _real(*args)

        monkeypatch.setattr(solve_mod, name, counted)
    return calls


@pytest.mark.parametrize("demand_fetch", [False, True])
@pytest.mark.parametrize("budget", [200, 512, 800])
def test_same_lower_and_no_looser_upper_than_solving_before_the_replay(
    many_streams, budget, demand_fetch
):
    upper, lower = _milp_before_the_replay(many_streams, budget, demand_fetch, NOCACHE)
    got = solve(many_streams, budget, demand_fetch, NOCACHE)
    assert [b.lower for b in got.streams] == lower
    assert all(b.upper <= u for b, u in zip(got.streams, upper, strict=True))


def test_the_replay_spares_integer_programs_on_many_streams(many_streams, monkeypatch):
    """At a budget where most streams need HiGHS, some replays already reach the LP bound
    (no program at all) and some gaps are closed by a proof alone (no branch and bound)."""
    bounds, _, planned = stream_bounds(many_streams, 512, False, NOCACHE)
    promised_less = sum(b.upper_method == "lp" and 0 < b.gaps <= NOCACHE.milp_max_gaps
                        and planned[s][0] < b.upper for s, b in enumerate(bounds))  # fmt: skip
    n_open = len(open_gaps(finish(many_streams, 512, False, (bounds, _, planned), 0.0), NOCACHE))
    calls = _counting(monkeypatch)
    clear_memo()  # solved in this process by the test above: the memo would answer
    got = solve(many_streams, 512, False, NOCACHE)
    assert calls["none_reaches"] + calls["none_reaches_chain"] < promised_less
    closed_by_proof = n_open - calls["milp_schedule"]  # by an LP's proof or HiGHS's
    assert closed_by_proof > 0
    assert sum(b.upper_method == "milp" for b in got.streams) >= closed_by_proof


def test_none_reaches_by_hand():
    """Budget 10, items a=6 and b=6 each needed twice after being written: both cannot stay,
    so one item's two later needs are the most any schedule keeps (brute force agrees)."""
    t = trace(w("a", 6), w("b", 6), rq("q1", "a"), rq("q2", "b"), rq("q3", "a"),
              rq("q4", "b"))  # fmt: skip
    best = brute_force(t, 10, False)
    model = build_model(t, 0, 10, False)
    assert best == 2
    assert bounds_mod.none_reaches(model, best + 1, 500)
    assert not bounds_mod.none_reaches(model, best, 500)
