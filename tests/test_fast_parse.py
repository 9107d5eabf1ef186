"""The bulk trace parser (memlens.fast_parse) against the exact line-by-line one.

The property that matters: whatever a file holds, ``load_trace`` (bulk first, exact when the
bulk parser gives up) gives the same result as ``load_trace_exact``: the same Trace (every
column, hash, annotations) or the same TraceError (file, line, field, message); and the bulk
parser itself never accepts a file the exact one rejects.
"""

from __future__ import annotations

import gc
import gzip
import json
import subprocess
import tempfile
import threading
from dataclasses import fields
from pathlib import Path

import msgspec
import numpy as np
import orjson
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st
from memlens.datasets.archetypes import GENERATORS, generate

from memlens import fast_parse
from memlens.fast_parse import Unsupported, load_fast, parse_fast
from memlens.trace import Trace
from memlens.trace_io import (
    TraceError,
    load_trace,
    load_trace_exact,
    write_trace,
)

REPO = Path(__file__).resolve().parents[1]


def assert_same_trace(a: Trace, b: Trace) -> None:
    """Every field equal; numeric columns also of the same dtype, and the same bytes."""
    for f in fields(Trace):
        x, y = getattr(a, f.name), getattr(b, f.name)
        if isinstance(x, np.ndarray) or isinstance(y, np.ndarray):
            assert isinstance(x, np.ndarray) and isinstance(y, np.ndarray), f.name
            assert x.dtype == y.dtype, f.name
            assert x.shape == y.shape and x.tobytes() == y.tobytes(), f.name  # bit for bit
        else:
            assert x == y, f.name


def outcome(load, path):
    try:
        return "trace", load(path)
    except TraceError as err:
        return "error", (err.path, err.line, err.field, err.message)


def check_same(path) -> Trace | None:
    """load_trace == load_trace_exact, and the bulk parser accepts only what the exact one
    accepts, building the same trace, with its typed (msgspec) decoding and without it (every
    block through orjson).  The bulk trace (None if it gave up)."""
    exact = outcome(load_trace_exact, path)
    both = outcome(load_trace, path)
    assert both[0] == exact[0]
    if exact[0] == "error":
        assert both[1] == exact[1]
    else:
        assert_same_trace(both[1], exact[1])
    untyped = bulk_untyped(path)
    try:
        fast = parse_fast(path)
    except fast_parse._GIVE_UP:
        return None
    assert exact[0] == "trace", f"the bulk parser accepted a trace rejected with {exact[1]}"
    assert_same_trace(fast, exact[1])
    if untyped is not None:
        assert_same_trace(untyped, exact[1])
    return fast


def bulk_untyped(path) -> Trace | None:
    """The bulk parser's trace with every block decoded by orjson (None if it gave up)."""
    original = fast_parse._typed_events
    fast_parse._typed_events = lambda text: None
    try:
        return parse_fast(path)
    except fast_parse._GIVE_UP:
        return None
    finally:
        fast_parse._typed_events = original


class TypedBlocks:
    """Counts the blocks the typed (msgspec) decoding took and left."""

    def __init__(self, monkeypatch):
        self.taken = self.left = 0
        original = fast_parse._typed_events

        def spy(text):
            events = original(text)
            self.taken += events is not None
            self.left += events is None
            return events

        monkeypatch.setattr(fast_parse, "_typed_events", spy)


# ------------------------------------------------------------------ real and generated traces
def bundled_traces() -> list[str]:
    out = subprocess.run(["git", "ls-files", "datasets"], cwd=REPO, capture_output=True,
                         text=True, check=True).stdout.split()  # fmt: skip
    return [p for p in out if p.endswith((".jsonl", ".jsonl.gz"))]


@pytest.mark.parametrize("name", bundled_traces())
def test_bundled_traces_load_identically(name):
    fast = check_same(REPO / name)
    version = load_trace_exact(REPO / name).header.get("version")
    if version != "1.1":  # lists of alternatives in needs are left to the exact parser
        assert fast is not None


