"""The bulk trace parser (memlens.trace.bulk.parse) against the exact line-by-line one.

The property that matters: whatever a file holds, ``load_trace`` (bulk first, exact when the
bulk parser gives up) gives the same result as ``load_trace_exact``: the same Trace (every
column, hash, annotations) or the same TraceError (file, line, field, message); and the bulk
parser itself never accepts a file the exact one rejects, by any of its tiers: the compiled
scanner (memlens.trace.bulk.scan), msgspec's typed decoding, orjson line by line.  ``check_same``
parses every file through each tier.
"""

from __future__ import annotations

import gc
import gzip
import json
import subprocess
import sys
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

from memlens.trace import limits
from memlens.trace.bulk import parse as fast_parse
from memlens.trace.bulk.parse import Unsupported, load_fast, parse_fast
from memlens.trace.io import (
    TraceError,
    load_trace,
    load_trace_exact,
    write_trace,
)
from memlens.trace.model import Trace

REPO = Path(__file__).resolve().parents[2]


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


@pytest.fixture(autouse=True)
def scanner_for_every_size(monkeypatch):
    """The scanner reads even the small files of these tests (``SCAN_MIN_BYTES``)."""
    monkeypatch.setattr(fast_parse, "SCAN_MIN_BYTES", 0)


def check_same(path) -> Trace | None:
    """load_trace == load_trace_exact, and the bulk parser accepts only what the exact one
    accepts, building the same trace, by each of its tiers: the compiled scanner first (the
    default), msgspec's typed decoding (scanner off), every block through orjson (both off).
    The bulk trace (None if it gave up)."""
    exact = outcome(load_trace_exact, path)
    both = outcome(load_trace, path)
    assert both[0] == exact[0]
    if exact[0] == "error":
        assert both[1] == exact[1]
    else:
        assert_same_trace(both[1], exact[1])
    typed = bulk_without(path, no_scanner=True)
    untyped = bulk_without(path, no_scanner=True, no_typed=True)
    try:
        fast = parse_fast(path)
    except fast_parse._GIVE_UP:
        fast = None
    for trace in (fast, typed, untyped):
        if trace is not None:
            assert exact[0] == "trace", f"the bulk parser accepted a trace rejected with {exact[1]}"
            assert_same_trace(trace, exact[1])
    return fast


def bulk_without(path, no_scanner: bool = False, no_typed: bool = False) -> Trace | None:
    """The bulk parser's trace with its compiled scanner and/or its typed (msgspec) decoding
    switched off (None if it gave up)."""
    originals = fast_parse._scanned, fast_parse._typed_events
    if no_scanner:
        fast_parse._scanned = lambda scan, text: False
    if no_typed:
        fast_parse._typed_events = lambda text: None
    try:
        return parse_fast(path)
    except fast_parse._GIVE_UP:
        return None
    finally:
        fast_parse._scanned, fast_parse._typed_events = originals


class Tiers:
    """Counts the blocks each tier of the bulk parser took: the compiled scanner
    (``scanned``), msgspec's typed decoding (``typed``), orjson line by line (``left``)."""

    def __init__(self, monkeypatch, scanner: bool = True):
        self.scanned = self.taken = self.left = 0
        scanned, typed = fast_parse._scanned, fast_parse._typed_events

        def scan_spy(scan, text):
            ok = scanner and scanned(scan, text)
            self.scanned += ok
            return ok

        def typed_spy(text):
            events = typed(text)
            self.taken += events is not None
            self.left += events is None
            return events

        monkeypatch.setattr(fast_parse, "_scanned", scan_spy)
        monkeypatch.setattr(fast_parse, "_typed_events", typed_spy)

    def tier(self) -> str:
        """The slowest tier any block took."""
        return "orjson" if self.left else "typed" if self.taken else "scan"


# ------------------------------------------------------------------ real and generated traces
def bundled_traces() -> list[str]:
    out = subprocess.run(["git", "ls-files", "datasets"], cwd=REPO, capture_output=True,
                         text=True, check=True).stdout.split()  # fmt: skip
    return [p for p in out if p.endswith((".jsonl", ".jsonl.gz"))]


@pytest.mark.parametrize("name", bundled_traces())
@pytest.mark.slow  # kept out of the default run (6-minute budget); make test-all runs it
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
    blocks = Tiers(monkeypatch)
    assert parse_fast(path) is not None
    assert blocks.scanned > 1 and blocks.tier() == "scan"  # all read by the compiled scanner
    assert check_same(path) is not None


