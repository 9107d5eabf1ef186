"""The feedback store and its trace adapters: round trips, validation naming the field, 50
concurrent writers, rows read from a hand-made trace, and feedback replayed as pins."""

from __future__ import annotations

import multiprocessing
import sqlite3
import threading
from dataclasses import fields, replace

import numpy as np
import pytest
from hypothesis import given, settings
from memlens.policies.lru import LRU
from memlens.policies.rule import RuleScorer

from memlens.cli.feedback import main as feedback_main
from memlens.learn.feedback import (
    ACTIONS,
    SCHEMA_VERSION,
    SOURCES,
    Feedback,
    FeedbackError,
    FeedbackStore,
    feedback_from_trace,
    trace_events,
    with_feedback,
)
from memlens.simulator import simulate
from memlens.testing import annotate, pin, rq, trace, traces, unpin, w
from memlens.trace.io import load_trace, trace_from_events, write_trace

SHA_A, SHA_B = "a" * 64, "b" * 64


def row(**kw) -> Feedback:
    base = {"source": "person", "trace_sha256": SHA_A, "stream": "s", "event_index": 0,
            "t": 0.0, "item_id": "x", "action": "keep"}  # fmt: skip
    return Feedback(**{**base, **kw})


# ---------------------------------------------------------------------------- store
def test_round_trip_keeps_every_field_and_orders_by_trace_event_insertion(tmp_path):
    store = FeedbackStore(tmp_path / "fb.db")
    rows = [
        row(trace_sha256=SHA_B, event_index=5),
        row(event_index=7, action="value", value=0.25, note="stale", author="ann"),
        row(event_index=np.int64(2), t=np.float64(1.5), action="drop", source="simulated"),
        row(event_index=7, item_id="y", action="value", note="only a note"),
        row(event_index=2, item_id="z", source="trace"),
    ]
    assert store.add(rows) == 5
    assert len(store) == 5
    got = store.rows()
    # trace a first, by event index, ties in insertion order; then trace b
    assert got == [rows[2], rows[4], rows[1], rows[3], rows[0]]
    assert type(got[0].event_index) is int and got[0].t == 1.5
    assert got[2].value == 0.25 and got[2].note == "stale" and got[2].author == "ann"
    assert got[3].value is None and got[3].note == "only a note"
    assert store.rows(trace_sha256=SHA_B) == [rows[0]]
    assert store.rows(source="simulated") == [rows[2]]
    assert store.rows(trace_sha256=SHA_A, source="person") == [rows[1], rows[3]]
    # a second store object on the same file sees the same rows; appending keeps them
    again = FeedbackStore(tmp_path / "fb.db")
    assert again.add([row(event_index=2, item_id="late")]) == 1
    assert [r.item_id for r in again.rows(trace_sha256=SHA_A)][:3] == ["x", "z", "late"]
    assert again.add([]) == 0


def test_store_file_is_versioned_sqlite_in_wal_mode(tmp_path):
    path = tmp_path / "fb.db"
    FeedbackStore(path)
    db = sqlite3.connect(path)
    assert db.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
    assert db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    columns = [r[1] for r in db.execute("PRAGMA table_info(feedback)")]
    assert columns == ["id", *(f.name for f in fields(Feedback))]
    db.execute("PRAGMA user_version = 99")
    db.commit()
    db.close()
    with pytest.raises(FeedbackError, match="schema version 99"):
        FeedbackStore(path)


def test_foreign_files_are_refused(tmp_path):
    junk = tmp_path / "junk.db"
    junk.write_bytes(b"this is not a database at all, not even close" * 20)
    with pytest.raises(FeedbackError, match="not a feedback store"):
        FeedbackStore(junk)
    other = tmp_path / "other.db"
    db = sqlite3.connect(other)
    db.execute("CREATE TABLE t (x)")
    db.commit()
    db.close()
    with pytest.raises(FeedbackError, match="schema version 0"):
        FeedbackStore(other)


BAD = [
    ("source", {"source": "robot"}),
    ("trace_sha256", {"trace_sha256": "abc"}),
    ("trace_sha256", {"trace_sha256": "A" * 64}),
    ("stream", {"stream": 3}),
    ("event_index", {"event_index": -1}),
    ("event_index", {"event_index": 1.0}),
    ("event_index", {"event_index": True}),
    ("t", {"t": float("nan")}),
    ("t", {"t": "0"}),
    ("item_id", {"item_id": ""}),
    ("action", {"action": "pin"}),
    ("value", {"action": "value", "value": 1.5}),
    ("value", {"action": "value", "value": True}),
    ("value", {"action": "keep", "value": 0.5}),
    ("value", {"action": "value"}),  # neither a value nor a note
    ("note", {"note": 7}),
    ("author", {"author": ["me"]}),
]


