"""One definition of a trace's hash: the same events give the same ``sha256`` however stored."""

from __future__ import annotations

import gzip

from memlens.testing import rq, w
from memlens.trace.io import load_trace, trace_from_events, write_trace

EVENTS = [w("a", 3, "user_input", stream="s"), w("b", 5, stream="s"), rq("q", "a", stream="s")]


def test_written_and_loaded_hash_equals_the_in_memory_hash(tmp_path):
    want = trace_from_events(EVENTS).sha256
    for name in ("t.jsonl", "t.jsonl.gz"):
        write_trace(tmp_path / name, EVENTS)
        assert load_trace(tmp_path / name).sha256 == want, name


def test_line_endings_blank_lines_and_compression_do_not_change_the_hash(tmp_path):
    write_trace(tmp_path / "t.jsonl", EVENTS)
    text = (tmp_path / "t.jsonl").read_text()
    (tmp_path / "crlf.jsonl").write_bytes(text.replace("\n", "\r\n\r\n").encode())
    (tmp_path / "noeol.jsonl").write_text(text.rstrip("\n"))
    with gzip.open(tmp_path / "other.jsonl.gz", "wt", compresslevel=1) as fh:
        fh.write(text)
    hashes = {load_trace(tmp_path / n).sha256 for n in ("t.jsonl", "crlf.jsonl", "noeol.jsonl",
                                                        "other.jsonl.gz")}  # fmt: skip
    assert len(hashes) == 1


def test_a_different_event_changes_the_hash():
    other = [*EVENTS[:2], rq("q", "b", stream="s")]
    assert trace_from_events(other).sha256 != trace_from_events(EVENTS).sha256