def test_only_files_from_scan_min_bytes_up_are_scanned(tmp_path, monkeypatch):
    """Below ``SCAN_MIN_BYTES`` on disk the scanner is never asked (its first use compiles it),
    and the trace is the same either way."""
    path = tmp_path / "t.jsonl"
    write_trace(path, generate("agent", streams=2, events_per_stream=200, seed=2), header={})
    size = path.stat().st_size
    monkeypatch.setattr(fast_parse, "SCAN_MIN_BYTES", size + 1)
    small = Tiers(monkeypatch)
    below = parse_fast(path)
    assert small.scanned == 0 and small.taken > 0
    monkeypatch.setattr(fast_parse, "SCAN_MIN_BYTES", size)
    large = Tiers(monkeypatch)
    at = parse_fast(path)
    assert large.scanned > 0 and large.tier() == "scan"
    assert below.sha256 == at.sha256 and below.n_events == at.n_events == 400


def test_lines_across_blocks_and_no_final_newline(tmp_path, monkeypatch):
    monkeypatch.setattr(fast_parse, "BLOCK_BYTES", 97)  # every line crosses a block boundary
    path = tmp_path / "t.jsonl"
    write_trace(path, generate("agent", streams=2, events_per_stream=150, seed=1), header={})
    whole = check_same(path)
    path.write_bytes(path.read_bytes().rstrip(b"\n"))
    cut = check_same(path)
    assert whole is not None and cut is not None
    assert cut.n_events == whole.n_events >= 300 and cut.sha256 == whole.sha256


def test_spilled_columns_load_identically(tmp_path, monkeypatch):
    """Columns past ``SPILL_BYTES`` go to temporary files (block by block, straight from the
    scanner's buffers once spilled): the same columns as the exact parser's."""
    monkeypatch.setattr(limits, "SPILL_BYTES", 300)
    monkeypatch.setattr(fast_parse, "BLOCK_BYTES", 2048)
    path = tmp_path / "t.jsonl.gz"
    write_trace(path, generate("agent", streams=3, events_per_stream=300, seed=2), header={})
    trace = check_same(path)
    assert trace is not None and isinstance(trace.item_text.data, np.memmap)


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


def test_blank_line_between_blocks_is_left_to_the_exact_parser(tmp_path, monkeypatch):
    """A block that is one blank line (an empty run of lines) gives up, as a blank line inside
    a block does: the exact parser leaves it out of the hash."""
    monkeypatch.setattr(fast_parse, "BLOCK_BYTES", 1)
    path = tmp_path / "t.jsonl"
    path.write_bytes(lines_of(W % ("a", ""), "", R % ("r", "")))
    assert check_same(path) is None
    assert load_trace(path).n_events == 2


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


def test_gc_state_restored_and_reader_thread_ended(tmp_path, monkeypatch):
    monkeypatch.setattr(fast_parse, "BLOCK_BYTES", 4096)  # blocks in flight when it gives up
    path = tmp_path / "bad.jsonl"
    path.write_bytes(b'{"event":"write","id":"a","tokens":1,"type":"user_input"}\n' * 5000)
    before, switching = threading.active_count(), sys.getswitchinterval()
    assert gc.isenabled()
    assert load_fast(path) is None
    assert gc.isenabled() and threading.active_count() == before
    assert sys.getswitchinterval() == switching
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


@pytest.mark.slow  # 300 hypothesis traces through both parsers: 13 s (make test-all)
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
    assert check_same(path) is not None or expected == "exact"
    blocks = Tiers(monkeypatch, scanner=False)
    fast = bulk_without(path)  # (Tiers has switched the scanner off)
    assert ("exact" if fast is None else blocks.tier()) == expected
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
@pytest.mark.slow  # kept out of the default run (6-minute budget); make test-all runs it
def test_typed_numbers_are_the_exact_parsers_bit_for_bit(t):
    """msgspec's number reading against orjson's (the exact parser's), through the whole
    load: the same float64, sign of zero included (``assert_same_trace`` compares bytes), or
    the exact parser's refusal."""
    line = f'{{"event":"write","id":"a","tokens":1,"type":"user_input","t":{t},"cost":{t}}}'
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "t.jsonl"
        path.write_bytes(line.encode() + b"\n")
        check_same(path)


