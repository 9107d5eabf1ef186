"""Reading a trace file's lines safely: bounded, byte-exact, every failure named by its line.

A trace path can be anything a user types: a directory, ``/dev/zero`` (endless, no newline), a
FIFO, a gzip file cut short or with a corrupt block, text that is not UTF-8.  Each of these
must end in one :class:`TraceError` naming the file and the line, never in a traceback, a hang
or gigabytes of memory:

* :func:`check_trace_file` refuses anything but a regular file before a byte is read;
* :func:`read_lines` reads fixed-size blocks (gzip when the name ends in ``.gz`` or the data
  starts with the gzip magic bytes) and splits them on ``\\n`` only, so a lone ``\\r`` inside a
  line does not start a new one and line numbers are those of any editor;
* a line longer than ``max_line_bytes`` (default :data:`MAX_LINE_BYTES`) stops the read as soon
  as that many bytes are buffered;
* more than ``trace_limits.max_blank_lines`` blank lines, or a gzip stream that decompresses
  to more than ``trace_limits.max_decompression_ratio`` times the bytes read of the file
  (``memlens.trace.limits.TraceLimits``), stop it too: a few megabytes of gzip that inflate to
  gigabytes of newlines are refused within a second, not read for minutes;
* a read error (corrupt or truncated gzip, an I/O error) names the first line that could not be
  read in full: the file is decompressed again, in small steps, up to the failure to find it.
"""

from __future__ import annotations

import contextlib
import gzip
import os
import stat
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO

from memlens.trace.limits import RATIO_CHECK_BYTES, TraceLimits

#: The longest line a trace may have, in bytes (one event; texts included).
MAX_LINE_BYTES = 8 << 20
_BLOCK = 1 << 20
_GZIP_MAGIC = b"\x1f\x8b"
_READ_ERRORS = (OSError, EOFError, zlib.error)  # gzip.BadGzipFile is an OSError


class TraceError(ValueError):
    """A trace file is malformed.  ``str(err)`` is ``file:line: message``."""

    def __init__(self, path: str, line: int, field: str | None, message: str):
        self.path, self.line, self.field, self.message = path, line, field, message
        super().__init__(f"{path}:{line}: {message}")


def check_trace_file(path: str | os.PathLike) -> None:
    """Raise :class:`TraceError` (line 0) unless ``path`` is an existing regular file."""
    source = str(path)
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        raise TraceError(source, 0, None, "no such trace file") from None
    except OSError as exc:
        raise TraceError(source, 0, None, f"cannot read trace: {exc.strerror or exc}") from None
    if not stat.S_ISREG(mode):
        kind = ("a directory" if stat.S_ISDIR(mode) else "a FIFO (pipe)" if stat.S_ISFIFO(mode)
                else "a device" if stat.S_ISCHR(mode) or stat.S_ISBLK(mode)
                else "a socket" if stat.S_ISSOCK(mode) else "not a file")  # fmt: skip
        raise TraceError(source, 0, None, f"not a regular file ({kind}): a trace is a .jsonl "
                                          "or .jsonl.gz file")  # fmt: skip


def _is_gzip(path: str | os.PathLike, raw: BinaryIO) -> bool:
    magic = raw.read(2)
    raw.seek(0)
    return Path(path).suffix == ".gz" or magic == _GZIP_MAGIC


def open_trace(path: str | os.PathLike) -> BinaryIO:
    """``path`` opened for reading bytes, decompressing if it is gzip (by name or content)."""
    try:
        raw = open(path, "rb")  # noqa: SIM115 - returned to the caller, who closes it
        gz = _is_gzip(path, raw)
    except OSError as exc:
        raise TraceError(str(path), 0, None, f"cannot read trace: {exc.strerror or exc}") from None
    return gzip.GzipFile(filename="", fileobj=raw, mode="rb") if gz else raw


def _problem(exc: BaseException) -> str:
    if isinstance(exc, EOFError):
        return "cannot read trace: the gzip data ends early (a truncated file?)"
    if isinstance(exc, zlib.error):
        return f"cannot read trace: corrupt gzip data ({exc})"
    if isinstance(exc, gzip.BadGzipFile):
        return f"cannot read trace: bad gzip data ({exc})"
    return f"cannot read trace: {getattr(exc, 'strerror', None) or exc}"


