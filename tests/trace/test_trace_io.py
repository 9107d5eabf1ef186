"""Trace parsing and validation: named error cases and property-based round trips."""

from __future__ import annotations

import gzip
import json
import string

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from memlens.trace.io import TraceError, load_trace, trace_from_events, write_trace
from memlens.trace.model import ITEM_TYPES, REQUEST, WRITE

GOOD = [
    {"event": "write", "id": "m1", "tokens": 5, "type": "user_input", "stream": "s1", "t": 0},
    {"event": "write", "id": "m2", "tokens": 7, "type": "tool_result", "stream": "s1", "t": 1},
    {"event": "request", "id": "q1", "needs": ["m1"], "stream": "s1", "t": 2},
]


def write_lines(path, lines):
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return path


def dumps(objs):
    return [json.dumps(o) for o in objs]


def error_of(tmp_path, lines, name="trace.jsonl") -> TraceError:
    path = write_lines(tmp_path / name, lines)
    with pytest.raises(TraceError) as info:
        load_trace(path)
    return info.value


def test_valid_trace_loads(tmp_path):
    tr = load_trace(write_lines(tmp_path / "ok.jsonl", dumps(GOOD)))
    assert tr.n_events == 3 and tr.n_items == 2 and tr.n_requests == 1
    assert tr.item_id == ["m1", "m2"]
    assert tr.item_tokens.tolist() == [5, 7]
    assert [ITEM_TYPES[k] for k in tr.item_type] == ["user_input", "tool_result"]
    assert tr.needs.tolist() == [0]
    assert tr.ev_kind.tolist() == [WRITE, WRITE, REQUEST]


def test_example_error_message_from_the_issue(tmp_path):
    lines = (
        dumps(GOOD[:2])
        + [""] * 38
        + dumps(
            [
                {"event": "write", "id": "m3", "tokens": 1, "type": "user_input", "stream": "s1"},
                {"event": "request", "id": "q9", "needs": ["m7"], "stream": "s1"},
            ]
        )
    )
    err = error_of(tmp_path, lines)
    assert str(err) == (
        f'{tmp_path / "trace.jsonl"}:42: request needs "m7", which no earlier write in stream '
        '"s1" defines'
    )
    assert err.line == 42 and err.field == "needs"


@pytest.mark.parametrize(
    "bad, line, field, fragment",
    [
        ('{"event": "write", "id": "a", "tokens": 3', 2, None, "malformed JSON"),
        ("[1, 2]", 2, None, "must be a JSON object"),
        ('{"id": "a", "tokens": 3, "type": "user_input"}', 2, "event", 'missing field "event"'),
        ('{"event": "delete", "id": "a"}', 2, "event", "unknown event"),
        ('{"event": "write", "tokens": 3, "type": "user_input"}', 2, "id", 'missing field "id"'),
        ('{"event": "write", "id": "a", "type": "user_input"}', 2, "tokens", "missing"),
        (
            '{"event": "write", "id": "a", "tokens": 0, "type": "user_input"}',
            2,
            "tokens",
            "positive integer",
        ),
        (
            '{"event": "write", "id": "a", "tokens": -4, "type": "user_input"}',
            2,
            "tokens",
            "positive integer",
        ),
        (
            '{"event": "write", "id": "a", "tokens": "9", "type": "user_input"}',
            2,
            "tokens",
            "positive integer",
        ),
        (
            '{"event": "write", "id": "a", "tokens": true, "type": "user_input"}',
            2,
            "tokens",
            "positive integer",
        ),
        (
            '{"event": "write", "id": "a", "tokens": 2.5, "type": "user_input"}',
            2,
            "tokens",
            "positive integer",
        ),
        ('{"event": "write", "id": "a", "tokens": 3, "type": "memo"}', 2, "type", "must be one of"),
        (
            '{"event": "write", "id": "a", "tokens": 3, "type": "user_input", "stream": 4}',
            2,
            "stream",
            "must be a string",
        ),
        (
            '{"event": "write", "id": "a", "tokens": 3, "type": "user_input", "meta": []}',
            2,
            "meta",
            "must be an object",
        ),
        (
            '{"event": "write", "id": "a", "tokens": 3, "type": "user_input", "cost": "x"}',
            2,
            "cost",
            "must be a number",
        ),
        (
            '{"event": "write", "id": "a", "tokens": 3, "type": "user_input", "text": 5}',
            2,
            "text",
            "must be a string",
        ),
        (
            '{"event": "write", "id": "m1", "tokens": 3, "type": "user_input"}',
            2,
            "id",
            'duplicate id "m1"',
        ),
        ('{"event": "request", "id": "m1", "needs": []}', 2, "id", 'duplicate id "m1"'),
        ('{"event": "request", "id": "q", "needs": "m1"}', 2, "needs", "must be a list"),
        ('{"event": "request", "id": "q"}', 2, "needs", 'missing field "needs"'),
        ('{"event": "request", "id": "q", "needs": [3]}', 2, "needs", "must be strings"),
        (
            '{"event": "request", "id": "q", "needs": ["zz"], "stream": "s1"}',
            2,
            "needs",
            'needs "zz", which no earlier write in stream "s1"',
        ),
        (
            '{"event": "request", "id": "q", "needs": ["m1"], "stream": "other"}',
            2,
            "needs",
            'which no earlier write in stream "other"',
        ),
        ('{"event": "pin", "target": "nope"}', 2, "target", "no earlier write"),
        ('{"event": "pin"}', 2, "target", 'missing field "target"'),
        ('{"event": "pin", "target": "m1", "stream": "s2"}', 2, "stream", "was written in"),
        ('{"event": "annotate", "target": "m1"}', 2, "value", '"value" and/or "note"'),
        ('{"event": "annotate", "target": "m1", "value": 1.5}', 2, "value", "in [0, 1]"),
        (
            '{"event": "write", "id": "b", "tokens": 3, "type": "user_input", "stream": "s1", '
            '"t": -1}',
            2,
            "t",
            "time goes backwards",
        ),
        (
            '{"event": "write", "id": "b", "tokens": 3, "type": "user_input", "t": "noon"}',
            2,
            "t",
            "finite number",
        ),
        ('{"event": "header", "version": 1}', 2, "event", "only be the first line"),
    ],
)
def test_named_errors(tmp_path, bad, line, field, fragment):
    first = json.dumps(
        {"event": "write", "id": "m1", "tokens": 5, "type": "user_input", "stream": "s1", "t": 0}
    )
    err = error_of(tmp_path, [first, bad])
    assert err.line == line
    assert err.field == field
    assert fragment in str(err)
    assert str(err).startswith(f"{tmp_path / 'trace.jsonl'}:{line}: ")


