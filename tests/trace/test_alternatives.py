"""Trace format 1.1: needs that any of several earlier items can serve (groups of alternatives).

Checked against independent expectations: hand-written traces with hand-computed hits, touches,
fetches and false evictions; the compiled kernels event for event against the reference engine
on random traces with alternatives; and a version 1 trace replays exactly as the same trace
written as 1.1 with every group of size one.
"""

from __future__ import annotations

import numpy as np
import pytest
from helpers import brute_force
from hypothesis import given, settings
from hypothesis import strategies as st
from memlens.policies.lru import LRU
from memlens.policies.window import SlidingWindow

from memlens.analyze.metrics import compute_metrics
from memlens.oracle import OracleSettings, solve
from memlens.simulator import MOVE_FETCH, simulate
from memlens.testing import RESULT_FIELDS, pin, random_events, rq, unpin, w, with_alternatives
from memlens.trace.io import trace_from_events
from memlens.trace.model import Trace

HEADER = {"event": "header", "version": "1.1"}
NOCACHE = OracleSettings(cache=False)


def replay(tr: Trace, policy, budget: int, demand_fetch: bool = False, engine="reference"):
    return simulate(tr, policy, budget=budget, demand_fetch=demand_fetch, engine=engine)


# --------------------------------------------------------------------------- oracle
# brute_force: tests/helpers.py (shared with test_oracle_bounds; a v1 need is a group of one)


@st.composite
def small_alternative_traces(draw):
    """Tiny 1.1 traces: up to 5 items, requests needing ids or groups of 1-3 alternatives."""
    n_items = draw(st.integers(1, 5))
    sizes = draw(st.lists(st.integers(1, 6), min_size=n_items, max_size=n_items))
    events: list[dict] = [HEADER]
    written: list[str] = []
    pinned: set[str] = set()
    for step in range(draw(st.integers(3, 14))):
        op = draw(st.sampled_from(["w", "r", "r", "r", "p"]))
        if op == "w" or not written:
            if len(written) < n_items:
                name = f"i{len(written)}"
                events.append(w(name, sizes[len(written)]))
                written.append(name)
            continue
        if op == "r":
            one = st.sampled_from(written)
            group = st.lists(one, min_size=1, max_size=3, unique=True)
            needs = draw(st.lists(st.one_of(one, group, group), min_size=1, max_size=3))
            events.append(rq(f"q{step}", *needs))
        else:
            target = draw(st.sampled_from(written))
            events.append(unpin(target) if target in pinned else pin(target))
            pinned.symmetric_difference_update({target})
    if not any(e["event"] == "request" for e in events):
        events.append(rq("last", written[0]))
    return trace_from_events(events), draw(st.integers(1, 10))


@settings(max_examples=150, deadline=None)
@given(small_alternative_traces(), st.booleans())
def test_oracle_bounds_hold_against_brute_force(case, demand_fetch):
    t, budget = case
    r = solve(t, budget, demand_fetch, NOCACHE)
    best = brute_force(t, budget, demand_fetch)
    assert r.lower <= best <= r.upper
    assert r.upper <= t.n_references


# --------------------------------------------------------------------------- parser
def _items(*ids: str, tokens: int = 5) -> list[dict]:
    return [w(i, tokens) for i in ids]


@pytest.mark.parametrize(
    ("needs", "header", "field", "message"),
    [
        (["a", ["b", "c"]], None, "needs[1]", 'requires "version": "1.1"'),
        (["a", ["b", "c"]], {"event": "header", "version": 1}, "needs[1]", "requires"),
        ([[]], HEADER, "needs[0]", "an empty list of alternatives"),
        ([["a", "a"]], HEADER, "needs[0][1]", '"a" is listed twice'),
        ([["a", ["b"]]], HEADER, "needs[0][1]", "nested more than one level"),
        ([["a", 3]], HEADER, "needs[0][1]", "must be ids"),
        (["a", ["b", "zz"]], HEADER, "needs[1][1]", '"zz", which no earlier write'),
        (["a", ["b", "later"]], HEADER, "needs[1][1]", '"later", which no earlier write'),
        ([{"id": "a"}], HEADER, "needs", "must be strings"),
    ],
)
def test_bad_alternatives_are_named_by_line_and_field(needs, header, field, message):
    from memlens.trace.io import TraceError

    events = ([header] if header else []) + _items("a", "b", "c")
    events += [rq("r", *needs), w("later", 1)]
    with pytest.raises(TraceError) as info:
        trace_from_events(events, source="t.jsonl")
    err = info.value
    assert (err.path, err.line, err.field) == ("t.jsonl", len(events) - 1, field)
    assert message in str(err) and str(err).startswith(f"t.jsonl:{len(events) - 1}: ")