@pytest.mark.parametrize(("field", "change"), BAD)
def test_bad_rows_are_refused_naming_the_field(tmp_path, field, change):
    with pytest.raises(ValueError, match=f'field "{field}"') as info:
        row(**change)
    assert info.value.field == field
    # a row altered after construction is caught by add, which writes nothing of the batch
    store = FeedbackStore(tmp_path / "fb.db")
    good = row()
    bad = row()
    for k, v in change.items():
        object.__setattr__(bad, k, v)
    with pytest.raises(ValueError, match=f'feedback row 1: field "{field}"'):
        store.add([good, bad])
    assert len(store) == 0


def test_add_refuses_what_is_not_a_row(tmp_path):
    store = FeedbackStore(tmp_path / "fb.db")
    with pytest.raises(FeedbackError, match="feedback row 0: not a Feedback"):
        store.add([{"source": "person"}])
    with pytest.raises(ValueError, match='field "source"'):
        store.rows(source="robot")
    assert SOURCES == ("trace", "simulated", "person") and ACTIONS == ("keep", "drop", "value")


def _writer(path: str, writer: int, batches: int, per_batch: int) -> None:
    store = FeedbackStore(path)
    for b in range(batches):
        store.add(row(event_index=writer, item_id=f"w{writer}-{b}-{k}", author=f"w{writer}")
                  for k in range(per_batch))  # fmt: skip


def _check_nothing_lost(store: FeedbackStore, writers: int, batches: int, per_batch: int):
    got = store.rows()
    assert len(got) == len(store) == writers * batches * per_batch
    want = {f"w{w}-{b}-{k}" for w in range(writers) for b in range(batches)
            for k in range(per_batch)}  # fmt: skip
    assert {r.item_id for r in got} == want
    for w_ in range(writers):  # each writer's rows in its own order (one event index each)
        mine = [r.item_id for r in got if r.author == f"w{w_}"]
        assert mine == [f"w{w_}-{b}-{k}" for b in range(batches) for k in range(per_batch)]


def test_fifty_concurrent_processes_lose_nothing(tmp_path):
    path = str(tmp_path / "fb.db")  # the first writers race to create the schema too
    ctx = multiprocessing.get_context("fork")
    procs = [ctx.Process(target=_writer, args=(path, k, 4, 5)) for k in range(50)]
    for p in procs:
        p.start()
    for p in procs:
        p.join()
    assert [p.exitcode for p in procs] == [0] * 50
    _check_nothing_lost(FeedbackStore(path), 50, 4, 5)


def test_fifty_concurrent_threads_lose_nothing(tmp_path):
    path = str(tmp_path / "fb.db")
    errors: list[BaseException] = []

    def run(k: int) -> None:
        try:
            _writer(path, k, 4, 5)
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(k,)) for k in range(50)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    _check_nothing_lost(FeedbackStore(path), 50, 4, 5)


# ---------------------------------------------------------------------- from traces
HAND = [
    w("a", 10, stream="s", t=0.0),  # 0
    w("b", 10, stream="s", t=1.0),  # 1
    pin("a", t=2.0, meta={"author": "ann"}),  # 2
    rq("r1", "a", stream="s", t=3.0),  # 3
    annotate("b", value=0.2, note="boring", t=4.0),  # 4
    annotate("a", note="see r1", t=5.0),  # 5
    unpin("a", t=6.0),  # 6
    w("c", 10, stream="u", t=0.5),  # 7
    pin("c", t=0.5),  # 8
]


def test_feedback_from_trace_by_hand():
    tr = trace(*HAND)
    got = feedback_from_trace(tr)

    def fb(e, t, item, action, stream="s", value=None, note=None, author=None):
        return Feedback("trace", tr.sha256, stream, e, t, item, action, value, note, author)

    assert got == [
        fb(2, 2.0, "a", "keep", author="ann"),
        fb(4, 4.0, "b", "value", value=0.2, note="boring"),
        fb(5, 5.0, "a", "value", note="see r1"),
        fb(6, 6.0, "a", "drop"),
        fb(8, 0.5, "c", "keep", stream="u"),
    ]
    assert feedback_from_trace(trace(w("x", 5), rq("q", "x"))) == []