# ------------------------------------------------------------ the compiled scanner (json_scan)
# name -> (file text, the slowest tier that loads it: "scan" = every block read by the compiled
# scanner; "typed" / "orjson" = some block left to msgspec / orjson; "exact" = the bulk parser
# gives up and the exact parser decides)
SCAN_CASES = {
    "plain": (lines_of(W % ("a", ""), R % ("r", "")), "scan"),
    "escapes and unicode": (lines_of(W % ("a\\u00e9\\ud83d\\ude00", ',"text":"q\\"\\\\\\/\\n\\t é"'),
                                     (R % ("r", "")).replace('"a"', '"a\\u00e9\\ud83d\\ude00"')), "scan"),
    "blanks": (lines_of(' { "event" : "write" ,\t"id" : "a" , "tokens" : 3 , "type" : '
                        '"user_input" , "meta" : { "k" : [ 1 , 2.50 ] } }  '), "scan"),
    "pins": (lines_of(W % ("a", ""), '{"event":"pin","target":"a","x":[1]}',
                      '{"event":"annotate","target":"a","value":0.5,"note":"n"}'), "scan"),
    "pin with a second event key": (lines_of(W % ("a", ""), '{"event":"pin","target":"a","event":"unpin"}'),
                                    "exact"),
    "event not first": (lines_of('{"id":"a","event":"write","tokens":3,"type":"user_input"}'), "typed"),
    "duplicate key": (lines_of(W % ("a", ',"text":"x","text":"y"')), "typed"),
    "unknown key": (lines_of(W % ("a", ',"extra":1')), "orjson"),
    "tokens 2.0": (lines_of(W.replace('"tokens":3', '"tokens":2.0') % ("a", "")), "typed"),
    "t with 17 digits": (lines_of(W % ("a", ',"t":0.12345678901234567')), "typed"),
    "t -0": (lines_of(W % ("a", ',"t":-0')), "scan"),
    "t -0.0": (lines_of(W % ("a", ',"t":-0.0')), "scan"),
    "t too large": (lines_of(W % ("a", ',"t":1e16')), "exact"),
    "tokens 0": (lines_of(W.replace('"tokens":3', '"tokens":0') % ("a", "")), "exact"),
    "bad type": (lines_of(W.replace("user_input", "other") % ("a", "")), "exact"),
    "empty id": (lines_of(W % ("", "")), "exact"),
    "lone surrogate": (lines_of(W % ("a", ',"text":"\\ud800"')), "exact"),
    "bad UTF-8 in text": (b'{"event":"write","id":"a","tokens":3,"type":"user_input","text":"\xed\xa0\x80"}\n',
                          "exact"),
    "bad UTF-8 in meta": (b'{"event":"write","id":"a","tokens":3,"type":"user_input","meta":{"k":"\xff"}}\n',
                          "exact"),
    "meta not an object": (lines_of(W % ("a", ',"meta":[1]')), "exact"),
    "meta bad number": (lines_of(W % ("a", ',"meta":{"k":1e999}')), "exact"),
    "meta 40 deep": (lines_of(W % ("a", ',"meta":{"d":' + "[" * 40 + "]" * 40 + "}")), "typed"),
    "metas not canonical": (lines_of(W % ("a", ',"meta":{ "k" : 1E2, "k": "\\u00e9" }'),
                                     W % ("b", ',"meta":{}'), W % ("c", ',"meta":{"k":1E2,"k":"\\u00e9"}')),
                            "scan"),
    "unknown need": (lines_of(R % ("r", "")), "exact"),
    "need of another stream": (lines_of((W % ("a", "")).replace('"s"', '"z"'), R % ("r", "")), "exact"),
    "time backwards": (lines_of(W % ("a", ',"t":2'), W % ("b", ',"t":1')), "exact"),
    "control character": (lines_of(W % ("a", ',"text":"\x01"')), "exact"),
    "trailing comma": (lines_of(W % ("a", ",")), "exact"),
}  # fmt: skip


@pytest.mark.parametrize("name", sorted(SCAN_CASES))
def test_scanner_agrees_with_the_exact_parser(tmp_path, monkeypatch, name):
    """Hand-made lines at the edges of what the compiled scanner reads: the same outcome as
    the exact parser, and each loaded by the tier it is meant to take."""
    text, expected = SCAN_CASES[name]
    path = tmp_path / "t.jsonl"
    path.write_bytes(b'{"event":"header","version":1}\n' + text)
    fast = check_same(path)
    blocks = Tiers(monkeypatch)
    try:
        fast = parse_fast(path)
    except fast_parse._GIVE_UP:
        fast = None
    assert ("exact" if fast is None else blocks.tier()) == expected


