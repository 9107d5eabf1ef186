"""Cover cuts (``memlens.oracle.cuts``): valid for every schedule, and they tighten the LP."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from helpers import brute_force
from hypothesis import given, settings
from hypothesis import strategies as st

from memlens.oracle import OracleSettings, solve
from memlens.oracle.bounds import _chains, lp_candidates, lp_upper
from memlens.oracle.cuts import cover_cuts
from memlens.oracle.model import build_model, schedule_load_ok
from memlens.oracle.segments import segmented_lp_upper
from memlens.testing import random_events, rq, w
from memlens.trace.io import trace_from_events


def _pairs_trace(periods: int):
    """``periods`` times: write two 6-token items, then one request needing both."""
    events = []
    for p in range(periods):
        events += [w(f"a{p}", 6, t=3.0 * p), w(f"b{p}", 6, t=3.0 * p + 1),
                   rq(f"r{p}", f"a{p}", f"b{p}", t=3.0 * p + 2)]  # fmt: skip
    return trace_from_events(events)


def test_the_cover_cut_closes_the_lp_gap_of_two_items_that_do_not_fit_together():
    """Budget 10, items of 6: the LP keeps 10/12 of each pair (5/3 hits a period), so three
    periods give floor(5.0) = 5; at most one of each pair fits, so the optimum is 3, and the
    cover {a, b} (12 > 10 tokens) says exactly that."""
    tr = _pairs_trace(3)
    m = build_model(tr, 0, 10, False)
    assert lp_upper(m, cut_rounds=0)[0] == 5
    assert lp_upper(m, cut_rounds=1)[0] == 3 == brute_force(tr, 10, False)
    r = solve(tr, 10, False, OracleSettings(cache=False))
    assert (r.upper, r.lower) == (3, 3)


def test_the_cut_is_violated_by_the_lp_point_it_was_separated_from():
    m = build_model(_pairs_trace(1), 0, 10, False)
    head, _ = _chains(m)
    x = np.full(m.n_gaps, 10 / 12)
    rows, rhs = cover_cuts(m.k_start[head], m.k_end, head, m.size, x, m.capacity, m.n_gaps)
    assert rows.shape[0] == 1 and rhs.tolist() == [1.0]
    assert rows.to_scipy().toarray().tolist() == [[1.0, 1.0]]
    assert rows.matvec(x) > rhs  # 5/3 > 1


def _chain_point(m, selected: np.ndarray) -> np.ndarray:
    """A 0/1 gap selection in ``lp_upper``'s chain form: ``d_g = y_g - y_(g's successor)``."""
    d = selected.astype(np.float64)
    for g, p in enumerate(m.prev.tolist()):
        if p >= 0:
            d[p] -= d[g]
    return d


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), budget=st.integers(5, 60), demand_fetch=st.booleans())
def test_every_cut_holds_for_every_feasible_schedule(seed, budget, demand_fetch):
    """Cuts separated from random fractional points never cut off a feasible 0/1 schedule
    (all of them enumerated on small streams)."""
    rng = np.random.default_rng(seed)
    tr = trace_from_events(random_events(rng, 24, 1))
    m = build_model(tr, 0, budget, demand_fetch)
    if not 0 < m.n_gaps <= 11:
        return
    head, _ = _chains(m)
    rows, rhs = cover_cuts(m.k_start[head], m.k_end, head, m.size, rng.random(m.n_gaps),
                           m.capacity, m.n_gaps)  # fmt: skip
    for bits in itertools.product((False, True), repeat=m.n_gaps):
        sel = np.asarray(bits)
        if schedule_load_ok(m, sel):
            assert np.all(rows.matvec(_chain_point(m, sel)) <= rhs + 1e-9)


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), budget=st.integers(5, 80), demand_fetch=st.booleans(),
       rounds=st.integers(1, 6), per_segment=st.integers(1, 12))  # fmt: skip
def test_cut_bounds_stay_between_the_optimum_and_the_uncut_lp(seed, budget, demand_fetch,
                                                              rounds, per_segment):  # fmt: skip
    tr = trace_from_events(random_events(np.random.default_rng(seed), 16, 1))
    m = build_model(tr, 0, budget, demand_fetch)
    best = brute_force(tr, budget, demand_fetch)
    plain, y = lp_candidates(m, 0)
    cut, y_cut = lp_candidates(m, rounds)
    assert best <= cut <= plain
    assert y.shape == (1, m.n_gaps) and y_cut.shape == (2, m.n_gaps)
    assert np.array_equal(y_cut[0], y[0])  # the uncut LP's values are kept for the rounding
    seg_plain = segmented_lp_upper(m, per_segment, lp_upper)[0]
    seg_cut, priorities, _ = segmented_lp_upper(m, per_segment, lambda s: lp_candidates(s, rounds))
    assert best <= seg_cut <= seg_plain
    assert len(priorities) == (4 if m.n_gaps else 2)  # plain and share-scaled, per LP point
    r = solve(tr, budget, demand_fetch, OracleSettings(cache=False, cut_rounds=rounds))
    assert r.lower <= best <= r.upper <= cut


def test_cut_rounds_is_a_checked_setting():
    import pytest

    with pytest.raises(ValueError, match="oracle.cut_rounds"):
        OracleSettings(cut_rounds=-1)


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), budget=st.integers(5, 80), demand_fetch=st.booleans(),
       segment_references=st.sampled_from([0, 3]))  # fmt: skip
@pytest.mark.slow  # kept out of the default run (6-minute budget); make test-all runs it
def test_cuts_only_raise_the_lower_bound_and_keep_the_plan_otherwise(seed, budget, demand_fetch,
                                                                     segment_references):  # fmt: skip
    """Per stream, the replayed lower bound with cuts is at least the one without, and where
    it is equal the plan is the same one (so ``policy=oracle`` changes only where it gains)."""
    tr = trace_from_events(random_events(np.random.default_rng(seed), 120, 3))
    kw = {"cache": False, "segment_references": segment_references, "milp_max_gaps": 0}
    plain = solve(tr, budget, demand_fetch, OracleSettings(cut_rounds=0, **kw))
    cut = solve(tr, budget, demand_fetch, OracleSettings(cut_rounds=3, **kw))
    for s, (a, b) in enumerate(zip(plain.streams, cut.streams)):
        assert a.lower <= b.lower <= b.upper <= a.upper
        if a.lower == b.lower:
            assert np.array_equal(plain.plans[s], cut.plans[s])