@pytest.mark.parametrize("archetype", sorted(GENERATORS))
@pytest.mark.parametrize("suffix", [".jsonl", ".jsonl.gz"])
def test_generated_traces_load_identically(tmp_path, archetype, suffix, monkeypatch):
    path = tmp_path / f"{archetype}{suffix}"
    events = generate(archetype, streams=3, events_per_stream=400, seed=3)
    write_trace(path, events, header={"generator": archetype})
    monkeypatch.setattr(fast_parse, "BLOCK_BYTES", 4096)  # several blocks
    blocks = TypedBlocks(monkeypatch)
    assert check_same(path) is not None
    assert blocks.taken > 1 and blocks.left == 0  # all decoded the typed way


def test_lines_across_blocks_and_no_final_newline(tmp_path, monkeypatch):
    monkeypatch.setattr(fast_parse, "BLOCK_BYTES", 97)  # every line crosses a block boundary
    path = tmp_path / "t.jsonl"
    write_trace(path, generate("agent", streams=2, events_per_stream=150, seed=1), header={})
    whole = check_same(path)
    path.write_bytes(path.read_bytes().rstrip(b"\n"))
    cut = check_same(path)
    assert whole is not None and cut is not None
    assert cut.n_events == whole.n_events >= 300 and cut.sha256 == whole.sha256


def test_empty_and_header_only_files(tmp_path):
    (tmp_path / "empty.jsonl").write_bytes(b"")
    (tmp_path / "header.jsonl").write_bytes(b'{"event":"header","version":"1.1"}\n')
    for name in ("empty.jsonl", "header.jsonl"):
        trace = check_same(tmp_path / name)
        assert trace is not None and trace.n_events == 0


def test_valid_forms_left_to_the_exact_parser(tmp_path):
    """Blank lines, \\r\\n endings and alternatives are valid, and loaded the exact way."""
    lines = [b'{"event":"write","id":"a","tokens":1,"type":"user_input"}',
             b'{"event":"request","id":"r","needs":["a"]}']  # fmt: skip
    for name, text in (("blank", b"\n\n".join(lines)), ("crlf", b"\r\n".join(lines))):
        (tmp_path / name).write_bytes(text + b"\n")
        assert check_same(tmp_path / name) is None
        assert load_trace(tmp_path / name).n_events == 2


def test_long_line_gives_the_exact_error(tmp_path):
    path = tmp_path / "long.jsonl"
    path.write_bytes(b'{"event":"write","id":"a","tokens":1,"type":"user_input","text":"'
                     + b"x" * 300 + b'"}\n')  # fmt: skip
    with pytest.raises(TraceError) as exact:
        load_trace_exact(path, max_line_bytes=100)
    with pytest.raises(TraceError) as both:
        load_trace(path, max_line_bytes=100)
    assert (both.value.line, str(both.value)) == (exact.value.line, str(exact.value)) == (
        1, str(exact.value))  # fmt: skip
    assert load_fast(path, max_line_bytes=100) is None
    with pytest.raises(ValueError, match="max_line_bytes"):
        load_trace(path, max_line_bytes=0)


def test_corrupt_gzip_gives_the_exact_error(tmp_path):
    path = tmp_path / "t.jsonl.gz"
    write_trace(path, generate("agent", streams=2, events_per_stream=2000, seed=1))
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])
    assert outcome(load_trace, path) == outcome(load_trace_exact, path)
    assert outcome(load_trace, path)[0] == "error"


def test_gc_state_restored_and_reader_thread_ended(tmp_path):
    path = tmp_path / "bad.jsonl"
    path.write_bytes(b'{"event":"write"}\n' * 5000)
    before = threading.active_count()
    assert gc.isenabled()
    assert load_fast(path) is None
    assert gc.isenabled() and threading.active_count() == before
    gc.disable()
    try:
        assert load_fast(tmp_path / "missing.jsonl") is None
        assert not gc.isenabled()
    finally:
        gc.enable()