@pytest.mark.parametrize("version", [1, "1", 1.1, "1.1", 1.0])
def test_header_versions_accepted(version):
    tr = trace_from_events([{"event": "header", "version": version}, *_items("a"), rq("r", "a")])
    assert tr.n_references == 1 and not tr.has_alternatives


@pytest.mark.parametrize("version", [2, "1.2", True, None, [1]])
def test_other_header_versions_are_refused(version):
    from memlens.trace.io import TraceError

    with pytest.raises(TraceError, match="unsupported trace format version") as info:
        trace_from_events([{"event": "header", "version": version}])
    assert info.value.field == "version"


@st.composite
def alternative_requests(draw):
    """Writes i0..i5, then requests whose needs are ids or lists of distinct ids."""
    ids = [f"i{k}" for k in range(6)]
    one = st.sampled_from(ids)
    entry = st.one_of(one, st.lists(one, min_size=1, max_size=4, unique=True))
    return draw(st.lists(st.lists(entry, max_size=5), min_size=1, max_size=6))


@settings(max_examples=200, deadline=None)
@given(alternative_requests())
def test_groups_parse_to_what_was_written(requests):
    events = [HEADER, *_items(*(f"i{k}" for k in range(6)))]
    events += [rq(f"r{n}", *needs) for n, needs in enumerate(requests)]
    tr = trace_from_events(events)
    ids = list(tr.item_id)
    for r, needs in enumerate(requests):
        want: dict[frozenset, list[str]] = {}  # a second, simple normalisation
        for need in needs:
            group = [need] if isinstance(need, str) else need
            want.setdefault(frozenset(group), group)
        lo, hi = int(tr.needs_ptr[r]), int(tr.needs_ptr[r + 1])
        got = [[ids[i] for i in tr.alternatives(j).tolist()] for j in range(lo, hi)]
        assert got == list(want.values())
        assert [ids[i] for i in tr.needs_of(r).tolist()] == [g[0] for g in want.values()]
    # the CSR over every need's alternatives agrees with alternatives(j)
    for j in range(tr.n_references):
        a, b = int(tr.group_ptr[j]), int(tr.group_ptr[j + 1])
        assert tr.group_items[a:b].tolist() == tr.alternatives(j).tolist()
    assert tr.item_n_uses.sum() == tr.group_ptr[-1]


# one defect per case: (the bad entry, where the error points inside it, what it says)
DEFECTS = {
    "empty": ([], "", "an empty list of alternatives"),
    "twice": (["i1", "i2", "i1"], "[2]", '"i1" is listed twice'),
    "nested": (["i1", ["i2"]], "[1]", "nested more than one level"),
    "unknown": (["i1", "nope"], "[1]", '"nope", which no earlier write'),
    "not an id": (["i1", 7], "[1]", "must be ids"),
}


@settings(max_examples=150, deadline=None)
@given(alternative_requests(), st.data())
def test_a_bad_entry_is_named_by_its_line_and_index(requests, data):
    from memlens.trace.io import TraceError

    r = data.draw(st.integers(0, len(requests) - 1))
    k = data.draw(st.integers(0, len(requests[r])))
    defect = data.draw(st.sampled_from(sorted(DEFECTS)))
    bad, inner, message = DEFECTS[defect]
    needs = [*requests[r][:k], bad, *requests[r][k:]]
    events = [HEADER, *_items(*(f"i{n}" for n in range(6)))]
    events += [rq(f"r{n}", *(needs if n == r else x)) for n, x in enumerate(requests)]
    with pytest.raises(TraceError) as info:
        trace_from_events(events, source="t.jsonl")
    assert (info.value.line, info.value.field) == (8 + r, f"needs[{k}]{inner}")
    assert message in info.value.message
    # the same request in a version 1 trace: the first list in it is the error
    plain = [e for e in events[1:] if e["event"] == "write" or e["id"] == f"r{r}"]
    first = next(n for n, x in enumerate(needs) if isinstance(x, list))
    with pytest.raises(TraceError, match='requires "version": "1.1"') as info:
        trace_from_events(plain, source="t.jsonl")
    assert (info.value.line, info.value.field) == (7, f"needs[{first}]")


