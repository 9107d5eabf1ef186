"""The page's debugging loop on the server side, every number counted by hand from
memlens.ui.sample: the chain of causes behind a miss (one hop and several), interventions that
are one per item and action and can be undone, the what-if's changed requests (a pin that
gains one request and loses another, with a metric delta of exactly 0), its scope (this
session's interventions or all of them) and its paired interval over streams."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from test_ui_server import call, serving  # tests/ui is on sys.path (pytest's rootdir import)

from memlens.analyze import queries
from memlens.analyze.prepared import Prepared
from memlens.learn.feedback import Feedback, FeedbackStore
from memlens.testing import rq, w
from memlens.trace.io import write_trace
from memlens.ui.interventions import SessionRows, intervene, scoped_rows, undo
from memlens.ui.sample import (
    make_sample_runs,
    multi_stream_events,
    tradeoff_events,
    write_run_folder,
)
from memlens.ui.server import UiConfig
from memlens.ui.whatif import what_if


@pytest.fixture(scope="module")
def tradeoff(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("tradeoff") / "runs"
    make_sample_runs(root, tradeoff_events())
    return root


@pytest.fixture
def server(tradeoff, tmp_path):
    cfg = UiConfig(root=str(tradeoff), port=0, mlflow_uri=None, prewarm=False,
                   feedback_store=str(tmp_path / "fb.db"))  # fmt: skip
    with serving(cfg) as (url, state):
        yield url, state


def _sha(folder: Path) -> str:
    return json.loads((folder / "metrics.json").read_text())["trace"]["sha256"]


def _row(sha: str, item: str, action: str = "keep", event: int = 0, stream: str = "agent",
         value=None) -> Feedback:  # fmt: skip
    return Feedback(source="person", trace_sha256=sha, stream=stream, event_index=event,
                    t=float(event), item_id=item, action=action, value=value)  # fmt: skip


# ------------------------------------------------------------------ the chain of causes
def test_the_chain_follows_the_miss_of_a_back_to_c_and_its_parent(tradeoff):
    run = Prepared(tradeoff / "lru" / "events.parquet")
    (need,) = queries.influence(run, 1)["needs"]
    chain = [(s["step"], s["event"], s["item_id"]) for s in need["chain"]]
    # a evicted at e3 for the write of c; a never needed since e0; c admitted at e3; c is
    # derived from a (the sample's meta.derived_from)
    assert chain == [("evict", 3, "a"), ("last_use", 0, "a"), ("admit", 3, "c"),
                     ("derived_from", 0, "a")]  # fmt: skip
    assert need["chain"][0]["reason"] == "room_for_write"
    assert need["chain"][0]["cause_item_id"] == "c"


def test_the_chain_goes_on_through_a_demand_fetch(tmp_path):
    """budget 2, demand fetch: c's write evicts a (e2); r0's miss of a fetches it back and
    evicts b (e3); r1 misses b.  The chain of that miss: b evicted for the fetch of a, which
    came back after its own miss, for which a had been evicted by the write of c."""
    path = tmp_path / "t.jsonl"
    write_trace(path, [w("a", 1, stream="s", t=0.0), w("b", 1, stream="s", t=1.0),
                       w("c", 1, stream="s", t=2.0), rq("r0", "a", stream="s", t=3.0),
                       rq("r1", "b", stream="s", t=4.0)])  # fmt: skip
    folder = write_run_folder(tmp_path / "run", path, ["policy=lru", "budget=2",
                                                      "demand_fetch=true"])  # fmt: skip
    run = Prepared(folder / "events.parquet")
    (need,) = queries.influence(run, 1)["needs"]
    chain = [(s["step"], s["event"], s["item_id"]) for s in need["chain"]]
    assert chain == [("evict", 3, "b"), ("last_use", 1, "b"), ("promote", 3, "a"),
                     ("evict", 2, "a"), ("last_use", 0, "a"), ("admit", 2, "c")]  # fmt: skip
    assert need["chain"][0]["reason"] == "room_for_fetch"
    assert need["chain"][2]["reason"] == "demand_fetch"


# ------------------------------------------------------------------ interventions
def test_repinning_adds_no_row_and_undo_takes_the_pin_back(tradeoff, tmp_path):
    store, sessions = FeedbackStore(tmp_path / "f.db"), SessionRows()
    sha = _sha(tradeoff / "lru")
    first = intervene(store, sessions, "s1", _row(sha, "a"))
    again = intervene(store, sessions, "s1", _row(sha, "a", event=3))  # same item, same action
    assert (first["added"], again["added"], again["existing"]) == (1, 0, True)
    assert again["id"] == first["id"] and len(store) == 1
    other = intervene(store, sessions, "s1", _row(sha, "b", "value", value=0.2))
    same_value = intervene(store, sessions, "s1", _row(sha, "b", "value", value=0.2))
    new_value = intervene(store, sessions, "s1", _row(sha, "b", "value", value=0.7))
    assert (other["added"], same_value["added"], new_value["added"]) == (1, 0, 1)
    assert len(store) == 3
    assert undo(store, sessions, "s1", sha) == {"removed": 1, "id": new_value["id"]}
    assert undo(store, sessions, "s1", sha, first["id"])["removed"] == 1
    assert [r.item_id for r in store.rows()] == ["b"]
    with pytest.raises(ValueError, match="nothing to undo"):
        undo(store, sessions, "s2", sha)
    with pytest.raises(KeyError, match="no such person row"):
        undo(store, sessions, "s1", sha, first["id"])


def test_the_scope_is_this_sessions_rows_or_all(tradeoff, tmp_path):
    store, sessions = FeedbackStore(tmp_path / "f.db"), SessionRows()
    sha = _sha(tradeoff / "lru")
    intervene(store, sessions, "mine", _row(sha, "a"))
    store.add([_row(sha, "b")])  # someone else's (another session, a script)
    assert [r.item_id for _i, r in scoped_rows(store, sessions, "mine", sha, "session")] == ["a"]
    assert [r.item_id for _i, r in scoped_rows(store, sessions, "mine", sha, "all")] == ["a", "b"]
    assert scoped_rows(store, sessions, "other", sha, "session") == []
    with pytest.raises(ValueError, match="scope must be"):
        scoped_rows(store, sessions, "mine", sha, "everything")


# ------------------------------------------------------------------ the what-if
def test_the_what_if_lists_the_request_gained_and_the_one_lost(server):
    """Pinning a: r1 gains, r2 loses; hit rate 2/3 before and after (a delta of 0)."""
    url, state = server
    pin = {"run": "lru", "item_id": "a", "action": "pin"}
    status, first = call(url, "/api/feedback", pin, token=state.token)
    assert status == 200 and first["added"] == 1
    status, again = call(url, "/api/feedback", pin, token=state.token)
    assert status == 200 and (again["added"], again["id"]) == (0, first["id"])
    status, d = call(url, "/api/whatif", {"run": "lru"}, token=state.token)
    assert status == 200 and (d["scope"], d["interventions"]) == ("session", 1)
    hr = d["metrics"]["hit_rate"]
    assert hr["before"] == pytest.approx(2 / 3) and hr["delta"] == 0
    assert [(c["request_id"], c["gained"]) for c in d["changed"]] == [("r1", True), ("r2", False)]
    assert (d["gained"], d["lost"], d["changed_total"]) == (1, 1, 2)
    assert hr["interval"]["note"] == "n<5"  # one stream: no interval, said so
    status, u = call(url, "/api/undo", {"run": "lru"}, token=state.token)
    assert status == 200 and u == {"removed": 1, "id": first["id"]}
    status, d = call(url, "/api/whatif", {"run": "lru"}, token=state.token)
    assert (d["interventions"], d["changed"]) == (0, [])
    status, d = call(url, "/api/undo", {"run": "lru"}, token=state.token)
    assert status == 400 and "nothing to undo" in d["error"]


def test_another_sessions_rows_wait_for_scope_all(server):
    url, state = server
    sha = _sha(Path(state.cfg.root) / "lru")
    FeedbackStore(state.cfg.feedback_store).add([_row(sha, "a")])
    _, mine = call(url, "/api/whatif", {"run": "lru"}, token=state.token)
    _, every = call(url, "/api/whatif", {"run": "lru", "scope": "all"}, token=state.token)
    assert (mine["interventions"], every["interventions"]) == (0, 1)
    assert [c["request_id"] for c in every["changed"]] == ["r1", "r2"]
    _, rows = call(url, "/api/feedback?run=lru")
    assert [(r["item_id"], r["mine"]) for r in rows["rows"]] == [("a", False)]


def test_the_what_if_interval_is_paired_over_streams(tmp_path):
    """Six copies of the sample (streams s1..s6), a pinned in three: hit rate 6/12 -> 9/12.
    Every stream's difference is 0 or +1/2, so every paired replicate is >= 0: the interval
    lies in [0, 0.5] and holds the estimate 0.25."""
    streams = [f"s{k}" for k in range(1, 7)]
    folder = make_sample_runs(tmp_path / "runs", multi_stream_events(streams))["lru"]
    sha = _sha(folder)
    rows = [_row(sha, f"{s}/a", stream=s, event=k) for k, s in enumerate(streams[:3])]
    d = what_if(folder, rows, tmp_path / "runs")
    hr = d["metrics"]["hit_rate"]
    assert (hr["before"], hr["after"]) == (0.5, 0.75)
    iv = hr["interval"]
    assert iv["n_streams"] == 6 and 0 <= iv["low"] <= 0.25 <= iv["high"] <= 0.5
    assert [c["request_id"] for c in d["changed"]] == [f"{s}/r1" for s in streams[:3]]
    assert all(c["gained"] for c in d["changed"])


# ------------------------------------------------------------------ item view, graph, diff
def test_the_item_view_has_the_moves_and_needs_of_a(tradeoff):
    run = Prepared(tradeoff / "lru" / "events.parquet")
    d = queries.item_view(run, "a")
    assert (d["stream"], d["event"], d["tokens"]) == ("agent", 0, 1)
    moves = [(m["event"], m["kind"], m["tier_after"], m["reason"], m["cause_item_id"])
             for m in d["moves"]]  # fmt: skip
    assert moves == [
        (0, "admit", "wm", "admitted", None),
        (3, "evict", "stc", "room_for_write", "c"),
    ]
    assert [(n["request_id"], n["kind"], n["tier"]) for n in d["needs"]] == [("r1", "miss", "stc")]
    with pytest.raises(KeyError, match="no such item"):
        queries.item_view(run, "zz")


def test_the_graph_places_nodes_by_stream_and_time(tradeoff):
    run = Prepared(tradeoff / "lru" / "events.parquet")
    g = queries.graph(run, "agent")
    assert [(r["request_id"], r["t"]) for r in g["requests"]] == [("r0", 2.0), ("r1", 4.0),
                                                                  ("r2", 5.0)]  # fmt: skip
    items = {i["item_id"]: (i["t"], i["tier"]) for i in g["items"]}
    # b needed twice from working memory, a missed from the short-term cache, c only derived
    assert items == {"b": (1.0, "wm"), "a": (0.0, "stc"), "c": (3.0, None)}


def test_the_diff_counts_where_outcomes_differ_over_time(tradeoff):
    """lru vs rule on the tradeoff trace: rule declines c, so only rule hits r1 (event 4)."""
    d = queries.diff(tradeoff / "lru" / "events.parquet", tradeoff / "rule" / "events.parquet")
    assert [r["request_id"] for r in d["rows"]] == ["r1"]
    busy = [
        (b["start"], b["a_only"], b["b_only"]) for b in d["over_time"] if b["a_only"] or b["b_only"]
    ]
    assert busy == [(4.0, 0, 1)] and sum(b["b_only"] for b in d["over_time"]) == d["total"] == 1