def read_lines(path: str | os.PathLike, max_line_bytes: int | None = None,
               limits: TraceLimits | None = None) -> Iterator[tuple[int, bytes]]:  # fmt: skip
    """``(line number, bytes without the \\n)`` for every line of the trace at ``path``."""
    limit = MAX_LINE_BYTES if max_line_bytes is None else max_line_bytes
    if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
        raise ValueError(f"max_line_bytes must be a positive integer, got {limit!r}")
    check_trace_file(path)
    with open_trace(path) as fh:
        yield from _split(fh, path, limit, limits or TraceLimits())


def ratio_error(fh: BinaryIO, produced: int, limits: TraceLimits) -> str | None:
    """Why a gzip stream that has produced ``produced`` bytes is refused, or None: past
    :data:`RATIO_CHECK_BYTES`, more than ``max_decompression_ratio`` bytes out per byte read."""
    raw = getattr(fh, "fileobj", None)
    if raw is None or produced < RATIO_CHECK_BYTES:
        return None
    ratio = limits.max_decompression_ratio
    if produced <= ratio * max(raw.tell(), 1):
        return None
    return (
        f"the gzip data decompresses to more than {ratio:g} times its size "
        "(trace_limits.max_decompression_ratio): a decompression bomb?"
    )


def _too_many_blank(source: str, line: int, limits: TraceLimits) -> TraceError:
    return TraceError(source, line, None, f"more than {limits.max_blank_lines:,} blank lines "
                                          "(trace_limits.max_blank_lines)")  # fmt: skip


def _too_long(source: str, line: int, limit: int) -> TraceError:
    return TraceError(source, line, None, f"line longer than {limit:,} bytes (max_line_bytes): "
                                          "is this a JSON Lines trace?")  # fmt: skip


def _split(fh: BinaryIO, path: str | os.PathLike, limit: int,
           limits: TraceLimits) -> Iterator[tuple[int, bytes]]:  # fmt: skip
    source, line_no = str(path), 0
    parts: list[bytes] = []  # the unfinished line
    pending = produced = blank = 0
    while True:
        try:
            block = fh.read(_BLOCK)
        except _READ_ERRORS as exc:
            raise TraceError(source, _failing_line(path), None, _problem(exc)) from None
        if not block:
            break
        produced += len(block)
        if (problem := ratio_error(fh, produced, limits)) is not None:
            raise TraceError(source, line_no + 1, None, problem)
        nl = block.find(b"\n")
        if nl < 0:
            parts.append(block)
            pending += len(block)
            if pending > limit:
                raise _too_long(source, line_no + 1, limit)
            continue
        parts.append(block[:nl])
        lines = block[nl + 1 :].split(b"\n")
        lines[0:0] = [b"".join(parts)]
        tail = lines.pop()
        for line in lines:
            line_no += 1
            if len(line) > limit:
                raise _too_long(source, line_no, limit)
            if not line or line.isspace():
                blank += 1
                if blank > limits.max_blank_lines:
                    raise _too_many_blank(source, line_no, limits)
            yield line_no, line
        parts, pending = [tail], len(tail)
        if pending > limit:
            raise _too_long(source, line_no + 1, limit)
    if pending:
        yield line_no + 1, b"".join(parts)


def _failing_line(path: str | os.PathLike) -> int:
    """The line in which reading ``path`` fails: read it again, in 64 KiB steps and then, from
    the last good step, byte by byte (straight from the decompressor, without the 8 KiB read
    buffer, so the count is exact), counting the newlines of everything that could be read."""
    good = newlines = 0
    with contextlib.suppress(*_READ_ERRORS), open_trace(path) as fh:
        while piece := fh.read(1 << 16):
            good += len(piece)
            newlines += piece.count(b"\n")
    with contextlib.suppress(*_READ_ERRORS), open(path, "rb") as raw:
        reader = getattr(gzip, "_GzipReader", None)
        gz = _is_gzip(path, raw)
        fh = raw if not gz else reader(raw) if reader is not None else gzip.GzipFile(fileobj=raw)
        while good > 0:
            piece = fh.read(min(good, _BLOCK))
            if not piece:
                break
            good -= len(piece)
        for _ in range(1 << 16):
            piece = fh.read(1)
            if not piece:
                break
            newlines += piece == b"\n"
    return newlines + 1