def test_a_version_1_trace_has_no_alternative_columns_to_pay_for():
    tr = trace_from_events(random_events(np.random.default_rng(3), n_events=300))
    assert not tr.has_alternatives and tr.alt_need.size == tr.alt_items.size == 0
    assert tr.group_items is tr.needs and tr.alternative_groups == {}


def test_written_loaded_and_cached_traces_keep_their_groups(tmp_path):
    from memlens.trace.cache import load_trace_cached
    from memlens.trace.io import load_trace, write_trace

    rng = np.random.default_rng(11)
    events = with_alternatives(random_events(rng, n_events=200), rng)
    path = tmp_path / "t.jsonl.gz"
    write_trace(path, events[1:], header={"version": "1.1"})
    direct = trace_from_events(events)
    loaded = load_trace(path)
    cached = [load_trace_cached(path, directory=tmp_path / "c") for _ in range(2)][1]
    for tr in (loaded, cached, Trace.from_arrays(*direct.to_arrays(), "x")):
        assert tr.has_alternatives
        for name in ("needs", "needs_ptr", "alt_need", "alt_ptr", "alt_items"):
            assert np.array_equal(getattr(tr, name), getattr(direct, name)), name
    assert cached.sha256 == loaded.sha256 == direct.sha256


def test_schema_allows_alternatives():
    import json

    jsonschema = pytest.importorskip("jsonschema")
    import memlens

    path = memlens.__file__.replace("__init__.py", "schema/trace-v1.schema.json")
    check = jsonschema.Draft202012Validator(json.loads(open(path).read()))
    assert check.is_valid({"event": "header", "version": "1.1"})
    assert check.is_valid(rq("r", "a", ["b", "c"]))
    assert not check.is_valid(rq("r", "a", []))
    assert not check.is_valid(rq("r", ["b", "b"]))
    assert not check.is_valid(rq("r", ["b", ["c"]]))


# --------------------------------------------------------------------------- simulator
def _hand_trace(c_group: list[str]) -> Trace:
    """a b c d (5 tokens each; c costs 0.5); r1 needs a or b; r2 needs ``c_group``."""
    events = [HEADER, w("a", 5), w("b", 5), w("c", 5, cost=0.5), rq("r1", ["a", "b"]),
              w("d", 5), rq("r2", c_group)]  # fmt: skip
    return trace_from_events(events)


@pytest.mark.parametrize("engine", ["reference", "fast"])
def test_hand_computed_lru_replay_with_alternatives(engine):
    # budget 10: c's write evicts a; r1 hits through b and touches b (not a), so d's write
    # evicts c; r2 needs c or a: a miss; demand fetch brings back c (first listed), evicting
    # b (oldest).  a and c were evicted before a later need listed them: 2 false evictions.
    tr = _hand_trace(["c", "a"])
    ids = list(tr.item_id)
    res = replay(tr, LRU(), 10, demand_fetch=True, engine=engine)
    assert res.need_hit.tolist() == [1, 0]
    moves = [(ids[i], k) for i, k in zip(res.move_item.tolist(), res.move_kind.tolist())]
    assert moves[-2:] == [("c", MOVE_FETCH), ("b", 2)]
    assert [m for m in moves if m[1] == 2] == [("a", 2), ("c", 2), ("b", 2)]
    assert (int(res.evictions.sum()), int(res.false_evictions.sum())) == (3, 2)
    plain = replay(tr, LRU(), 10, demand_fetch=False, engine=engine)
    assert (int(plain.evictions.sum()), int(plain.false_evictions.sum())) == (2, 2)


def test_metrics_count_needs_per_group_and_price_the_first_alternative():
    tr = _hand_trace(["c", "a"])
    m = compute_metrics(tr, replay(tr, LRU(), 10, demand_fetch=True))["overall"]
    assert (m["references"], m["hits"], m["hit_rate"], m["request_success"]) == (2, 1, 0.5, 0.5)
    # the missed need costs what missing c alone costs (c is what a fetch brings back)
    alone = trace_from_events([w("a", 5), w("b", 5), w("c", 5, cost=0.5), rq("r1", "b"),
                               w("d", 5), rq("r2", "c")])  # fmt: skip
    ref = compute_metrics(alone, replay(alone, LRU(), 10, demand_fetch=True))["overall"]
    assert ref["hits"] == 1 and m["miss_cost_usd"] == ref["miss_cost_usd"] == 0.5  # not a's