def _replay(tr, policy, budget):
    return simulate(tr, policy, budget, engine="reference", progress=False)


def _same_replay(a, b) -> None:
    assert a.need_hit.tolist() == b.need_hit.tolist()
    assert a.context_tokens.tolist() == b.context_tokens.tolist()
    assert a.pinned_tokens.tolist() == b.pinned_tokens.tolist()
    assert a.move_kind.tolist() == b.move_kind.tolist()
    assert a.move_item.tolist() == b.move_item.tolist()


def test_with_feedback_replays_like_the_hand_made_trace_with_those_pins():
    base = [w("a", 60, "llm_thought", stream="s", t=0.0), w("b", 60, "user_input", stream="s",
            t=1.0), rq("r1", "b", stream="s", t=2.0), w("c", 60, "tool_result", stream="s",
            t=3.0), rq("r2", "a", "c", stream="s", t=4.0), w("d", 60, stream="s", t=5.0),
            rq("r3", "b", stream="s", t=6.0)]  # fmt: skip
    tr = trace(*base)

    def fb(e, item, action, **kw):
        return Feedback("simulated", tr.sha256, "s", e, float(tr.ev_t[e]), item, action, **kw)

    rows = [fb(0, "a", "keep"), fb(4, "a", "drop"), fb(4, "c", "value", value=0.9),
            fb(1, "b", "value", note="a note only")]  # fmt: skip
    hand = [base[0], pin("a", stream="s"), base[1], annotate("b", note="a note only"),
            *base[2:5], unpin("a"), annotate("c", value=0.9), *base[5:]]  # fmt: skip
    got, want = with_feedback(tr, rows), trace_from_events(hand)
    assert got.ev_kind.tolist() == want.ev_kind.tolist()
    assert got.ev_ref.tolist() == want.ev_ref.tolist()
    assert got.ev_t.tolist() == want.ev_t.tolist()  # the feedback takes its stream's clock
    assert sorted(got.annotations.values(), key=str) == sorted(want.annotations.values(), key=str)
    assert got.sha256 != tr.sha256  # a different trace, a different hash
    assert got.event_meta[1] == {"source": "simulated"}
    for make in (LRU, RuleScorer):
        for budget in (60, 120, 180):
            _same_replay(_replay(got, make(), budget), _replay(want, make(), budget))
    # the pin matters: at 120 tokens LRU evicts a for c (a was used least recently) unless
    # it is pinned, and r2 needs it
    assert _replay(got, LRU(), 120).need_hit.tolist() != _replay(tr, LRU(), 120).need_hit.tolist()


def test_with_feedback_refuses_rows_that_do_not_fit_the_trace():
    tr = trace(w("a", 5, stream="s", t=0), w("b", 5, stream="s", t=1), w("z", 5, stream="u"))

    def fb(**kw):
        return Feedback(**{"source": "person", "trace_sha256": tr.sha256, "stream": "s",
                           "event_index": 1, "t": 1.0, "item_id": "a", "action": "keep", **kw})  # fmt: skip

    assert with_feedback(tr, [fb()]).n_events == 4
    cases = [("trace_sha256", fb(trace_sha256=SHA_A)), ("event_index", fb(event_index=3)),
             ("item_id", fb(item_id="nope")), ("event_index", fb(item_id="b", event_index=0)),
             ("stream", fb(stream="u"))]  # fmt: skip
    for field, bad in cases:
        with pytest.raises(FeedbackError, match=f'feedback row 0: field "{field}"'):
            with_feedback(tr, [bad])


def test_trace_events_round_trip_by_hand():
    tr = trace(*HAND)
    again = trace_from_events(trace_events(tr))
    _same_columns(tr, again)
    header = [{"event": "header", "version": 1, "name": "x"}, *HAND]
    assert trace_events(trace(*header))[0] == header[0]


def _same_columns(a, b) -> None:
    for f in fields(a):
        if f.name in ("source", "sha256"):
            continue
        x, y = getattr(a, f.name), getattr(b, f.name)
        if isinstance(x, np.ndarray):
            assert x.dtype == y.dtype and x.tolist() == y.tolist(), f.name
        else:
            assert x == y, f.name


