"""Reading, validating and writing trace files (format version 1, JSON Lines).

Validation is strict and exact about *where* a problem is: every :class:`TraceError` names the
file, the 1-based line and the field, because a trace with ten million lines that says only
"invalid trace" is useless to the person who has to fix the converter that wrote it.

Writing is atomic (temporary file in the target directory, then ``os.replace``) so an
interrupted conversion never leaves a half-written trace where a good one was.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import math
import os
from collections.abc import Iterable, Iterator
from pathlib import Path

import numpy as np
import orjson

from memlens.atomic import atomic_path
from memlens.trace import ANNOTATE, EVENT_KINDS, PIN, REQUEST, TYPE_CODE, UNPIN, WRITE, Trace

FORMAT_VERSION = 1
WRITE_FIELDS = frozenset(
    {"event", "id", "tokens", "type", "stream", "t", "text", "cost", "task", "session", "meta"}
)
REQUEST_FIELDS = frozenset({"event", "id", "needs", "stream", "t", "text", "meta"})
TARGET_FIELDS = frozenset({"event", "target", "stream", "t", "meta", "value", "note"})
KIND_CODE = {name: code for code, name in enumerate(EVENT_KINDS)}


class TraceError(ValueError):
    """A trace file is malformed.  ``str(err)`` is ``file:line: message``."""

    def __init__(self, path: str, line: int, field: str | None, message: str):
        self.path, self.line, self.field, self.message = path, line, field, message
        super().__init__(f"{path}:{line}: {message}")


def _open_text(path: Path):
    if path.suffix == ".gz":
        return io.TextIOWrapper(gzip.open(path, "rb"), encoding="utf-8")
    return open(path, encoding="utf-8")


def _is_number(x) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool)


class _Builder:
    """Accumulates validated events into lists, then freezes them into a :class:`Trace`."""

    def __init__(self, source: str):
        self.source = source
        self.header: dict = {}
        self.stream_index: dict[str, int] = {}
        self.stream_names: list[str] = []
        self.stream_last_t: list[float] = []
        self.ids: dict[str, tuple[int, int]] = {}  # id -> (kind, index)
        self.ev_kind: list[int] = []
        self.ev_stream: list[int] = []
        self.ev_ref: list[int] = []
        self.ev_t: list[float] = []
        self.ev_line: list[int] = []
        self.item_id: list[str] = []
        self.item_tokens: list[int] = []
        self.item_type: list[int] = []
        self.item_stream: list[int] = []
        self.item_t: list[float] = []
        self.item_cost: list[float] = []
        self.item_event: list[int] = []
        self.item_text: list[str] = []
        self.item_task: list[str] = []
        self.item_session: list[str] = []
        self.item_meta: list[dict] = []
        self.req_id: list[str] = []
        self.req_stream: list[int] = []
        self.req_t: list[float] = []
        self.req_event: list[int] = []
        self.req_text: list[str] = []
        self.req_meta: list[dict] = []
        self.needs_ptr: list[int] = [0]
        self.needs: list[int] = []
        self.annotations: dict[int, tuple[float | None, str | None]] = {}
        self.event_meta: dict[int, dict] = {}

    # -------------------------------------------------------------- helpers
    def err(self, line: int, field: str | None, message: str) -> TraceError:
        return TraceError(self.source, line, field, message)

    def _stream(self, line: int, obj: dict) -> int:
        name = obj.get("stream", "")
        if not isinstance(name, str):
            raise self.err(line, "stream", f'field "stream" must be a string, got {name!r}')
        s = self.stream_index.get(name)
        if s is None:
            s = self.stream_index[name] = len(self.stream_names)
            self.stream_names.append(name)
            self.stream_last_t.append(-math.inf)
        return s

    def _time(self, line: int, obj: dict, s: int) -> float:
        last = self.stream_last_t[s]
        if "t" not in obj:
            return last if last > -math.inf else 0.0
        t = obj["t"]
        if not _is_number(t) or not math.isfinite(t):
            raise self.err(line, "t", f'field "t" must be a finite number of seconds, got {t!r}')
        t = float(t)
        if t < last:
            raise self.err(
                line,
                "t",
                f'time goes backwards in stream "{self.stream_names[s]}": t={t} after t={last}',
            )
        self.stream_last_t[s] = t
        return t

    def _meta(self, line: int, obj: dict, known: frozenset) -> dict:
        meta = obj.get("meta", {})
        if not isinstance(meta, dict):
            raise self.err(line, "meta", f'field "meta" must be an object, got {meta!r}')
        extra = [k for k in obj if k not in known]
        if extra:
            meta = dict(meta)
            for k in extra:  # unknown fields are kept, not rejected
                meta.setdefault(k, obj[k])
        return meta

    def _str(self, line: int, obj: dict, name: str, default: str = "") -> str:
        v = obj.get(name, default)
        if not isinstance(v, str):
            raise self.err(line, name, f'field "{name}" must be a string, got {v!r}')
        return v

    def _new_id(self, line: int, obj: dict) -> str:
        if "id" not in obj:
            raise self.err(line, "id", 'missing field "id"')
        ident = obj["id"]
        if not isinstance(ident, str) or not ident:
            raise self.err(line, "id", f'field "id" must be a non-empty string, got {ident!r}')
        if ident in self.ids:
            raise self.err(line, "id", f'duplicate id "{ident}"')
        return ident

    def _event(self, kind: int, s: int, ref: int, t: float, line: int) -> int:
        e = len(self.ev_kind)
        self.ev_kind.append(kind)
        self.ev_stream.append(s)
        self.ev_ref.append(ref)
        self.ev_t.append(t)
        self.ev_line.append(line)
        return e

    # --------------------------------------------------------------- events
    def add(self, obj, line: int) -> None:
        if not isinstance(obj, dict):
            raise self.err(line, None, f"each line must be a JSON object, got {type(obj).__name__}")
        kind = obj.get("event")
        if kind == "write":
            self._write(obj, line)
        elif kind == "request":
            self._request(obj, line)
        elif kind in ("pin", "unpin", "annotate"):
            self._target(obj, line, KIND_CODE[kind])
        elif kind == "header":
            if self.ev_kind or self.header:
                raise self.err(line, "event", "a header may only be the first line")
            version = obj.get("version", FORMAT_VERSION)
            if version != FORMAT_VERSION:
                raise self.err(line, "version", f"unsupported trace format version {version!r}")
            self.header = dict(obj)
        elif kind is None:
            raise self.err(line, "event", 'missing field "event"')
        else:
            raise self.err(
                line,
                "event",
                f"unknown event {kind!r} (expected one of write, request, pin, unpin, annotate)",
            )

    def _write(self, obj: dict, line: int) -> None:
        ident = self._new_id(line, obj)
        if "tokens" not in obj:
            raise self.err(line, "tokens", f'write "{ident}": missing field "tokens"')
        tokens = obj["tokens"]
        if isinstance(tokens, float) and tokens.is_integer():
            tokens = int(tokens)
        if not isinstance(tokens, int) or isinstance(tokens, bool) or tokens <= 0:
            raise self.err(
                line,
                "tokens",
                f'write "{ident}": "tokens" must be a positive integer, got {tokens!r}',
            )
        if "type" not in obj:
            raise self.err(line, "type", f'write "{ident}": missing field "type"')
        code = TYPE_CODE.get(obj["type"]) if isinstance(obj["type"], str) else None
        if code is None:
            raise self.err(
                line,
                "type",
                f'write "{ident}": "type" must be one of {", ".join(TYPE_CODE)}, got {obj["type"]!r}',
            )
        cost = obj.get("cost", 0.0)
        if not _is_number(cost) or not math.isfinite(cost):
            raise self.err(line, "cost", f'write "{ident}": "cost" must be a number, got {cost!r}')
        s = self._stream(line, obj)
        t = self._time(line, obj, s)
        i = len(self.item_id)
        e = self._event(WRITE, s, i, t, line)
        self.ids[ident] = (WRITE, i)
        self.item_id.append(ident)
        self.item_tokens.append(tokens)
        self.item_type.append(code)
        self.item_stream.append(s)
        self.item_t.append(t)
        self.item_cost.append(float(cost))
        self.item_event.append(e)
        self.item_text.append(self._str(line, obj, "text"))
        self.item_task.append(self._str(line, obj, "task"))
        self.item_session.append(self._str(line, obj, "session"))
        self.item_meta.append(self._meta(line, obj, WRITE_FIELDS))

    def _request(self, obj: dict, line: int) -> None:
        ident = self._new_id(line, obj)
        if "needs" not in obj:
            raise self.err(line, "needs", f'request "{ident}": missing field "needs"')
        needs = obj["needs"]
        if not isinstance(needs, list):
            raise self.err(line, "needs", f'request "{ident}": "needs" must be a list of ids')
        s = self._stream(line, obj)
        seen: set[int] = set()
        resolved: list[int] = []
        for need in needs:
            if not isinstance(need, str):
                raise self.err(
                    line,
                    "needs",
                    f'request "{ident}": "needs" entries must be strings, got {need!r}',
                )
            hit = self.ids.get(need)
            if hit is None or hit[0] != WRITE or self.item_stream[hit[1]] != s:
                raise self.err(
                    line,
                    "needs",
                    f'request needs "{need}", which no earlier write in stream '
                    f'"{self.stream_names[s]}" defines',
                )
            if hit[1] not in seen:  # a repeated id counts once
                seen.add(hit[1])
                resolved.append(hit[1])
        t = self._time(line, obj, s)
        r = len(self.req_id)
        e = self._event(REQUEST, s, r, t, line)
        self.ids[ident] = (REQUEST, r)
        self.req_id.append(ident)
        self.req_stream.append(s)
        self.req_t.append(t)
        self.req_event.append(e)
        self.req_text.append(self._str(line, obj, "text"))
        self.req_meta.append(self._meta(line, obj, REQUEST_FIELDS))
        self.needs.extend(resolved)
        self.needs_ptr.append(len(self.needs))

    def _target(self, obj: dict, line: int, kind: int) -> None:
        name = EVENT_KINDS[kind]
        if "target" not in obj:
            raise self.err(line, "target", f'{name}: missing field "target"')
        target = obj["target"]
        hit = self.ids.get(target) if isinstance(target, str) else None
        if hit is None or hit[0] != WRITE:
            raise self.err(
                line, "target", f'{name} targets "{target}", which no earlier write defines'
            )
        i = hit[1]
        s = self.item_stream[i]
        if "stream" in obj and obj["stream"] != self.stream_names[s]:
            raise self.err(
                line,
                "stream",
                f'{name} of "{target}" says stream {obj["stream"]!r}, but "{target}" '
                f'was written in stream "{self.stream_names[s]}"',
            )
        value = note = None
        if kind == ANNOTATE:
            if "value" not in obj and "note" not in obj:
                raise self.err(line, "value", 'annotate needs "value" and/or "note"')
            if "value" in obj:
                value = obj["value"]
                if not _is_number(value) or not 0.0 <= value <= 1.0:
                    raise self.err(
                        line, "value", f'annotate "value" must be a number in [0, 1], got {value!r}'
                    )
                value = float(value)
            if "note" in obj:
                note = self._str(line, obj, "note")
        t = self._time(line, obj, s)
        e = self._event(kind, s, i, t, line)
        if kind == ANNOTATE:
            self.annotations[e] = (value, note)
        meta = self._meta(line, obj, TARGET_FIELDS)
        if meta:
            self.event_meta[e] = meta

    # --------------------------------------------------------------- freeze
    def build(self, sha256: str) -> Trace:
        return Trace(
            source=self.source,
            sha256=sha256,
            header=self.header,
            stream_names=self.stream_names,
            ev_kind=np.asarray(self.ev_kind, dtype=np.int8),
            ev_stream=np.asarray(self.ev_stream, dtype=np.int32),
            ev_ref=np.asarray(self.ev_ref, dtype=np.int32),
            ev_t=np.asarray(self.ev_t, dtype=np.float64),
            ev_line=np.asarray(self.ev_line, dtype=np.int64),
            item_id=self.item_id,
            item_tokens=np.asarray(self.item_tokens, dtype=np.int64),
            item_type=np.asarray(self.item_type, dtype=np.int8),
            item_stream=np.asarray(self.item_stream, dtype=np.int32),
            item_t=np.asarray(self.item_t, dtype=np.float64),
            item_cost=np.asarray(self.item_cost, dtype=np.float64),
            item_event=np.asarray(self.item_event, dtype=np.int64),
            item_text=self.item_text,
            item_task=self.item_task,
            item_session=self.item_session,
            item_meta=self.item_meta,
            req_id=self.req_id,
            req_stream=np.asarray(self.req_stream, dtype=np.int32),
            req_t=np.asarray(self.req_t, dtype=np.float64),
            req_event=np.asarray(self.req_event, dtype=np.int64),
            req_text=self.req_text,
            req_meta=self.req_meta,
            needs_ptr=np.asarray(self.needs_ptr, dtype=np.int64),
            needs=np.asarray(self.needs, dtype=np.int32),
            annotations=self.annotations,
            event_meta=self.event_meta,
        )


def load_trace(path: str | os.PathLike) -> Trace:
    """Parse and validate a ``.jsonl`` / ``.jsonl.gz`` trace.  Raises :class:`TraceError`.

    ``Trace.sha256`` is *the* trace hash, defined once: the SHA-256 of the trace's JSON Lines
    text, decompressed, UTF-8, blank lines left out, every line ended by one ``\\n``.  ``trace_from_events`` hashes
    the lines ``write_trace`` would write, so writing events and loading them back (gzip or
    not) gives the same hash.  (The parsed-trace cache keys entries by the file's raw bytes:
    that is a cache key, not the trace's identity.)
    """
    path = Path(path)
    if not path.exists():
        raise TraceError(str(path), 0, None, "no such trace file")
    builder = _Builder(str(path))
    digest = hashlib.sha256()
    loads = orjson.loads
    with _open_text(path) as fh:
        try:
            for line_no, raw in enumerate(fh, start=1):
                if not raw.strip():
                    continue
                digest.update(raw.rstrip("\r\n").encode("utf-8") + b"\n")
                try:
                    obj = loads(raw)
                except orjson.JSONDecodeError as exc:
                    raise builder.err(line_no, None, f"malformed JSON: {exc}") from None
                builder.add(obj, line_no)
        except (UnicodeDecodeError, EOFError, OSError, gzip.BadGzipFile) as exc:
            if isinstance(exc, TraceError):
                raise
            raise TraceError(str(path), 0, None, f"cannot read trace: {exc}") from None
    return builder.build(digest.hexdigest())


def trace_from_events(events: Iterable[dict], source: str = "<events>") -> Trace:
    """Build a trace from event dicts (tests, generators), with the same validation as files."""
    builder = _Builder(source)
    digest = hashlib.sha256()
    for line_no, obj in enumerate(events, start=1):
        digest.update(orjson.dumps(obj) + b"\n")  # the line write_trace writes for it
        builder.add(obj, line_no)
    return builder.build(digest.hexdigest())


def iter_trace_lines(events: Iterable[dict]) -> Iterator[bytes]:
    for obj in events:
        yield orjson.dumps(obj) + b"\n"


def write_trace(path: str | os.PathLike, events: Iterable[dict], header: dict | None = None) -> int:
    """Stream events to ``path`` (gzip if it ends in ``.gz``) atomically; returns lines written.

    Events are written as they come, so a generator can produce traces far larger than memory.
    """
    path = Path(path)
    n = 0
    with atomic_path(path) as tmp:
        raw = open(tmp, "wb")
        fh = (
            gzip.GzipFile(filename="", fileobj=raw, mode="wb", mtime=0)
            if path.suffix == ".gz"
            else raw
        )
        try:
            if header is not None:
                fh.write(orjson.dumps({"event": "header", "version": FORMAT_VERSION, **header}))
                fh.write(b"\n")
            buf: list[bytes] = []
            for line in iter_trace_lines(events):
                buf.append(line)
                n += 1
                if len(buf) >= 4096:
                    fh.write(b"".join(buf))
                    buf.clear()
            fh.write(b"".join(buf))
        finally:
            if fh is not raw:
                fh.close()
            raw.close()
    return n


__all__ = [
    "FORMAT_VERSION",
    "TraceError",
    "load_trace",
    "trace_from_events",
    "write_trace",
    "PIN",
    "UNPIN",
    "REQUEST",
]