def test_a_need_is_a_hit_when_any_alternative_is_resident():
    tr = _hand_trace(["a", "d"])  # a was evicted, d is resident
    res = replay(tr, SlidingWindow(), 10)
    assert res.need_hit.tolist() == [1, 1]


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), n_events=st.integers(1, 150),
       n_streams=st.integers(1, 3), budget=st.integers(1, 120), demand_fetch=st.booleans(),
       lru=st.booleans())  # fmt: skip
def test_fast_kernels_equal_the_reference_with_alternatives(
    seed, n_events, n_streams, budget, demand_fetch, lru
):
    rng = np.random.default_rng(seed)
    tr = trace_from_events(with_alternatives(random_events(rng, n_events, n_streams), rng))
    policy = LRU if lru else SlidingWindow
    ref = replay(tr, policy(), budget, demand_fetch, engine="reference")
    fast = replay(tr, policy(), budget, demand_fetch, engine="fast")
    assert fast.engine == "fast"
    for name in RESULT_FIELDS:
        assert np.array_equal(getattr(ref, name), getattr(fast, name)), name


def test_groups_of_one_replay_exactly_like_version_1():
    rng = np.random.default_rng(5)
    events = random_events(rng, n_events=300, n_streams=2)
    singles = [HEADER] + [{**e, "needs": [[n] for n in e["needs"]]} if e["event"] == "request"
                          else e for e in events]  # fmt: skip
    v1, v11 = trace_from_events(events), trace_from_events(singles)
    assert not v11.has_alternatives and np.array_equal(v1.needs, v11.needs)
    for demand_fetch in (False, True):
        a = replay(v1, LRU(), 60, demand_fetch)
        b = replay(v11, LRU(), 60, demand_fetch)
        for name in RESULT_FIELDS:
            assert np.array_equal(getattr(a, name), getattr(b, name)), name


@pytest.fixture(scope="module")
def generated_with_alternatives():
    """A generated trace with pins (2 streams x 250 events), half its needs made groups."""
    from memlens.trace.generate import generate_simple

    events = list(generate_simple(seed=3, streams=2, events_per_stream=250, pin_rate=0.05))
    return trace_from_events(with_alternatives(events, np.random.default_rng(3)))


@pytest.mark.parametrize("demand_fetch", [False, pytest.param(True, marks=pytest.mark.slow)])
def test_no_registered_policy_beats_oracle_upper_with_alternatives(
    generated_with_alternatives, demand_fetch
):
    from memlens.config.compose import make_policy
    from memlens.config.store import registered_policies

    t = generated_with_alternatives
    assert t.has_alternatives
    for budget in (200, 1000):
        bound = solve(t, budget, demand_fetch, NOCACHE)
        assert bound.lower <= bound.upper <= t.n_references
        for name in registered_policies():
            policy = make_policy(name)
            if policy.outside_oracle_class:
                continue
            hits = int(replay(t, policy, budget, demand_fetch, engine="auto").need_hit.sum())
            assert hits <= bound.upper, (name, budget)
        oracle = make_policy("oracle")
        oracle.use_oracle_settings(NOCACHE)
        assert int(replay(t, oracle, budget, demand_fetch).need_hit.sum()) == bound.lower


def test_the_learned_scorer_anchors_every_alternative():
    """Each alternative a request lists is a need anchor of the learned scorer (so the item that
    serves a need is rescored there), and its label and need-count features see it as needed."""
    from memlens.scorer.decision_features import ANCHOR_NEED, anchor_points, context

    events = [HEADER, w("a", 10), w("b", 10), w("c", 10),
              {**rq("q1", "a"), "needs": ["a", ["b", "c"]]}, rq("q2", "c")]  # fmt: skip
    tr = trace_from_events(events)
    pts = anchor_points(tr)
    need = pts.kind == ANCHOR_NEED
    listed = sorted(tr.item_id[i] for i in pts.item[need])
    assert listed == ["a", "b", "c", "c"]  # q1: a, b, c; q2: c
    counts = context(tr).needs.count(np.arange(3), np.full(3, tr.n_events - 1))
    assert counts.tolist() == [1, 1, 2]
    v1 = trace_from_events(events[1:4] + [rq("q1", "a", "b"), rq("q2", "c")])
    assert len(anchor_points(v1).item[anchor_points(v1).kind == ANCHOR_NEED]) == 3
