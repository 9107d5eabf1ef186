"""Blank-line and decompression-ratio limits (issue 33, case 4): a few megabytes of gzip that
inflate to gigabytes of newlines are refused, quickly, with one line naming the setting.

Expectations are counted by hand or by a plain reading of the file (how many blank lines,
where the one past the limit is), never read back from the reader under test."""

from __future__ import annotations

import gzip
from pathlib import Path

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from memlens.testing import rq, w
from memlens.trace import lines as trace_lines
from memlens.trace.io import TraceError, load_trace, load_trace_exact, trace_from_events
from memlens.trace.limits import MAX_BLANK_LINES, MAX_DECOMPRESSION_RATIO, TraceLimits

HEADER = {"event": "header", "version": 1}
GOOD = [HEADER, w("a", 3, "user_input", stream="s", t=1), w("b", 5, stream="s", t=2),
        rq("q", "a", "b", stream="s", t=3)]  # fmt: skip


def newline_bomb(path: Path, mebibytes: int) -> Path:
    """A header, then ``mebibytes`` MiB of newlines as concatenated gzip members: about a
    kilobyte on disk per MiB (4 GiB: the issue's 4 MB file)."""
    member = gzip.compress(b"\n" * (1 << 20), mtime=0)
    with open(path, "wb") as f:
        f.write(gzip.compress(orjson.dumps(HEADER) + b"\n", mtime=0))
        for _ in range(mebibytes):
            f.write(member)
    return path


def test_the_defaults_are_documented_values():
    assert (TraceLimits().max_blank_lines, TraceLimits().max_decompression_ratio) == (
        MAX_BLANK_LINES, MAX_DECOMPRESSION_RATIO) == (1_000_000, 200.0)  # fmt: skip


def test_a_newline_bomb_is_refused_at_the_first_blank_line_past_the_limit(tmp_path):
    bomb = newline_bomb(tmp_path / "bomb.jsonl.gz", 3)  # 3 MiB of newlines, 3 kB on disk
    for loader in (load_trace, load_trace_exact):
        with pytest.raises(TraceError) as err:
            loader(bomb)
        # line 1 is the header; blank lines 2 .. 1,000,001 are allowed; 1,000,002 is one too many
        assert err.value.line == MAX_BLANK_LINES + 2
        assert "trace_limits.max_blank_lines" in str(err.value)


def test_the_issue_s_4_gib_bomb_is_refused(tmp_path):
    """4 GiB of newlines in 4.3 MB: refused after the first million lines (the time is
    measured by benchmarks/bench_bad_inputs.py, not asserted here)."""
    bomb = newline_bomb(tmp_path / "bomb.jsonl.gz", 4096)
    assert bomb.stat().st_size < 5_000_000
    with pytest.raises(TraceError, match="more than 1,000,000 blank lines"):
        load_trace(bomb)


@settings(max_examples=40, deadline=None)
@given(blanks=st.lists(st.tuples(st.integers(0, 3), st.sampled_from([b"", b" ", b"\t "])),
                       max_size=8),
       limit=st.integers(0, 6), gz=st.booleans())  # fmt: skip
def test_blank_lines_load_as_before_up_to_the_limit(tmp_path_factory, blanks, limit, gz):
    """Blank lines anywhere: the trace (and its hash) is the one without them while there are
    at most ``limit``; one more is refused at exactly its line."""
    lines = [orjson.dumps(e) for e in GOOD]
    for after, blank in blanks:  # after line ``after`` (0: before the header)
        lines.insert(min(after, len(lines)), blank)
    text = b"".join(line + b"\n" for line in lines)
    path = tmp_path_factory.mktemp("blank") / ("t.jsonl.gz" if gz else "t.jsonl")
    path.write_bytes(gzip.compress(text) if gz else text)
    numbers = [k + 1 for k, line in enumerate(lines) if not line.strip()]
    limits = TraceLimits(max_blank_lines=limit)
    if len(numbers) <= limit:
        assert load_trace(path, limits=limits).sha256 == trace_from_events(GOOD).sha256
    else:
        with pytest.raises(TraceError) as err:
            load_trace(path, limits=limits)
        assert err.value.line == numbers[limit] and "max_blank_lines" in str(err.value)


def test_the_decompression_ratio_is_checked_past_its_threshold(tmp_path, monkeypatch):
    """The bundled-style trace compresses about 9 times: under a limit of 2 it is refused
    (once past the check threshold, set to 0 here); under the default it loads."""
    events = [HEADER] + [w(f"i{k}", 3, stream="s", t=k, text="the same words " * 8)
                         for k in range(400)] + [rq("q", "i0", stream="s", t=1000)]  # fmt: skip
    text = b"".join(orjson.dumps(e) + b"\n" for e in events)
    path = tmp_path / "t.jsonl.gz"
    path.write_bytes(gzip.compress(text))
    assert len(text) / path.stat().st_size > 5  # the premise: a high ratio
    monkeypatch.setattr(trace_lines, "RATIO_CHECK_BYTES", 0)
    with pytest.raises(TraceError, match="trace_limits.max_decompression_ratio"):
        load_trace(path, limits=TraceLimits(max_decompression_ratio=2))
    assert load_trace(path).n_events == len(events) - 1
    plain = tmp_path / "t.jsonl"
    plain.write_bytes(text)  # an uncompressed file has no ratio to check
    assert load_trace(plain, limits=TraceLimits(max_decompression_ratio=1)).n_events == 401


@pytest.mark.parametrize("kw", [{"max_blank_lines": -1}, {"max_blank_lines": 1.5},
                                {"max_blank_lines": True}, {"max_decompression_ratio": 0.5},
                                {"max_decompression_ratio": float("inf")},
                                {"max_decompression_ratio": float("nan")}])  # fmt: skip
def test_bad_limits_are_refused(kw):
    with pytest.raises(ValueError, match="trace_limits"):
        TraceLimits(**kw)


def test_the_limits_are_settings_of_every_replay_command(tmp_path):
    from memlens.config.compose import run_settings

    bomb = newline_bomb(tmp_path / "bomb.jsonl.gz", 1)
    settings = run_settings([f"trace={bomb}", "trace_limits.max_blank_lines=10",
                             "mlflow.enabled=false", "trace_cache=false"])  # fmt: skip
    assert settings.trace_limits.max_blank_lines == 10
    from memlens.runs.pipeline import load_trace as run_loader

    with pytest.raises(TraceError) as err:
        run_loader(settings)
    assert err.value.line == 12
    with pytest.raises(ValueError, match="trace_limits.max_decompression_ratio"):
        run_settings(["trace_limits.max_decompression_ratio=0"])
