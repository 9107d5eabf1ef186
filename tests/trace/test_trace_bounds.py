"""Nothing lost, nothing trusted blindly: every hostile trace ends in one named TraceError.

Each bad input of issue 15 is checked three ways: ``load_trace`` (the error names the right
line and field), the run loader with the parsed-trace cache on (same error, nothing cached),
and the ``memlens`` command (exit 2, exactly one ``error:`` line, no traceback, no run folder).
Then a fuzz test (random byte mutations of valid traces, plain and gzip), the packed columns
against the lists they replace, the trace's memory per event, and the ``simple`` generator
(streaming, and byte for byte what it wrote before it streamed).
"""

from __future__ import annotations

import gzip
import hashlib
import json
import os
import subprocess
import sys
import tracemalloc
import zlib
from dataclasses import fields
from pathlib import Path

import numpy as np
import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from memlens.testing import random_events, rq, traces, w
from memlens.trace import io as trace_io
from memlens.trace import limits
from memlens.trace.generate import generate_simple
from memlens.trace.idtable import IdTable
from memlens.trace.io import TraceError, load_trace, trace_from_events
from memlens.trace.limits import MAX_DEPTH, MAX_TOKENS
from memlens.trace.model import Trace
from memlens.trace.packed import (
    PackedJSON,
    PackedStrings,
    StringLists,
    StringsBuilder,
    TakenStrings,
)

MEMLENS = str(Path(sys.executable).parent / "memlens")
GOOD = [w("a", 3, "user_input", stream="s", t=1), w("b", 5, stream="s", t=2),
        rq("q", "a", "b", stream="s", t=3)]  # fmt: skip


def lines_of(events) -> list[bytes]:
    return [orjson.dumps(e) for e in events]


def write_bytes(path: Path, lines: list[bytes], end: bytes = b"\n") -> Path:
    path.write_bytes(b"".join(line + end for line in lines))
    return path


def error_of(path, **kw) -> TraceError:
    with pytest.raises(TraceError) as info:
        load_trace(path, **kw)
    return info.value


# ------------------------------------------------------------------ the bad inputs
def corrupt_gzip(tmp_path: Path) -> Path:
    """Lines 1-3 in a complete gzip member, then a member whose deflate data is invalid
    (first block type 11, reserved): reading fails right after line 3."""
    good = gzip.compress(b"".join(line + b"\n" for line in lines_of(GOOD)))
    bad = gzip.compress(b'{"event": "write"}\n')
    bad = bad[:10] + b"\xff" * 8 + bad[18:]  # 10-byte header, then the deflate stream
    path = tmp_path / "corrupt.jsonl.gz"
    path.write_bytes(good + bad)
    return path


def test_a_corrupt_gzip_block_names_the_line_after_the_last_good_one(tmp_path):
    err = error_of(corrupt_gzip(tmp_path))
    assert (err.line, err.field) == (4, None)
    assert "corrupt gzip data" in str(err) and "invalid block type" in str(err)


