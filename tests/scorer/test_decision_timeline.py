"""The learned scorer's features read the same however they are computed: the timelines' one
compiled pass (``Timeline.positions``) against counting and finding by hand, the stream clocks'
one pass in event order against each stream's own cumulative sums, the feature matrix column
by column against row by row, and the forest scoring either layout alike."""

from __future__ import annotations

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from memlens.scorer.decision_features import (
    BUDGET_COLUMNS,
    COLUMN,
    TIER_LOWER,
    Timeline,
    TraceContext,
    anchor_points,
    decision_features,
    default_tier,
)
from memlens.scorer.model import load_model
from memlens.testing import traces
from memlens.trace.io import trace_from_events
from memlens.trace.model import ITEM_TYPES, PIN, REQUEST, UNPIN, WRITE

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


def stream_clocks_by_hand(trace) -> dict[str, np.ndarray]:
    """The stream clocks as each stream's own numpy sums (what TraceContext computed before
    its one compiled pass), and the pinned tokens by walking each stream's pins in order."""
    E = trace.n_events
    out = {k: np.full(E, fill, np.int64) for k, fill in
           (("pos", 0), ("req_clock", 0), ("tok_clock", 0), ("last_req", -1), ("task_item", -1),
            ("pinned_tokens", 0))}  # fmt: skip
    user = ITEM_TYPES.index("user_input")
    for ev in trace.stream_events:
        kinds, refs = trace.ev_kind[ev], trace.ev_ref[ev]
        is_req, is_write = (kinds == REQUEST).astype(np.int64), kinds == WRITE
        item = np.where(is_write, refs, 0)  # a request's ref is a request, not an item
        written = np.where(is_write, trace.item_tokens[item], 0)
        out["pos"][ev] = np.arange(len(ev))
        out["req_clock"][ev] = np.cumsum(is_req)
        out["tok_clock"][ev] = np.cumsum(written)
        out["last_req"][ev] = np.maximum.accumulate(np.where(is_req == 1, refs, -1))
        users = np.flatnonzero(is_write & (trace.item_type[item] == user))
        if len(users):
            out["task_item"][ev[users[0] :]] = refs[users[0]]
        pinned, total = set(), 0
        for e, kind, x in zip(ev.tolist(), kinds.tolist(), refs.tolist()):
            if kind == PIN and x not in pinned:
                pinned.add(x)
                total += int(trace.item_tokens[x])
            elif kind == UNPIN and x in pinned:
                pinned.discard(x)
                total -= int(trace.item_tokens[x])
            out["pinned_tokens"][e] = total
    return out


@given(traces(max_events=60, streams=("a", "b", "c")))
def test_stream_clocks_are_each_streams_own_sums(events):
    """Streams interleaved at random: every clock of every event counts its own stream only."""
    trace = trace_from_events(events)
    ctx, expected = TraceContext(trace), stream_clocks_by_hand(trace)
    for name, values in expected.items():
        got = getattr(ctx, name)
        assert got.dtype == np.int64 and got.tolist() == values.tolist(), name


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