def test_need_pointing_forward_is_rejected(tmp_path):
    lines = dumps(
        [
            {"event": "request", "id": "q", "needs": ["m1"]},
            {"event": "write", "id": "m1", "tokens": 5, "type": "user_input"},
        ]
    )
    err = error_of(tmp_path, lines)
    assert err.line == 1 and err.field == "needs"


def test_need_pointing_at_a_request_is_rejected(tmp_path):
    lines = dumps(GOOD + [{"event": "request", "id": "q2", "needs": ["q1"], "stream": "s1"}])
    assert error_of(tmp_path, lines).line == 4


def test_missing_file_and_bad_gzip(tmp_path):
    with pytest.raises(TraceError, match="no such trace file"):
        load_trace(tmp_path / "absent.jsonl")
    bad = tmp_path / "bad.jsonl.gz"
    bad.write_bytes(b"not gzip at all")
    with pytest.raises(TraceError, match="cannot read trace"):
        load_trace(bad)


def test_defaults_unknown_fields_and_repeated_needs(tmp_path):
    lines = dumps(
        [
            {
                "event": "write",
                "id": "a",
                "tokens": 2,
                "type": "agent_state",
                "colour": "red",
                "meta": {"k": 1},
            },
            {"event": "request", "id": "q", "needs": ["a", "a"], "t": 3.5, "extra": [1]},
            {"event": "annotate", "target": "a", "note": "keep", "who": "ann"},
        ]
    )
    tr = load_trace(write_lines(tmp_path / "d.jsonl", lines))
    assert tr.stream_names == [""]
    assert tr.item_meta[0] == {"k": 1, "colour": "red"}
    assert tr.req_meta[0] == {"extra": [1]}
    assert tr.needs.tolist() == [0]  # a repeated id counts once
    assert tr.item_t[0] == 0.0 and tr.req_t[0] == 3.5
    assert tr.ev_t[2] == 3.5  # an event without t inherits the stream's last t
    assert tr.annotations[2] == (None, "keep")
    assert tr.event_meta[2] == {"who": "ann"}


TARGET_EVENTS = [
    {"event": "pin", "target": "m1"},
    {"event": "unpin", "target": "m1"},
    {"event": "annotate", "target": "m1", "value": 0.5},
]