# ------------------------------------------------------------ differential, random traces
ITEM_TYPES = ["user_input", "llm_thought", "tool_result", "agent_state"]
JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**70), 2**70) | st.floats(allow_nan=False)
    | st.text(max_size=4),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=3), inner,
                                                                max_size=3),
    max_leaves=6,
)  # fmt: skip
TEXT = st.text(alphabet=st.characters(blacklist_categories=["Cs"]), max_size=6)


@st.composite
def valid_events(draw) -> list[dict]:
    """A valid trace: writes, requests (needs from earlier writes of the stream, sometimes
    listed twice), pins, unpins, annotations; optional fields present or not."""
    events: list[dict] = []
    writes: dict[str, list[str]] = {}
    last_t: dict[str, float] = {}
    for n in range(draw(st.integers(0, 14))):
        stream = draw(st.sampled_from(["s0", "s1", "é"]))
        t = last_t.get(stream, -1.0) + draw(st.sampled_from([0, 0.5, 3]))
        kind = draw(st.sampled_from(["write", "write", "request", "pin", "annotate"]))
        mine = writes.get(stream, [])
        ev: dict = {"event": kind}
        if kind == "write" or not mine:
            ev.update(event="write", id=f"w{n}", tokens=draw(st.sampled_from([1, 7, 2.0])),
                      type=draw(st.sampled_from(ITEM_TYPES)))  # fmt: skip
            for key, value in (("text", TEXT), ("task", TEXT), ("session", TEXT),
                               ("cost", st.floats(0, 5))):  # fmt: skip
                if draw(st.booleans()):
                    ev[key] = draw(value)
            writes.setdefault(stream, []).append(ev["id"])
            kind = "write"
        elif kind == "request":
            ev.update(id=f"r{n}", needs=draw(st.lists(st.sampled_from(mine), max_size=4)))
        else:
            ev["target"] = draw(st.sampled_from(mine))
            if kind == "annotate":
                ev["value"] = draw(st.floats(0, 1))
        if kind in ("write", "request") or draw(st.booleans()):
            ev["stream"] = stream
        if draw(st.booleans()):
            ev["t"] = last_t[stream] = t
        if draw(st.booleans()):
            ev["meta"] = draw(st.dictionaries(st.text(max_size=3), JSON_VALUES, max_size=2))
        if draw(st.integers(0, 5)) == 0:
            ev["extra"] = draw(JSON_VALUES)
        events.append(ev)
    return events


FIELDS = ["event", "id", "tokens", "type", "stream", "t", "text", "cost", "task", "session",
          "meta", "needs", "target", "value", "note"]  # fmt: skip


@st.composite
def corrupted(draw, events: list[dict]) -> list[dict]:
    """``events`` with one field set to a random value, removed, or copied from another
    event (a duplicate id, a need or target from elsewhere, a time from elsewhere)."""
    events = [dict(ev) for ev in events]
    if not events:
        return events
    ev = draw(st.sampled_from(events))
    key = draw(st.sampled_from(FIELDS))
    how = draw(st.sampled_from(["set", "drop", "copy"]))
    if how == "drop":
        ev.pop(key, None)
    elif how == "copy":
        other = draw(st.sampled_from(events))
        if key in other:
            ev[key] = other[key]
        elif key == "needs":
            ev[key] = [other.get("id", "nope")]
    else:
        ev[key] = draw(JSON_VALUES | st.sampled_from(["write", "request", "pin", "header"]))
    return events


def deep(n: int):
    value: list = []
    for _ in range(n):
        value = [value]
    return value


