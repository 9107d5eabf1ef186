"""A live session's record: the write-ahead log, in trace format 1.1.

Every event is appended as one JSON line and flushed before the call that made it returns, so
what the manager has decided is what the record replays to.  The first line is the header,
holding the resolved policy config (``"live"``), so the record alone says how to replay it.

* ``fsync``: ``"always"`` (after every event: survives a power cut, costs a disk round trip),
  ``"close"`` (the default: the operating system has every event at once, the disk at close)
  or ``"never"``.
* Gzip (``.jsonl.gz``): each opening appends one gzip member, flushed per event; a reader needs
  the member's end, so a gzip record survives a crash of the process only up to its last
  ``close``.  Prefer plain ``.jsonl`` for a long session.
* One writer: the record is locked (``fcntl.flock``) while a manager holds it, and a second
  manager, in this process or another, is refused with :class:`RecordLocked`.
* A line torn by a crash mid-write (no final newline) was never acknowledged: reopening cuts
  it off (plain records).
"""

from __future__ import annotations

import fcntl
import gzip
import os
from pathlib import Path

import orjson

from memlens.trace.limits import ALTERNATIVES_VERSION

FSYNC = ("always", "close", "never")
HEADER_KEY = "live"  # the header field holding the session's resolved config


class RecordLocked(RuntimeError):
    """Another manager has the record open."""


class RecordLog:
    """An open record, locked, appending (module docstring)."""

    def __init__(self, path: str | os.PathLike, fsync: str = "close") -> None:
        if fsync not in FSYNC:
            raise ValueError(f"fsync must be one of {', '.join(FSYNC)}, got {fsync!r}")
        self.path = Path(path)
        name = self.path.name
        if not (name.endswith(".jsonl") or name.endswith(".jsonl.gz")):
            raise ValueError(f"record: {str(path)!r} must end in .jsonl or .jsonl.gz")
        self.fsync = fsync
        self.gz = name.endswith(".gz")
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._raw = open(self.path, "ab")  # noqa: SIM115 - held open for the session
        try:
            fcntl.flock(self._raw.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            self._raw.close()
            raise RecordLocked(f"record {self.path}: another MemoryManager has it open (this "
                               "process or another); close it first, or use another record") from None  # fmt: skip
        self.existed = self._raw.tell() > 0
        if self.existed and not self.gz:
            _cut_torn_tail(self._raw)
        self._out = (gzip.GzipFile(filename="", fileobj=self._raw, mode="ab", mtime=0)
                     if self.gz else self._raw)  # fmt: skip

    def write_header(self, config: dict, session: str) -> None:
        """The first line: the config, and the session's id (what keys its cached contexts)."""
        self.append({"event": "header", "version": ALTERNATIVES_VERSION, HEADER_KEY: config,
                     "session": session})  # fmt: skip

    def append(self, event: dict) -> None:
        """One event, flushed (and synced with ``fsync="always"``) before returning."""
        self._out.write(orjson.dumps(event) + b"\n")
        self._out.flush()
        if self.gz:
            self._raw.flush()
        if self.fsync == "always":
            os.fsync(self._raw.fileno())

    def close(self) -> None:
        if self._raw.closed:
            return
        if self._out is not self._raw:
            self._out.close()  # writes the gzip member's end
        self._raw.flush()
        if self.fsync != "never":
            os.fsync(self._raw.fileno())
        self._raw.close()  # releases the lock


def _cut_torn_tail(fh) -> None:
    """Drop a last line without its newline (an event whose write a crash interrupted)."""
    size = fh.tell()
    with open(fh.name, "rb") as rd:
        rd.seek(max(0, size - 1))
        if rd.read(1) == b"\n":
            return
        pos = size
        while pos > 0:
            step = min(65536, pos)
            rd.seek(pos - step)
            chunk = rd.read(step)
            k = chunk.rfind(b"\n")
            if k >= 0:
                pos = pos - step + k + 1
                break
            pos -= step
    fh.truncate(pos)
    fh.seek(pos)


def read_header(path: str | os.PathLike, key: str = HEADER_KEY):
    """The ``live`` config in a record's header; ``ValueError`` naming the file if absent.
    (``key="session"``: the session's id, None in a record made before it was written.)"""
    opener = gzip.open if str(path).endswith(".gz") else open
    with opener(path, "rb") as fh:
        first = fh.readline()
    try:
        header = orjson.loads(first)
    except orjson.JSONDecodeError:
        header = None
    if not isinstance(header, dict) or not isinstance(header.get(HEADER_KEY), dict):
        raise ValueError(f"{path}:1: header: not a live session's record (its header has no "
                         f'"{HEADER_KEY}" config)')  # fmt: skip
    return header[HEADER_KEY] if key == HEADER_KEY else header.get(key)