@pytest.mark.parametrize("event", TARGET_EVENTS, ids=lambda e: e["event"])
def test_pin_unpin_annotate_take_t_and_their_targets_stream(tmp_path, event):
    lines = dumps([GOOD[0], {"event": "write", "id": "o", "tokens": 1, "type": "user_input",
                             "stream": "s2", "t": 90}, {**event, "stream": "s1", "t": 4.5},
                   {**event, "t": 6}, event])  # fmt: skip
    tr = load_trace(write_lines(tmp_path / "t.jsonl", lines))
    assert [tr.stream_names[s] for s in tr.ev_stream[2:]] == ["s1", "s1", "s1"]
    assert tr.ev_t[2:].tolist() == [4.5, 6.0, 6.0]  # no t: the target stream's last t, not 90
    assert tr.event_meta == {}  # stream and t are fields of these events, not unknown extras


@pytest.mark.parametrize("event", TARGET_EVENTS, ids=lambda e: e["event"])
def test_pin_unpin_annotate_stream_must_be_the_targets(tmp_path, event):
    err = error_of(tmp_path, dumps([GOOD[0], {**event, "stream": "s2"}]))
    assert (err.line, err.field) == (2, "stream")
    assert str(err) == (f'{tmp_path / "trace.jsonl"}:2: {event["event"]} of "m1" says stream '
                        f"'s2', but \"m1\" was written in stream \"s1\"")  # fmt: skip
    err = error_of(tmp_path, dumps([GOOD[0], {**event, "t": -1}]))
    assert (err.line, err.field) == (2, "t") and "time goes backwards" in str(err)


def test_gzip_round_trip_is_byte_stable(tmp_path):
    a, b = tmp_path / "a.jsonl.gz", tmp_path / "b.jsonl.gz"
    write_trace(a, GOOD, header={"generator": "test"})
    write_trace(b, GOOD, header={"generator": "test"})
    assert a.read_bytes() == b.read_bytes()
    tr = load_trace(a)
    assert tr.header["generator"] == "test" and tr.n_events == 3
    assert gzip.decompress(a.read_bytes()).count(b"\n") == 4


def test_failed_write_leaves_previous_file_intact(tmp_path):
    path = tmp_path / "t.jsonl"
    write_trace(path, GOOD)
    before = path.read_bytes()

    def boom():
        yield GOOD[0]
        raise RuntimeError("converter crashed")

    with pytest.raises(RuntimeError):
        write_trace(path, boom())
    assert path.read_bytes() == before
    assert [p.name for p in tmp_path.iterdir()] == ["t.jsonl"]


# ----------------------------------------------------------------- properties
ids = st.text(alphabet=string.ascii_letters + string.digits + "-_:", min_size=1, max_size=6)


@st.composite
def valid_traces(draw):
    """Random valid event lists: writes, requests, pins, annotations over 1-3 streams."""
    n = draw(st.integers(1, 40))
    streams = draw(st.lists(st.sampled_from(["", "a", "b"]), min_size=1, max_size=3, unique=True))
    used: set[str] = set()
    written: dict[str, list[str]] = {s: [] for s in streams}
    clock = {s: 0.0 for s in streams}
    events = []
    for _ in range(n):
        s = draw(st.sampled_from(streams))
        clock[s] += draw(st.floats(0, 10, allow_nan=False))
        kind = draw(st.sampled_from(["write", "write", "request", "pin", "annotate"]))
        if kind == "write" or not written[s]:
            ident = draw(ids.filter(lambda x: x not in used))
            used.add(ident)
            written[s].append(ident)
            events.append(
                {
                    "event": "write",
                    "id": ident,
                    "stream": s,
                    "t": clock[s],
                    "tokens": draw(st.integers(1, 10_000)),
                    "type": draw(st.sampled_from(ITEM_TYPES)),
                    "text": draw(st.text(max_size=20)),
                }
            )
        elif kind == "request":
            ident = draw(ids.filter(lambda x: x not in used))
            used.add(ident)
            needs = draw(st.lists(st.sampled_from(written[s]), max_size=5))
            events.append(
                {"event": "request", "id": ident, "stream": s, "t": clock[s], "needs": needs}
            )
        elif kind == "pin":
            events.append(
                {"event": "pin", "target": draw(st.sampled_from(written[s])), "t": clock[s]}
            )
        else:
            events.append(
                {
                    "event": "annotate",
                    "target": draw(st.sampled_from(written[s])),
                    "value": draw(st.floats(0, 1)),
                    "t": clock[s],
                }
            )
    return events