@settings(max_examples=60, deadline=None, derandomize=True)
@given(events=traces())
def test_trace_events_round_trip(events):
    tr = trace_from_events(events)
    _same_columns(tr, trace_from_events(trace_events(tr)))
    # and feedback read from a trace, put back into the same trace, changes no replay
    doubled = with_feedback(tr, feedback_from_trace(tr))
    for budget in (40, 250):
        _same_replay(_replay(doubled, LRU(), budget), _replay(tr, LRU(), budget))


# ------------------------------------------------------------------------------ CLI
@pytest.mark.slow  # kept out of the default run (6-minute budget); make test-all runs it
def test_cli_import_simulate_show(tmp_path, capsys):
    path = tmp_path / "t.jsonl"
    write_trace(path, HAND)
    store = tmp_path / "fb.db"
    assert feedback_main(["import-trace", str(path), f"store={store}"]) == 0
    assert "added 5 rows" in capsys.readouterr().out
    argv = ["simulate", str(path), f"store={store}", "simulated_user.recall=1.0",
            "simulated_user.interventions_per_100_events=100", "simulated_user.precision=1.0"]  # fmt: skip
    assert feedback_main(argv) == 0
    assert "simulated rows" in capsys.readouterr().out
    rows = FeedbackStore(store).rows()
    assert [r.source for r in rows].count("trace") == 5 and len(rows) > 5
    assert feedback_main(["show", f"store={store}", "source=trace", "limit=2"]) == 0
    out = capsys.readouterr().out
    assert "5 rows about 1 traces" in out and "... 3 more (limit=2)" in out
    # apply: the written trace is with_feedback's, hash included
    new = tmp_path / "with.jsonl.gz"
    assert feedback_main(["apply", str(path), f"store={store}", f"out={new}",
                          "source=simulated"]) == 0  # fmt: skip
    tr = load_trace(path)
    want = with_feedback(tr, FeedbackStore(store).rows(trace_sha256=tr.sha256, source="simulated"))
    got = load_trace(new)
    assert got.sha256 == want.sha256 and got.n_events == want.n_events > tr.n_events


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["bogus"], "unknown feedback command 'bogus'"),
        (["simulate", "store=X"], "trace=PATH is required"),
        (["show"], "store=PATH is required"),
        (["import-trace", "nope.jsonl", "store=X"], "trace nope.jsonl: no such file"),
        (["simulate", "TRACE", "store=X", "simulated_user.recall=2"], "recall must be in [0, 1]"),
        (["simulate", "TRACE", "store=X", "simulated_user.nope=1"], "Key 'nope' not in"),
        (["show", "store=X", "source=robot"], "source must be one of"),
        (["import-trace", "TRACE", "store=JUNK"], "not a feedback store"),
        (["import-trace", "TRACE", "store=missing/dir/fb.db"], "does not exist"),
        (["import-trace", "a.jsonl", "b.jsonl", "store=X"], "give one TRACE"),
        (["apply", "TRACE", "store=X"], "out=PATH is required"),
        (["apply", "TRACE", "store=X", "out=TRACE"], "is the input trace"),
        (["apply", "TRACE", "store=NOPE", "out=o.jsonl"], "store NOPE: no such file"),
    ],
)
def test_cli_bad_input_exits_2_with_one_error_line(tmp_path, monkeypatch, capsys, argv, message):
    monkeypatch.chdir(tmp_path)
    write_trace(tmp_path / "TRACE", HAND)
    (tmp_path / "JUNK").write_bytes(b"not sqlite, not at all" * 50)
    FeedbackStore(tmp_path / "X")
    assert feedback_main(argv) == 2
    out, err = capsys.readouterr()
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and message in lines[0], err
    assert len(FeedbackStore(tmp_path / "X")) == 0


def test_a_malformed_trace_is_an_error_line_naming_file_and_line(tmp_path, capsys):
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"event": "write", "id": "a", "tokens": 3, "type": "llm_thought"}\n'
                   '{"event": "pin", "target": "zz"}\n')  # fmt: skip
    assert feedback_main(["import-trace", str(bad), f"store={tmp_path / 'fb.db'}"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: ") and f"{bad}:2:" in err and "zz" in err


def test_rows_are_replaceable_dataclasses():
    r = row()
    assert replace(r, action="drop").action == "drop"
    with pytest.raises(ValueError, match='field "action"'):
        replace(r, action="nope")