@st.composite
def trace_bytes(draw) -> bytes:
    events = draw(valid_events())
    if draw(st.booleans()):
        events = draw(corrupted(events))
    if events and draw(st.integers(0, 9)) == 0:  # nesting at and past the limit
        events[-1]["meta"] = {"d": deep(draw(st.sampled_from([61, 62, 63, 64])))}
    ascii_only = draw(st.booleans())
    lines = [json.dumps(ev, ensure_ascii=ascii_only).encode() for ev in events]
    if draw(st.booleans()):
        header = {"event": "header", "version": draw(st.sampled_from([1, "1", "1.1", 2, True]))}
        lines.insert(0, orjson.dumps(header))
    if lines and draw(st.integers(0, 4)) == 0:  # damage one line's bytes
        k = draw(st.integers(0, len(lines) - 1))
        lines[k] = draw(st.sampled_from([lines[k][:-1], lines[k] + b"\r", b"", b"  ",
                                         lines[k] + b" ", b"[1]", b"\xff" + lines[k]]))  # fmt: skip
    if len(lines) > 1 and draw(st.integers(0, 4)) == 0:  # move a line break
        k = draw(st.integers(0, len(lines) - 2))
        cut = draw(st.integers(1, max(1, len(lines[k]) - 1)))
        joint = draw(st.sampled_from([b"", b" ", b","]))
        merged = lines[k] + joint + lines[k + 1]
        lines[k : k + 2] = [merged] if draw(st.booleans()) else [merged[:cut], merged[cut:]]
    text = b"\n".join(lines)
    return text if draw(st.booleans()) else text + b"\n"


@settings(max_examples=max(300, settings().max_examples))
@given(data=trace_bytes(), gz=st.booleans(), block=st.sampled_from([61, 1 << 20]))
def test_bulk_and_exact_parsers_agree(data, gz, block):
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / ("t.jsonl.gz" if gz else "t.jsonl")
        path.write_bytes(gzip.compress(data, mtime=0) if gz else data)
        original = fast_parse.BLOCK_BYTES
        fast_parse.BLOCK_BYTES = block  # 61: lines cross block boundaries; else one block
        try:
            check_same(path)
        finally:
            fast_parse.BLOCK_BYTES = original


@given(events=valid_events())
def test_valid_traces_take_the_bulk_path(events):
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "t.jsonl"
        try:
            path.write_bytes(b"".join(orjson.dumps(ev) + b"\n" for ev in events))
        except TypeError:  # an integer JSON can hold but orjson cannot write
            try:
                lines = [json.dumps(ev, allow_nan=False).encode() + b"\n" for ev in events]
            except ValueError:  # and an infinity: not valid JSON
                assume(False)
            path.write_bytes(b"".join(lines))
        assert_same_trace(parse_fast(path), load_trace_exact(path))


def test_bulk_parser_gives_up_rather_than_report(tmp_path):
    path = tmp_path / "t.jsonl"
    path.write_bytes(b'{"event":"request","id":"r","needs":["nope"]}\n')
    with pytest.raises(Unsupported):
        parse_fast(path)
    with pytest.raises(TraceError) as info:
        load_trace(path)
    assert (info.value.line, info.value.field) == (1, "needs")


# ------------------------------------------------------------ the typed (msgspec) decoding
W = '{"event":"write","id":"%s","tokens":3,"type":"user_input","stream":"s"%s}'
R = '{"event":"request","id":"%s","needs":["a"],"stream":"s"%s}'


def lines_of(*lines: str) -> bytes:
    return "\n".join(lines).encode() + b"\n"