@given(valid_traces())
def test_round_trip_preserves_everything(tmp_path_factory, events):
    path = tmp_path_factory.mktemp("rt") / "t.jsonl.gz"
    write_trace(path, events)
    tr = load_trace(path)
    assert tr.n_events == len(events)
    writes = [e for e in events if e["event"] == "write"]
    requests = [e for e in events if e["event"] == "request"]
    assert tr.item_id == [e["id"] for e in writes]
    assert tr.item_tokens.tolist() == [e["tokens"] for e in writes]
    assert tr.item_text == [e["text"] for e in writes]
    assert tr.req_id == [e["id"] for e in requests]
    for r, e in enumerate(requests):
        expected = [tr.item_index[i] for i in dict.fromkeys(e["needs"])]
        assert tr.needs_of(r).tolist() == expected
    assert tr.ev_t.tolist() == [e["t"] for e in events]
    # derived columns agree with a direct recount
    counts = np.zeros(tr.n_items, dtype=np.int64)
    for e in requests:
        for i in dict.fromkeys(e["needs"]):
            counts[tr.item_index[i]] += 1
    assert tr.item_n_uses.tolist() == counts.tolist()


@given(valid_traces(), st.data())
def test_any_corrupted_line_is_reported_at_that_line(tmp_path_factory, events, data):
    k = data.draw(st.integers(0, len(events) - 1))
    corruption = data.draw(st.sampled_from(["json", "tokens", "event", "needs"]))
    lines = [json.dumps(e) for e in events]
    bad = dict(events[k])
    if corruption == "json":
        lines[k] = lines[k][:-1]
    elif corruption == "tokens" and bad["event"] == "write":
        bad["tokens"] = data.draw(st.sampled_from([0, -1, "3", None, 1.5]))
        lines[k] = json.dumps(bad)
    elif corruption == "needs" and bad["event"] == "request":
        bad["needs"] = ["never-written-id!"]
        lines[k] = json.dumps(bad)
    else:
        bad["event"] = "explode"
        lines[k] = json.dumps(bad)
    path = tmp_path_factory.mktemp("bad") / "t.jsonl"
    write_lines(path, lines)
    with pytest.raises(TraceError) as info:
        load_trace(path)
    assert info.value.line == k + 1
    assert str(info.value).startswith(f"{path}:{k + 1}: ")


@given(valid_traces())
def test_file_and_in_memory_builders_agree(tmp_path_factory, events):
    path = tmp_path_factory.mktemp("eq") / "t.jsonl"
    write_trace(path, events)
    a, b = load_trace(path), trace_from_events(events)
    for name in ("ev_kind", "ev_stream", "ev_ref", "item_tokens", "needs", "needs_ptr"):
        assert np.array_equal(getattr(a, name), getattr(b, name))


# ------------------------------------------------------- compact columns, exactly
@given(valid_traces(), st.booleans())
def test_loaded_columns_read_like_the_lists_they_replace(tmp_path_factory, events, spill):
    from memlens.trace import limits

    path = tmp_path_factory.mktemp("pk") / "t.jsonl"
    write_trace(path, events)
    saved = limits.SPILL_BYTES
    limits.SPILL_BYTES = 0 if spill else saved  # texts and metas in temporary files
    try:
        tr = load_trace(path)
    finally:
        limits.SPILL_BYTES = saved
    writes = [e for e in events if e["event"] == "write"]
    requests = [e for e in events if e["event"] == "request"]
    assert list(tr.item_text) == [e["text"] for e in writes] == tr.item_text
    assert tr.item_task == [""] * len(writes) and tr.item_meta == [{}] * len(writes)
    assert [tr.req_id[r] for r in range(-len(requests), 0)] == [e["id"] for e in requests]
    assert tr.req_meta == [{} for _ in requests] and tr.req_text == [""] * len(requests)
    assert tr.item_index == {e["id"]: i for i, e in enumerate(writes)}


@given(valid_traces())
def test_to_arrays_and_back_is_the_same_trace(events):
    from dataclasses import fields

    from memlens.trace.model import Trace

    tr = trace_from_events(events, source="a")
    back = Trace.from_arrays(*tr.to_arrays(), "a")
    for f in fields(Trace):
        x, y = getattr(tr, f.name), getattr(back, f.name)
        if isinstance(x, np.ndarray):
            assert x.dtype == y.dtype and np.array_equal(x, y), f.name
        else:
            assert x == y, f.name


def test_meta_and_unknown_fields_survive_packing(tmp_path):
    meta = {"role": "key-output", "nested": {"list": [1, 2.5, None, True], "s": "é"}}
    lines = dumps([{**GOOD[0], "meta": meta, "colour": "red"}, GOOD[1],
                   {**GOOD[2], "meta": {"task": "t"}}])  # fmt: skip
    tr = load_trace(write_lines(tmp_path / "m.jsonl", lines))
    assert tr.item_meta[0] == {**meta, "colour": "red"} and tr.item_meta[1] == {}
    assert tr.req_meta == [{"task": "t"}]
    assert tr.item_meta[0] is not tr.item_meta[0]  # decoded on access: mutation cannot leak
