"""The learned scorer's features read the same however they are computed: the timelines' one
compiled pass (``Timeline.positions``) against counting and finding by hand, the feature matrix
column by column against row by row, and the forest scoring either layout alike."""

from __future__ import annotations

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from memlens.scorer.decision_features import (
    BUDGET_COLUMNS,
    COLUMN,
    TIER_LOWER,
    Timeline,
    anchor_points,
    decision_features,
    default_tier,
)
from memlens.scorer.model import load_model
from memlens.testing import traces
from memlens.trace.io import trace_from_events

entries = st.lists(st.tuples(st.integers(0, 5), st.integers(0, 9)), max_size=40)
questions = st.lists(st.tuples(st.integers(0, 6), st.integers(0, 9)), min_size=1, max_size=30)


@given(entries, questions)
def test_counts_and_last_entries_are_those_found_by_hand(pairs, asked):
    """Entries (item, event), duplicates included; each question (item, event) is answered
    as a person would: the item's entries at or before the event, and its latest one."""
    n_events = 10
    items = np.array([p[0] for p in pairs], np.int64)
    events = np.array([p[1] for p in pairs], np.int64)
    tl = Timeline(n_events, items, events, values=np.arange(len(pairs)))
    q_items = np.array([a[0] for a in asked], np.int64)
    q_events = np.array([a[1] for a in asked], np.int64)
    count = tl.count(q_items, q_events)
    last, strict = tl.last(q_items, q_events), tl.last(q_items, q_events, strict=True)
    for k, (i, e) in enumerate(asked):
        through = [j for j, (pi, pe) in enumerate(pairs) if pi == i and pe <= e]
        before = [j for j in through if pairs[j][1] < e]
        assert count[k] == len(through)
        # the latest entry (ties: the one listed last, as the stable sort keeps them)
        for got, mine in ((last[k], through), (strict[k], before)):
            if not mine:
                assert got == -1
            else:
                assert tl.values[got] == max(mine, key=lambda j: (pairs[j][1], j))


@given(entries, questions)
def test_positions_are_numpys_searches(pairs, asked):
    items = np.array([p[0] for p in pairs], np.int64)
    events = np.array([p[1] for p in pairs], np.int64)
    tl = Timeline(10, items, events)
    q_items = np.array([a[0] for a in asked], np.int64)
    q_events = np.array([a[1] for a in asked], np.int64)
    lo, before, through = tl.positions(q_items, q_events)
    key = q_items * tl.span + q_events
    assert lo.tolist() == np.searchsorted(tl.keys, q_items * tl.span, "left").tolist()
    assert before.tolist() == np.searchsorted(tl.keys, key, "left").tolist()
    assert through.tolist() == np.searchsorted(tl.keys, key, "right").tolist()


def test_an_item_needed_at_many_events_is_searched_not_scanned():
    """One item with a long run (a system prompt every request needs): the gallop finds each
    position in the run, at its start, middle and end."""
    events = np.arange(0, 5000, 2, dtype=np.int64)
    tl = Timeline(5000, np.full(len(events), 3), events)
    asked = np.array([0, 1, 2, 2501, 4998, 4999], np.int64)
    assert tl.count(np.full(6, 3), asked).tolist() == [1, 1, 2, 1251, 2500, 2500]
    assert tl.count(np.array([2, 4]), np.array([4999, 4999])).tolist() == [0, 0]


@given(traces(max_events=40))
def test_the_matrix_column_by_column_is_the_matrix_row_by_row(events):
    trace = trace_from_events(events)
    pts = anchor_points(trace)
    tier = default_tier(trace, pts)
    rows = decision_features(trace, pts.item, pts.event, tier, 64)
    columns = decision_features(trace, pts.item, pts.event, tier, 64, order="F")
    assert rows.flags.c_contiguous and columns.flags.f_contiguous
    assert rows.tobytes() == np.ascontiguousarray(columns).tobytes()  # NaNs and all


def test_the_forest_scores_either_layout_bit_for_bit():
    forest = load_model("default").forest
    rng = np.random.default_rng(5)
    X = rng.normal(size=(300, len(COLUMN))) * rng.choice([0.1, 1.0, 50.0], size=len(COLUMN))
    X[rng.random(X.shape) < 0.05] = np.nan
    moved = rng.random(300) < 0.4
    values = rng.normal(size=(3, 300, len(BUDGET_COLUMNS))) * 4
    args = (moved, COLUMN["tier"], TIER_LOWER, BUDGET_COLUMNS, values)
    by_rows = forest.raw_budgets(np.ascontiguousarray(X), *args)
    by_columns = forest.raw_budgets(np.asfortranarray(X), *args)
    for a, b in zip(by_rows, by_columns, strict=True):
        assert a.tobytes() == b.tobytes()