# name -> (file text, who loads it: "typed" = the bulk parser, every block decoded by msgspec;
# "orjson" = the bulk parser, some block decoded line by line by orjson; "exact" = the bulk
# parser gives up and the exact parser decides: loads it, or names the error)
TYPED_CASES = {
    "plain": (lines_of(W % ("a", ""), R % ("r", "")), "typed"),
    "escaped keys": (lines_of(W % ("a", ',"\\u0074ext":"x"'), '{"\\u0065vent":"pin","target":"a"}'),
                     "typed"),
    "duplicate key, last wins": (lines_of(W % ("a", ',"text":5,"text":"y"')), "orjson"),
    "duplicate event tag": (lines_of(W % ("a", ',"event":"request"')), "exact"),
    "tokens 2.0": (lines_of(W.replace('"tokens":3', '"tokens":2.0') % ("a", "")), "typed"),
    "tokens 2.5": (lines_of(W.replace('"tokens":3', '"tokens":2.5') % ("a", "")), "exact"),
    "tokens true": (lines_of(W.replace('"tokens":3', '"tokens":true') % ("a", "")), "exact"),
    "huge tokens": (lines_of(W.replace('"tokens":3', '"tokens":1' + "0" * 30) % ("a", "")), "exact"),
    "t null": (lines_of(W % ("a", ',"t":null')), "exact"),
    "t -0": (lines_of(W % ("a", ',"t":-0')), "typed"),
    "t -0.0": (lines_of(W % ("a", ',"t":-0.0')), "typed"),
    "t too large": (lines_of(W % ("a", ',"t":1e16')), "exact"),
    "t infinite": (lines_of(W % ("a", ',"t":1e999')), "exact"),
    "cost bool": (lines_of(W % ("a", ',"cost":false')), "exact"),
    "empty id": (lines_of(W % ("", "")), "exact"),
    "meta null": (lines_of(W % ("a", ',"meta":null')), "exact"),
    "meta a list": (lines_of(W % ("a", ',"meta":[1]')), "exact"),
    "meta empty": (lines_of(W % ("a", ',"meta":{}'), R % ("r", ',"meta":{ }')), "typed"),
    "meta not compact": (lines_of(W % ("a", ',"meta":{ "k" : [1, 2.50, 1E2, "\\u00e9"] }')), "typed"),
    "meta duplicate keys": (lines_of(W % ("a", ',"meta":{"k":1,"j":2,"k":3}')), "typed"),
    "meta big integer": (lines_of(W % ("a", ',"meta":{"k":123456789012345678901234567890}')),
                         "typed"),
    "meta bad UTF-8": (b'{"event":"write","id":"a","tokens":3,"type":"user_input",'
                       b'"meta":{"k":"\xff"}}\n', "exact"),
    "meta bad number": (lines_of(W % ("a", ',"meta":{"k":1e999}')), "exact"),
    "meta lone surrogate": (lines_of(W % ("a", ',"meta":{"k":"\\ud800"}')), "exact"),
    "meta 63 deep": (lines_of(W % ("a", ',"meta":{"d":' + "[" * 62 + "]" * 62 + "}")), "typed"),
    "meta 64 deep": (lines_of(W % ("a", ',"meta":{"d":' + "[" * 63 + "]" * 63 + "}")), "exact"),
    "meta very deep": (lines_of(W % ("a", ',"meta":{"d":' + "[" * 50000 + "]" * 50000 + "}")),
                       "exact"),
    "unknown field": (lines_of(W % ("a", ',"extra":[1]'), R % ("r", ',"tokens":4')), "orjson"),
    "alternatives": (lines_of('{"event":"header","version":"1.1"}', W % ("a", ""),
                              '{"event":"request","id":"r","needs":[["a"]],"stream":"s"}'), "exact"),
    "pin, bad skipped field": (b'{"event":"write","id":"a","tokens":3,"type":"user_input"}\n'
                               b'{"event":"pin","target":"a","note":"\xff"}\n', "exact"),
    "pin, wrong stream": (lines_of(W % ("a", ""), '{"event":"pin","target":"a","stream":"z"}'),
                          "exact"),
    "annotate": (lines_of(W % ("a", ""), '{"event":"annotate","target":"a","value":1,"note":"n"}',
                          '{"event":"unpin","target":"a","value":"any"}'), "typed"),
    "annotate value true": (lines_of(W % ("a", ""), '{"event":"annotate","target":"a","value":true}'),
                            "exact"),
    # one value a line: decode_lines alone would read these as the right number of events
    "two on a line, one on two": (lines_of(W % ("a", "") + " " + W % ("b", ""),
                                           '{"event":"write","id":"c","tokens":3,',
                                           '"type":"user_input"}'), "exact"),
    "comma between two": (lines_of(W % ("a", "") + "," + W % ("b", ""), W % ("c", ""),
                                   '{"event":"write","id":"d","tokens":3,"type":"user_input",'
                                   '"meta":{"k":[{}', '{}]}}'), "exact"),
    "line break in a pin's skipped field": (lines_of(W % ("a", "") + " " + W % ("b", ""),
                                                     '{"event":"pin","target":"a","x":[{}',
                                                     '{"event":"pin","target":"a"}]}'), "exact"),
    "line break in a string": (lines_of(W % ("a", ',"text":"x'), 'y"') + lines_of(W % ("b", "")),
                               "exact"),
    "line break in a meta": (lines_of(W % ("a", ',"meta":{"k":{}'), '}') + lines_of(W % ("b", "")),
                             "exact"),
    "blank line": (lines_of(W % ("a", ""), "", W % ("b", "")), "exact"),
    "space at line ends": (lines_of(W % ("a", "") + " ", " " + W % ("b", "")), "orjson"),
    "later header": (lines_of(W % ("a", ""), '{"event":"header","version":1}'), "exact"),
}  # fmt: skip


