"""The disk cache of parsed traces serves exactly what parsing gives, and never stale data.

(Damage, planted pickles, orphans and the size cap, for every cache: tests/runs/test_cache_safety.py.)
"""

from __future__ import annotations

import json
from dataclasses import fields

import numpy as np
import pytest

from memlens.checker import random_events
from memlens.trace.cache import entry_path, load_trace_cached
from memlens.trace.io import TraceError, load_trace, write_trace
from memlens.trace.model import Trace


def same_trace(a: Trace, b: Trace) -> None:
    for f in fields(Trace):
        x, y = getattr(a, f.name), getattr(b, f.name)
        if isinstance(x, np.ndarray):
            assert x.dtype == y.dtype and np.array_equal(x, y), f.name
        else:
            assert x == y, f.name


@pytest.fixture
def trace_file(tmp_path):
    path = tmp_path / "t.jsonl.gz"
    write_trace(path, random_events(np.random.default_rng(4), n_events=300), header={"g": 1})
    return path


def test_second_load_comes_from_the_cache_and_equals_parsing(tmp_path, trace_file):
    cache = tmp_path / "cache"
    first = load_trace_cached(trace_file, directory=cache)
    assert entry_path(trace_file, cache).exists()
    second = load_trace_cached(trace_file, directory=cache)
    same_trace(second, load_trace(trace_file))
    same_trace(first, second)


def test_an_edited_file_is_parsed_again(tmp_path, trace_file):
    cache = tmp_path / "cache"
    load_trace_cached(trace_file, directory=cache)
    events = [{"event": "write", "id": "only", "tokens": 9, "type": "user_input"}]
    write_trace(trace_file, events)
    tr = load_trace_cached(trace_file, directory=cache)
    assert tr.item_id == ["only"] and tr.n_events == 1


def test_a_damaged_entry_is_discarded_with_one_warning_and_rewritten(tmp_path, trace_file, capsys):
    cache = tmp_path / "cache"
    load_trace_cached(trace_file, directory=cache)
    entry = entry_path(trace_file, cache)
    entry.write_bytes(b"garbage")
    same_trace(load_trace_cached(trace_file, directory=cache), load_trace(trace_file))
    assert entry.read_bytes() != b"garbage"
    (line,) = capsys.readouterr().err.splitlines()
    assert line.startswith(f"warning: discarded corrupt cache entry {entry} (ValueError: ")
    assert line.endswith("); rebuilding")
    same_trace(load_trace_cached(trace_file, directory=cache), load_trace(trace_file))
    assert capsys.readouterr().err == ""  # healed: served silently


def test_the_entry_is_numbers_and_json_only(tmp_path, trace_file):
    """No pickle anywhere: every member loads with allow_pickle=False and is numeric."""
    cache = tmp_path / "cache"
    load_trace_cached(trace_file, directory=cache)
    entry = entry_path(trace_file, cache)
    assert entry.name.endswith(".npz") and entry.parent == cache
    with np.load(entry, allow_pickle=False) as z:
        members = {name: z[name] for name in z.files}
    assert all(a.dtype.kind in "biuf" for a in members.values())
    header = json.loads(members["__header__"].tobytes())
    assert header["kind"] == "traces" and header["meta"]["header"]["g"] == 1
    assert {name for name, _, _ in header["arrays"]} == set(members) - {"__header__", "__digest__"}


def test_the_key_is_the_file_content(tmp_path, trace_file):
    copy = tmp_path / "copy.jsonl.gz"
    copy.write_bytes(trace_file.read_bytes())
    assert entry_path(copy, tmp_path) == entry_path(trace_file, tmp_path)
    events = [{"event": "write", "id": "only", "tokens": 9, "type": "user_input"}]
    write_trace(copy, events)
    assert entry_path(copy, tmp_path) != entry_path(trace_file, tmp_path)


def test_invalid_traces_are_never_cached(tmp_path):
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps({"event": "write", "id": "a", "tokens": 0, "type": "user_input"}))
    cache = tmp_path / "cache"
    with pytest.raises(TraceError, match=r"bad.jsonl:1: "):
        load_trace_cached(bad, directory=cache)
    assert not cache.exists() or not list(cache.iterdir())
    with pytest.raises(TraceError, match="no such trace file"):
        load_trace_cached(tmp_path / "absent.jsonl", directory=cache)


def test_disabled_cache_writes_nothing(tmp_path, trace_file):
    cache = tmp_path / "cache"
    load_trace_cached(trace_file, enabled=False, directory=cache)
    assert not cache.exists()


def test_a_trace_without_requests_is_served_but_never_cached(tmp_path):
    """Runs refuse such a trace (nothing to replay): a refused run must leave no cache entry."""
    path = tmp_path / "writes.jsonl"
    write_trace(path, [{"event": "write", "id": "a", "tokens": 3, "type": "user_input"}])
    cache = tmp_path / "cache"
    assert load_trace_cached(path, directory=cache).item_id == ["a"]
    assert not entry_path(path, cache).exists()
