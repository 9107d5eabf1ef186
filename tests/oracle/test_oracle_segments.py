"""The compiled keep-interval walk equals the readable one, and segmented LPs still bound."""

from __future__ import annotations

import numpy as np
import pytest
from helpers import brute_force
from hypothesis import given, settings
from hypothesis import strategies as st

from memlens.oracle import OracleSettings, solve
from memlens.oracle.bounds import lp_upper
from memlens.oracle.model import _walk, build_model
from memlens.oracle.segments import crossing, cut_points, segmented_lp_upper
from memlens.oracle.walk import walk_v1
from memlens.testing import random_events
from memlens.trace.io import trace_from_events


@settings(max_examples=80, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), n_events=st.integers(1, 150),
       n_streams=st.integers(1, 3), budget=st.integers(1, 120), demand_fetch=st.booleans())  # fmt: skip
def test_compiled_walk_equals_the_python_walk(seed, n_events, n_streams, budget, demand_fetch):
    tr = trace_from_events(random_events(np.random.default_rng(seed), n_events, n_streams))
    for s in range(tr.n_streams):
        slow = _walk(tr, s, budget, demand_fetch)
        fast = walk_v1(tr, s, budget, demand_fetch)
        for name in ("g_item", "g_start", "g_end", "g_prev", "g_ref", "pin_ev", "pin_tok"):
            assert np.array_equal(np.asarray(getattr(slow, name), np.int64), fast[name]), name
        assert (slow.n_refs, slow.forced) == (fast["n_refs"], fast["forced"])


def test_crossing_counts_the_gaps_a_cut_clips_by_hand():
    tr = trace_from_events(random_events(np.random.default_rng(3), 200, 1))
    m = build_model(tr, 0, 60, False)
    for p in range(m.points.shape[0]):
        by_hand = sum(1 for a, b in zip(m.k_start, m.k_end) if a < p < b)
        assert crossing(m)[p] == by_hand


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), budget=st.integers(5, 80), demand_fetch=st.booleans(),
       per_segment=st.integers(1, 12))  # fmt: skip
def test_segmented_bound_is_at_least_every_schedule_and_at_most_refs(seed, budget, demand_fetch,
                                                                    per_segment):  # fmt: skip
    """Cutting can only loosen the LP bound: it stays above the best schedule (brute force on
    small traces) and above the whole-stream LP's integer optimum never."""
    tr = trace_from_events(random_events(np.random.default_rng(seed), 14, 1))
    m = build_model(tr, 0, budget, demand_fetch)
    upper, (y, scaled), n = segmented_lp_upper(m, per_segment, lp_upper)
    best = brute_force(tr, budget, demand_fetch)
    assert best <= upper <= m.n_references
    assert n == cut_points(m, per_segment).shape[0]
    assert np.all((0 <= y) & (y <= 1)) and np.all((0 <= scaled) & (scaled <= y))
    nested = m.prev >= 0
    assert np.all(y[nested] <= y[m.prev[nested]] + 1e-12)  # chains never rise


def test_segments_on_two_processes_give_the_same_bounds_and_plans():
    tr = trace_from_events(random_events(np.random.default_rng(11), 600, 2))
    one = solve(tr, 40, False, OracleSettings(cache=False, method="segmented",
                                              segment_references=20))  # fmt: skip
    two = solve(tr, 40, False, OracleSettings(cache=False, method="segmented",
                                              segment_references=20, n_jobs=2))  # fmt: skip
    assert [s.segments for s in one.streams] == [s.segments for s in two.streams]
    assert max(s.segments for s in one.streams) > 1
    assert (one.upper, one.lower) == (two.upper, two.lower)
    assert all(np.array_equal(a, b) for a, b in zip(one.plans, two.plans))


def test_auto_keeps_one_lp_for_streams_up_to_four_segments():
    """The whole-stream LP is exact where it is cheap: auto cuts only long streams."""
    tr = trace_from_events(random_events(np.random.default_rng(4), 400, 1))
    whole = solve(tr, 30, False, OracleSettings(cache=False, method="lp"))
    # the LP path's segments (the exact program would take this stream whole)
    auto = solve(tr, 30, False, OracleSettings(cache=False, segment_references=tr.n_references,
                                               exact_max_states=0))  # fmt: skip
    cut = solve(tr, 30, False, OracleSettings(cache=False, segment_references=10,
                                              exact_max_states=0))  # fmt: skip
    assert auto.upper == whole.upper and auto.streams[0].segments == 1
    # each segment's LP is rounded down on its own, so the cut bound may even be lower than
    # the whole one; it still bounds every replayed schedule
    assert cut.streams[0].segments > 1 and cut.upper >= max(whole.lower, cut.lower)
    assert cut.upper_method == "lp-segments" and whole.upper_method == "lp"


def test_oracle_n_jobs_is_checked():
    with pytest.raises(ValueError, match="oracle.n_jobs"):
        OracleSettings(n_jobs=0)


@pytest.mark.slow  # kept out of the default run (6-minute budget); make test-all runs it
def test_presolve_solves_each_budget_once_into_the_disk_cache(tmp_path):
    from memlens.config.store import DATA_DIR
    from memlens.oracle.batch import presolve
    from memlens.oracle.solve import clear_memo
    from memlens.trace.io import load_trace

    path = str(DATA_DIR / "default" / "agent-small.jsonl.gz")
    tr = load_trace(path)
    settings = OracleSettings(cache_dir=str(tmp_path))
    clear_memo()
    assert presolve({path: tr}, False, [512, 1024], False, settings, 1) == 2
    assert presolve({path: tr}, False, [512, 1024], False, settings, 1) == 0  # memoised
    clear_memo()
    assert presolve({path: tr}, False, [512, 1024], False, settings, 1) == 0  # on disk
    cached = solve(tr, 512, False, settings)
    clear_memo()
    fresh = solve(tr, 512, False, OracleSettings(cache=False))
    assert cached.from_cache and (cached.upper, cached.lower) == (fresh.upper, fresh.lower)
    off = OracleSettings(enabled=False, cache_dir=str(tmp_path / "off"))
    assert presolve({path: tr}, False, [512], False, off, 1) == 0