NUMBER_FORMS = ["0", "-0", "0.0", "-0.0", "1", "12", "1.5", "1.50", "1e2", "1E+2", "2.5e-3",
                "-7", "0.1", "1e-7", "123456789012345678", "12345678901234567890123", "1e400",
                "3.0", "0.30000000000000004", "1e15", "1.0e15", "true", "null", '"1"']  # fmt: skip
BLANKS = ["", "", " ", "\t", "  "]


def render_key(draw, key: str) -> str:
    escaped = f'"\\u{ord(key[0]):04x}{key[1:]}"'  # the key's first letter as an escape
    return escaped if draw(st.integers(0, 19)) == 0 else f'"{key}"'


def render_string(draw, value: str) -> str:
    text = json.dumps(value, ensure_ascii=draw(st.booleans()))
    return text.replace("/", "\\/") if draw(st.booleans()) else text


@st.composite
def raw_lines(draw) -> bytes:
    """Write and request lines written by hand, not by a JSON library: odd blanks, escapes in
    strings and keys, key orders, duplicate and unknown keys, numbers in every form."""
    lines, ids = [], []
    for n in range(draw(st.integers(1, 8))):
        write = not ids or draw(st.booleans())
        ident = f"w{n}" if write else f"r{n}"
        fields = [
            ("event", '"write"' if write else '"request"'),
            ("id", render_string(draw, ident)),
        ]
        if write:
            fields += [("tokens", draw(st.sampled_from(["3", "40", "2.0", "0", "-1", "1e1"]))),
                       ("type", '"user_input"')]  # fmt: skip
            ids.append(ident)
        else:
            needs = draw(st.lists(st.sampled_from(ids), max_size=3))
            fields.append(("needs", "[" + ",".join(render_string(draw, i) for i in needs) + "]"))
        for key in ("t", "cost", "text", "stream", "meta", "extra"):
            if draw(st.integers(0, 2)) == 0 and (write or key != "cost"):
                if key in ("t", "cost"):
                    value = str(n) if draw(st.booleans()) else draw(st.sampled_from(NUMBER_FORMS))
                elif key == "meta":
                    value = draw(st.sampled_from(['{}', '{"k":1}', '{ "k" : [1, 2.50] }', "[]",
                                                  '{"k":"\\u00e9","k":2}', '{"a":{"b":{}}}']))  # fmt: skip
                else:
                    value = render_string(draw, draw(st.sampled_from(["", "s", "é", "a/b", 'q"'])))
                fields.append((key, value))
        if draw(st.integers(0, 9)) == 0:  # a key twice
            fields.append(draw(st.sampled_from(fields)))
        if draw(st.integers(0, 9)) == 0:  # event not first
            fields = draw(st.permutations(fields))
        blank = lambda: draw(st.sampled_from(BLANKS))  # noqa: E731
        body = ",".join(f"{blank()}{render_key(draw, k)}{blank()}:{blank()}{v}{blank()}"
                        for k, v in fields)  # fmt: skip
        lines.append(f"{blank()}{{{body}}}{blank()}")
    return "\n".join(lines).encode() + b"\n"


@settings(max_examples=max(400, settings().max_examples))
@given(data=raw_lines(), block=st.sampled_from([83, 1 << 20]))
@pytest.mark.slow  # >10 s: kept out of the default run (make test-all runs it)
def test_hand_written_lines_agree_with_the_exact_parser(data, block):
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "t.jsonl"
        path.write_bytes(data)
        original = fast_parse.BLOCK_BYTES
        fast_parse.BLOCK_BYTES = block
        try:
            check_same(path)
        finally:
            fast_parse.BLOCK_BYTES = original


def test_valid_traces_are_read_by_the_scanner(tmp_path, monkeypatch):
    """Traces as write_trace writes them (event first, known fields only) never leave the
    compiled scanner, whatever their strings hold."""
    events = list(generate("agent", streams=3, events_per_stream=300, seed=5))
    for k, ev in enumerate(events[:200]):
        ev["text"] = ev.get("text", "") + ["é", "😀", "\\", '"', "\u2028", "\x7f", "\n"][k % 7]
    path = tmp_path / "t.jsonl"
    write_trace(path, events, header={})
    monkeypatch.setattr(fast_parse, "BLOCK_BYTES", 8192)
    blocks = Tiers(monkeypatch)
    trace = parse_fast(path)
    assert blocks.scanned > 5 and blocks.tier() == "scan"
    assert_same_trace(trace, load_trace_exact(path))