def test_a_truncated_gzip_names_the_line_where_the_data_ends(tmp_path):
    events = random_events(np.random.default_rng(1), n_events=3000)
    full = gzip.compress(b"".join(line + b"\n" for line in lines_of(events)))
    for cut in (len(full) // 3, len(full) - 9):  # mid-stream; only the 8-byte trailer missing
        path = tmp_path / f"cut{cut}.jsonl.gz"
        path.write_bytes(full[:cut])
        readable = zlib.decompressobj(31).decompress(full[:cut])  # what can be read at all
        err = error_of(path)
        assert err.line == readable.count(b"\n") + 1, cut
        assert "the gzip data ends early" in str(err)


def test_not_a_gzip_file_and_missing_file(tmp_path):
    bad = tmp_path / "bad.jsonl.gz"
    bad.write_bytes(b"not gzip at all")
    err = error_of(bad)
    assert err.line == 1 and "cannot read trace" in str(err)
    assert error_of(tmp_path / "absent.jsonl").line == 0


def test_gzip_content_is_read_whatever_the_name(tmp_path):
    path = tmp_path / "t.jsonl"  # gzip bytes under a plain name: detected by the magic bytes
    path.write_bytes(gzip.compress(b"".join(line + b"\n" for line in lines_of(GOOD))))
    assert load_trace(path).sha256 == trace_from_events(GOOD).sha256


def test_non_utf8_bytes_name_line_and_byte(tmp_path):
    lines = lines_of(GOOD)
    lines[1] = lines[1].replace(b'"b"', b'"b\xff"')
    err = error_of(write_bytes(tmp_path / "t.jsonl", lines))
    at = lines[1].index(b"\xff") + 1
    assert err.line == 2 and "not valid UTF-8" in str(err) and f"byte {at} of the line" in str(err)


def test_a_lone_carriage_return_does_not_shift_line_numbers(tmp_path):
    lines = lines_of([*GOOD, rq("r", "nope", stream="s")])
    lines[0] = lines[0].replace(b",", b",\r", 1)  # JSON whitespace: still one valid line
    err = error_of(write_bytes(tmp_path / "t.jsonl", lines))
    assert (err.line, err.field) == (4, "needs")
    lines[3] = lines_of(GOOD)[2].replace(b'"q"', b'"q2"') + b"\r" + lines_of(GOOD)[2]
    err = error_of(write_bytes(tmp_path / "u.jsonl", lines))
    assert err.line == 4 and "carriage return" in str(err)


def test_crlf_and_lone_cr_in_json_whitespace_keep_the_hash_definition(tmp_path):
    want = trace_from_events(GOOD).sha256
    crlf = write_bytes(tmp_path / "crlf.jsonl", lines_of(GOOD), end=b"\r\n")
    assert load_trace(crlf).sha256 == want
    nbsp = write_bytes(tmp_path / "nbsp.jsonl", [*lines_of(GOOD), "\u00a0 ".encode()])
    assert load_trace(nbsp).sha256 == want  # a line of Unicode blanks is blank, as it was


@pytest.mark.parametrize("field, value, raw", [
    ("tokens", 2**64, b'"tokens": 18446744073709551616'),
    ("tokens", 1e300, b'"tokens": 1e300'),
    ("tokens", MAX_TOKENS + 1, None),
    ("t", 1e300, b'"t": 1e300'),
    ("cost", -1e300, b'"cost": -1e300'),
])  # fmt: skip
def test_numbers_out_of_range_are_field_errors(tmp_path, field, value, raw):
    event = {**w("c", 1, stream="s", t=5), field: value}
    line = json.dumps(event).encode()  # json: orjson refuses integers beyond 64 bits
    err = error_of(write_bytes(tmp_path / "t.jsonl", [*lines_of(GOOD), line]))
    assert (err.line, err.field) == (4, field)
    if raw is not None:  # the literal in the file, as a converter would write it
        line = orjson.dumps({**w("c", 1, stream="s", t=5), field: 0}).replace(
            f'"{field}":0'.encode(), raw
        )
        err = error_of(write_bytes(tmp_path / "u.jsonl", [*lines_of(GOOD), line]))
        assert (err.line, err.field) == (4, field)


@pytest.mark.parametrize("field, value", [("t", 10**400), ("cost", 10**400), ("value", 10**400),
                                          ("tokens", 10**400), ("t", float("nan"))])  # fmt: skip
def test_python_numbers_beyond_float_are_field_errors_not_overflow(field, value):
    event = {"event": "annotate", "target": "a", "stream": "s", "value": 0.5}
    event = {**(event if field == "value" else w("c", 1, stream="s", t=5)), field: value}
    with pytest.raises(TraceError) as info:
        trace_from_events([*GOOD, event])
    assert (info.value.line, info.value.field) == (4, field)


def nested(depth: int) -> dict:
    value: dict = {}
    for _ in range(depth - 1):
        value = {"x": value}
    return value


@pytest.mark.parametrize("key", ["meta", "colour"])
def test_deep_nesting_is_a_field_error(tmp_path, key):
    event = {**w("c", 1, stream="s"), key: nested(500)}
    path = tmp_path / "t.jsonl"
    err = error_of(write_bytes(path, [*lines_of(GOOD), json.dumps(event).encode()]))
    assert (err.line, err.field) == (4, key) and f"deeper than {MAX_DEPTH}" in str(err)
    with pytest.raises(TraceError) as info:
        trace_from_events([*GOOD, event])
    assert (info.value.line, info.value.field) == (4, key)
    ok = {**w("d", 1, stream="s"), key: nested(MAX_DEPTH - 1)}
    assert trace_from_events([*GOOD, ok]).n_items == 3


def test_nesting_beyond_the_json_parser_is_a_line_error(tmp_path):
    line = b'{"event": "write", "meta": ' + b"[" * 3000 + b"]" * 3000 + b"}"
    err = error_of(write_bytes(tmp_path / "t.jsonl", [*lines_of(GOOD), line]))
    assert err.line == 4 and "malformed JSON" in str(err)


def test_a_line_longer_than_the_limit_names_its_line(tmp_path):
    long = orjson.dumps({**w("c", 1, stream="s"), "text": "x" * 5000})
    path = write_bytes(tmp_path / "t.jsonl", [*lines_of(GOOD), long])
    err = error_of(path, max_line_bytes=4096)
    assert err.line == 4 and "longer than 4,096 bytes" in str(err)
    assert load_trace(path, max_line_bytes=8192).item_text[2] == "x" * 5000
    endless = tmp_path / "endless.jsonl"  # no newline at all: stops at the limit
    endless.write_bytes(b"a" * (3 << 20))
    assert error_of(endless, max_line_bytes=1 << 20).line == 1
    with pytest.raises(ValueError, match="max_line_bytes"):
        load_trace(path, max_line_bytes=0)


def test_the_default_line_limit_is_a_module_setting(tmp_path, monkeypatch):
    from memlens.trace import lines as trace_lines

    path = write_bytes(tmp_path / "t.jsonl", lines_of(GOOD))
    monkeypatch.setattr(trace_lines, "MAX_LINE_BYTES", 20)
    assert error_of(path).line == 1


def special_files(tmp_path: Path) -> dict[str, Path]:
    fifo = tmp_path / "fifo.jsonl"
    os.mkfifo(fifo)
    (tmp_path / "dir.jsonl").mkdir()
    return {"directory": tmp_path / "dir.jsonl", "FIFO": fifo, "device": Path("/dev/zero")}


def test_directories_fifos_and_devices_are_refused_before_reading(tmp_path):
    for kind, path in special_files(tmp_path).items():
        err = error_of(path)  # returns at once: a FIFO or /dev/zero is never opened
        assert err.line == 0 and "not a regular file" in str(err), kind
        assert kind.split()[0].lower() in str(err).lower(), kind


def run_settings(path: Path, cache: bool):
    from memlens.config.compose import compose_config
    from memlens.config.schema import register_configs, resolve

    register_configs()
    cfg = compose_config("simulate", [f"trace={path}", "mlflow.enabled=false",
                                      f"trace_cache={str(cache).lower()}"])  # fmt: skip
    return resolve(cfg)


def bad_traces(tmp_path: Path) -> dict[str, tuple[Path, int]]:
    """name -> (path, line the error names)."""
    utf8 = lines_of(GOOD)
    utf8[2] = utf8[2] + b"\xc3"
    deep = json.dumps({**w("c", 1, stream="s"), "meta": nested(500)}).encode()
    tokens = orjson.dumps(w("c", 1, stream="s")).replace(b'"tokens":1', b'"tokens":1e300')
    empty = tmp_path / "empty.jsonl"
    empty.write_bytes(b"")
    out = {"corrupt gzip": (corrupt_gzip(tmp_path), 4),
           "utf8": (write_bytes(tmp_path / "utf8.jsonl", utf8), 3),
           "deep meta": (write_bytes(tmp_path / "deep.jsonl", [*lines_of(GOOD), deep]), 4),
           "tokens": (write_bytes(tmp_path / "tok.jsonl", [*lines_of(GOOD), tokens]), 4),
           "empty": (empty, 0),
           "header only": (write_bytes(tmp_path / "h.jsonl", [b'{"event": "header"}']), 0),
           "no requests": (write_bytes(tmp_path / "w.jsonl", lines_of(GOOD[:2])), 0)}  # fmt: skip
    out.update({k: (p, 0) for k, p in special_files(tmp_path).items()})
    return out


@pytest.mark.parametrize("cache", [False, True])
def test_the_run_loader_refuses_every_bad_trace_and_caches_nothing(tmp_path, monkeypatch, cache):
    from memlens.runs import pipeline

    monkeypatch.setenv("MEMLENS_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(pipeline, "_TRACES", {})
    bad = bad_traces(tmp_path)
    settings = run_settings(bad["empty"][0], cache)
    valid = ("empty", "header only", "no requests")  # valid traces, nothing to replay
    for name, (path, line) in sorted(bad.items(), key=lambda kv: kv[0] in valid):
        with pytest.raises(TraceError) as info:
            pipeline.load_trace(settings, str(path))
        assert info.value.line == line, name
        if name in valid:
            assert "no requests in the trace" in str(info.value)
        else:  # an invalid trace is never cached
            assert not [p for p in (tmp_path / "cache").rglob("*") if p.is_file()], name
    writes_only = str(bad["no requests"][0])
    assert pipeline.load_trace(settings, writes_only, allow_no_requests=True).n_requests == 0


def memlens_cli(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONWARNINGS": "ignore"}
    return subprocess.run([MEMLENS, *args], cwd=cwd, capture_output=True, text=True, env=env,
                          timeout=600)  # fmt: skip


def assert_one_error_line(proc: subprocess.CompletedProcess, path: Path) -> None:
    assert proc.returncode == 2, proc.stderr
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), proc.stderr
    assert str(path) in lines[0] and "Traceback" not in proc.stderr


CLI_CASES = ["corrupt gzip", "deep meta", "no requests", "device",
             pytest.param("utf8", marks=pytest.mark.slow),
             pytest.param("tokens", marks=pytest.mark.slow),
             pytest.param("directory", marks=pytest.mark.slow),
             pytest.param("FIFO", marks=pytest.mark.slow),
             pytest.param("header only", marks=pytest.mark.slow)]  # fmt: skip


@pytest.mark.parametrize("name", CLI_CASES)
@pytest.mark.slow  # kept out of the default run (6-minute budget); make test-all runs it
def test_simulate_exits_2_with_one_error_line_and_no_run_folder(tmp_path, name):
    path, line = bad_traces(tmp_path)[name]
    run_dir = tmp_path / "run"
    proc = memlens_cli("simulate", f"trace={path}", "mlflow.enabled=false",
                       f"hydra.run.dir={run_dir}", cwd=tmp_path)  # fmt: skip
    assert_one_error_line(proc, path)
    if line:
        assert f"{path}:{line}: " in proc.stderr
    assert not run_dir.exists()


@pytest.mark.slow  # kept out of the default run (6-minute budget); make test-all runs it
def test_data_stats_reports_a_corrupt_gzip_and_reads_a_write_only_trace(tmp_path):
    path = corrupt_gzip(tmp_path)
    assert_one_error_line(memlens_cli("data", "stats", f"trace={path}", cwd=tmp_path), path)
    writes = write_bytes(tmp_path / "w.jsonl", lines_of(GOOD[:2]))
    proc = memlens_cli("data", "stats", f"trace={writes}", "json=true", cwd=tmp_path)
    assert proc.returncode == 0 and json.loads(proc.stdout)["events"] == 2


# ---------------------------------------------------------------------------- fuzz
def mutate(data: bytes, edits: list[tuple[int, int, int]]) -> bytes:
    """Apply (kind, position, byte) edits: 0 flips a byte, 1 inserts one, 2 deletes one,
    3 truncates there."""
    out = bytearray(data)
    for kind, pos, byte in edits:
        if not out:
            break
        pos %= len(out)
        if kind == 0:
            out[pos] ^= byte or 1
        elif kind == 1:
            out.insert(pos, byte)
        elif kind == 2:
            del out[pos]
        else:
            del out[pos:]
    return bytes(out)


EDITS = st.lists(st.tuples(st.integers(0, 3), st.integers(0, 2**31), st.integers(0, 255)),
                 min_size=1, max_size=6)  # fmt: skip


@given(traces(max_events=25), EDITS, st.booleans())
def test_fuzz_mutated_traces_load_or_raise_trace_error(tmp_path_factory, events, edits, gz):
    text = b"".join(line + b"\n" for line in lines_of(events))
    data = mutate(gzip.compress(text, mtime=0) if gz else text, edits)
    path = tmp_path_factory.mktemp("fuzz") / ("t.jsonl.gz" if gz else "t.jsonl")
    path.write_bytes(data)
    try:
        tr = load_trace(path)
    except TraceError as err:
        assert err.path == str(path) and err.line >= 0
        return
    assert Trace.from_arrays(*tr.to_arrays(), str(path)).sha256 == tr.sha256


@given(
    traces(max_events=25),
    st.integers(0, 2**31),
    st.sampled_from([b"\xff", b"\r", b"\x00", b"{", b'"', b"\n", b"1e999", b"[" * 70]),
)
def test_fuzz_inserted_hostile_bytes(tmp_path_factory, events, pos, junk):
    text = b"".join(line + b"\n" for line in lines_of(events))
    pos %= len(text)
    path = tmp_path_factory.mktemp("junk") / "t.jsonl"
    path.write_bytes(text[:pos] + junk + text[pos:])
    try:
        load_trace(path)
    except TraceError as err:
        assert 1 <= err.line <= text.count(b"\n") + junk.count(b"\n") + 1


# --------------------------------------------------------------- packed columns
strings = st.lists(st.text(max_size=12), max_size=40)


@given(strings, st.booleans(), st.data())
def test_packed_strings_behave_like_the_list(values, spill, data):
    builder = StringsBuilder(spill_bytes=0 if spill else None)
    for v in values:
        builder.append(v)
    packed = builder.build()
    assert len(packed) == len(values) and list(packed) == values and packed.tolist() == values
    assert packed == values and values == packed and not packed != values
    assert packed == PackedStrings.from_strings(values)
    assert packed + ["z"] == [*values, "z"] and ["z"] + packed == ["z", *values]
    if values:
        k = data.draw(st.integers(-len(values), len(values) - 1))
        assert packed[k] == values[k]
        assert packed.index(values[k]) == values.index(values[k])
        assert values[k] in packed and packed.count(values[k]) == values.count(values[k])
    lo, hi = data.draw(st.integers(-50, 50)), data.draw(st.integers(-50, 50))
    assert packed[lo:hi] == values[lo:hi] and packed[::-1] == values[::-1]
    with pytest.raises(IndexError):
        packed[len(values)]
    assert packed != [*values, "extra"] and packed != tuple(values)


@given(st.lists(st.one_of(st.just({}), st.dictionaries(st.text(max_size=4),
                                                       st.integers() | st.text(max_size=4),
                                                       max_size=3)), max_size=30))  # fmt: skip
def test_packed_json_behaves_like_the_list(values):
    values = [{k: v for k, v in d.items() if not isinstance(v, int) or abs(v) < 2**63}
              for d in values]  # fmt: skip
    packed = PackedJSON.from_dicts(values)
    assert len(packed) == len(values) and list(packed) == values and packed == values
    assert [packed[i] for i in range(len(values))] == values
    assert packed.rows.tolist() == [i for i, d in enumerate(values) if d]


@given(strings, st.data())
def test_gathered_views_match_list_gathering(values, data):
    if not values:
        return
    index = np.asarray(data.draw(st.lists(st.integers(0, len(values) - 1), max_size=30)),
                       dtype=np.int64)  # fmt: skip
    cuts = sorted(data.draw(st.lists(st.integers(0, len(index)), max_size=5)))
    ptr = np.asarray([0, *cuts, len(index)])
    for source in (values, PackedStrings.from_strings(values)):
        taken = TakenStrings(source, index)
        assert taken == [values[i] for i in index] and taken.arrow().to_pylist() == list(taken)
        lists = StringLists(source, index, ptr)
        want = [[values[i] for i in index[a:b]] for a, b in zip(ptr[:-1], ptr[1:])]
        assert lists == want and lists.arrow().to_pylist() == want
        keep = np.asarray(data.draw(st.lists(st.booleans(), min_size=len(index),
                                             max_size=len(index))), dtype=np.uint8)  # fmt: skip
        for keep_if in (True, False):
            kept = StringLists(source, index, ptr, keep, keep_if)
            want = [[values[index[j]] for j in range(a, b) if bool(keep[j]) == keep_if]
                    for a, b in zip(ptr[:-1], ptr[1:])]  # fmt: skip
            assert kept == want and kept.arrow().to_pylist() == want
            if len(ptr) > 2:  # a block of rows, as the Parquet writer asks for them
                assert kept.arrow(1, len(ptr) - 1).to_pylist() == want[1:]


@given(st.lists(st.text(max_size=6), unique=True, max_size=300))
def test_id_table_against_a_dict_even_when_every_hash_collides(keys):
    class Colliding(str):
        def __hash__(self) -> int:
            return 7

    for make in (str, Colliding):
        stored: list[str] = []
        table = IdTable(lambda v, stored=stored: stored[v], capacity=8)
        for key in map(make, keys):
            value, slot, h = table.find(key)
            assert value == -1
            stored.append(key)
            table.insert(slot, h, len(stored) - 1)
        assert all(table.get(make(k)) == i for i, k in enumerate(keys))
        assert table.get(make("never-an-id-" * 2)) == -1


def test_a_loaded_trace_holds_about_a_hundred_bytes_per_event(tmp_path, monkeypatch):
    events = random_events(np.random.default_rng(3), n_events=20_000, n_streams=4)
    path = tmp_path / "t.jsonl"
    trace_io.write_trace(path, events)
    monkeypatch.setattr(limits, "SPILL_BYTES", 0)  # texts, tasks, sessions, metas to disk
    tr = load_trace(path)
    resident = 0
    for f in fields(tr):
        value = getattr(tr, f.name)
        if isinstance(value, np.ndarray):
            resident += value.nbytes
        elif isinstance(value, PackedStrings) and not isinstance(value.data, np.memmap):
            resident += value.data.nbytes + value.offsets.nbytes
    assert isinstance(tr.item_text.data, np.memmap) and isinstance(tr.req_text.data, np.memmap)
    assert resident / tr.n_events < 110
    assert tr.item_text == [e.get("text", "") for e in events if e["event"] == "write"]
    monkeypatch.setattr(limits, "SPILL_BYTES", 1 << 40)
    assert same_trace(tr, load_trace(path))


def same_trace(a: Trace, b: Trace) -> bool:
    for f in fields(Trace):
        x, y = getattr(a, f.name), getattr(b, f.name)
        if isinstance(x, np.ndarray):
            if x.dtype != y.dtype or not np.array_equal(x, y):
                return False
        elif f.name != "source" and x != y:
            return False
    return True


@given(traces(max_events=30))
def test_to_arrays_from_arrays_round_trip_exactly(events):
    tr = trace_from_events(events)
    arrays, meta = tr.to_arrays()
    assert all(isinstance(a, np.ndarray) and a.dtype != object for a in arrays.values())
    back = Trace.from_arrays(arrays, json.loads(json.dumps(meta)), tr.source)
    assert same_trace(tr, back)
    assert Trace.from_arrays(*back.to_arrays(), tr.source).sha256 == tr.sha256


def test_from_arrays_refuses_foreign_offsets():
    arrays, meta = trace_from_events(GOOD).to_arrays()
    arrays["item_id.offsets"] = arrays["item_id.offsets"][::-1].copy()
    with pytest.raises(ValueError):
        Trace.from_arrays(arrays, meta, "x")


# -------------------------------------------------------------- simple generator
SIMPLE_SHA256 = {  # sha256 of the JSON lines written before the generator streamed
    (("seed", 0), ("streams", 4), ("events_per_stream", 500)):
        "aee4e191bfae8b9376df1c618d796eb4515cb9d81b51f0b612d2e408d0bcd9d7",
    (("seed", 7), ("streams", 3), ("events_per_stream", 2000), ("pin_rate", 0.05),
     ("max_pins", 3)): "0578acb8f8da81ede1eb053c697b162a74495039d3c229419d4330acf6423c76",
    (("seed", 1), ("streams", 1), ("events_per_stream", 3000), ("long_range_share", 0.9),
     ("request_share", 0.6)): "df8df318c81709d64e7ae766ac0e65d893403ea928e8cec33df53a4b78cf9df1",
}  # fmt: skip


@pytest.mark.parametrize("knobs", list(SIMPLE_SHA256), ids=lambda k: f"seed{k[0][1]}")
def test_simple_generator_output_is_byte_identical_to_before(knobs):
    digest = hashlib.sha256()
    for event in generate_simple(**dict(knobs)):
        digest.update(orjson.dumps(event) + b"\n")
    assert digest.hexdigest() == SIMPLE_SHA256[knobs]


@pytest.mark.slow  # tracemalloc makes the generator ~3x slower: ~20 s
def test_simple_generator_streams_in_a_few_bytes_per_item():
    def peak(n: int) -> int:
        tracemalloc.start()
        for _ in generate_simple(seed=0, streams=4, events_per_stream=n // 4):
            pass
        top = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
        return top

    small, large = peak(4_000), peak(44_000)
    # 40,000 more events (~28,000 items): a few hundred kB more (a few bytes per item), where
    # a str per id and a dict of topic words per item took about 7 MB
    assert large - small < 1_500_000