@pytest.mark.parametrize("name", sorted(TYPED_CASES))
def test_typed_decoding_agrees_with_the_exact_parser(tmp_path, monkeypatch, name):
    """Hand-made lines where msgspec's rules (types, defaults, skipped text, decode_lines'
    stream of values) could part from the exact parser's: same outcome, and each is loaded by
    the path it is meant to take."""
    text, expected = TYPED_CASES[name]
    if not text.startswith(b'{"event":"header"'):  # (the first line is read apart, by orjson)
        text = b'{"event":"header","version":1}\n' + text
    path = tmp_path / "t.jsonl"
    path.write_bytes(text)
    blocks = TypedBlocks(monkeypatch)
    fast = check_same(path)
    assert ("exact" if fast is None else "orjson" if blocks.left else "typed") == expected
    assert blocks.taken + blocks.left > 0


@pytest.mark.parametrize("skipped", ['[1 2]', '{"a" 1}', '[{}\n{}]', '"a\nb"', "tru",
                                     "[1,]", '{"a":1,}', "[}", '"\x01"'])  # fmt: skip
def test_msgspec_checks_the_grammar_of_the_text_it_skips(skipped):
    """What ``_typed_events`` relies on to tell the lines apart: a field msgspec skips (a pin's
    extra field) or keeps as text (``meta``) is still parsed by the JSON grammar."""
    for template in (
        '{"event":"pin","target":"a","x":%s}',
        '{"event":"write","id":"a","tokens":1,"type":"user_input","meta":{"k":%s}}',
    ):
        line = template % skipped
        with pytest.raises(msgspec.DecodeError):
            fast_parse._DECODER.decode(line.encode())


def test_non_canonical_metas_stored_as_the_exact_parser_writes_them(tmp_path):
    path = tmp_path / "t.jsonl"
    path.write_bytes(TYPED_CASES["meta not compact"][0])
    trace = check_same(path)
    assert trace is not None
    assert trace.item_meta[0] == {"k": [1, 2.5, 100.0, "é"]}


number = st.one_of(
    st.floats(allow_nan=False, allow_infinity=False).map(repr),
    st.integers(-(2**80), 2**80).map(str),
    st.from_regex(r"-?(0|[1-9][0-9]{0,25})(\.[0-9]{1,25})?([eE][+-]?[0-9]{1,3})?", fullmatch=True),
)


@settings(max_examples=max(200, settings().max_examples))
@given(t=number)
def test_typed_numbers_are_the_exact_parsers_bit_for_bit(t):
    """msgspec's number reading against orjson's (the exact parser's), through the whole
    load: the same float64, sign of zero included (``assert_same_trace`` compares bytes), or
    the exact parser's refusal."""
    line = f'{{"event":"write","id":"a","tokens":1,"type":"user_input","t":{t},"cost":{t}}}'
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "t.jsonl"
        path.write_bytes(line.encode() + b"\n")
        check_same(path)
