"""Reading, validating and writing trace files (format versions 1 and 1.1, JSON Lines).

Format 1.1 adds one thing to 1: an entry of a request's ``needs`` may be a list of alternative
ids (``"needs": ["m1", ["m5", "m9"]]``: m1, and m5 or m9), for a need that any of several
earlier items can serve.  A trace says it uses them with ``"version": "1.1"`` in its header; in
a version 1 trace (no header, or ``"version": 1``) a nested list is an error.

Validation is strict and exact about *where* a problem is: every :class:`TraceError` names the
file, the 1-based line and the field, because a trace with ten million lines that says only
"invalid trace" is useless to the person who has to fix the converter that wrote it.  Nothing a
file can contain gets past as another exception: lines are read by ``memlens.trace.lines``
(regular files only, bounded line length, gzip and I/O failures named by line), undecodable
bytes are named by line and byte, numbers must fit their columns (``tokens`` at most
:data:`MAX_TOKENS`, times and costs finite and at most :data:`MAX_MAGNITUDE`), and no event may
nest deeper than :data:`MAX_DEPTH`.

The parser holds no Python object per event: columns grow in ``array`` buffers and packed
strings (``memlens.trace.packed``), ids are resolved through ``memlens.trace.idtable``, and the text, task,
session and meta columns of a large trace spill to memory-mapped temporary files, so that a
replay which never reads them never holds them in memory.

Writing is atomic (temporary file in the target directory, then ``os.replace``) so an
interrupted conversion never leaves a half-written trace where a good one was.
"""

from __future__ import annotations

import gzip
import hashlib
import math
import os
from array import array
from collections.abc import Iterable, Iterator
from pathlib import Path

import numpy as np
import orjson

from memlens._util.atomic import atomic_path
from memlens._util.malloc import fix_mmap_threshold, release_free_memory
from memlens.trace import limits as trace_limits
from memlens.trace.idtable import IdTable
from memlens.trace.limits import (
    ALTERNATIVES_VERSION,
    FORMAT_VERSION,
    FORMAT_VERSION_1,
    KIND_CODE,
    MAX_DEPTH,
    MAX_EVENTS,
    MAX_LINE,
    MAX_MAGNITUDE,
    MAX_TOKENS,
    REQUEST_FIELDS,
    TARGET_FIELDS,
    VERSIONS,
    WRITE_FIELDS,
    TraceLimits,
    depth_error,
    finite_number,
    shown,
)
from memlens.trace.lines import MAX_LINE_BYTES, TraceError, check_trace_file, read_lines
from memlens.trace.model import ANNOTATE, EVENT_KINDS, PIN, REQUEST, TYPE_CODE, UNPIN, WRITE, Trace
from memlens.trace.packed import JSONBuilder, StringsBuilder


def check_depth(source: str, line: int, raw: bytes | None, obj) -> None:
    """Refuse an event nested deeper than :data:`MAX_DEPTH` (``raw``: its JSON text, if known,
    for a cheap first test: fewer brackets than that cannot nest that deep)."""
    if raw is None or raw.count(b"[") + raw.count(b"{") > MAX_DEPTH:
        problem = depth_error(obj)
        if problem is not None:
            raise TraceError(source, line, *problem)


class _Builder:
    """Accumulates validated events into compact columns, then freezes them into a Trace."""

    def __init__(self, source: str, spill_bytes: int | None = None):
        self.source = source
        self.header: dict = {}
        self.stream_index: dict[str, int] = {}
        self.stream_names: list[str] = []
        self.stream_last_t: list[float] = []
        self.ev_kind, self.ev_stream, self.ev_ref = array("b"), array("i"), array("i")
        self.ev_t, self.ev_line = array("d"), array("i")  # line numbers below 2**31
        self.item_tokens, self.item_type, self.item_stream = array("q"), array("b"), array("i")
        self.item_t, self.item_cost, self.item_event = array("d"), array("d"), array("q")
        self.item_id = StringsBuilder()
        self.item_text, self.item_task, self.item_session = (
            StringsBuilder(spill_bytes), StringsBuilder(spill_bytes), StringsBuilder(spill_bytes))  # fmt: skip
        self.item_meta = JSONBuilder(spill_bytes)
        self.req_id = StringsBuilder()
        self.req_stream, self.req_t, self.req_event = array("i"), array("d"), array("q")
        self.req_text, self.req_meta = StringsBuilder(spill_bytes), JSONBuilder(spill_bytes)
        self.needs_ptr, self.needs = array("q", [0]), array("i")  # a group's first alternative
        # groups of 2+ alternatives only (format 1.1): the need, and its other alternatives
        self.alt_need, self.alt_ptr, self.alt_items = array("q"), array("q", [0]), array("i")
        self.version = FORMAT_VERSION_1
        self.annotations: dict[int, tuple[float | None, str | None]] = {}
        self.event_meta: dict[int, dict] = {}
        # id -> 2 * index + (0 for a write, 1 for a request)
        self.ids = IdTable(self._id_of)

    def _id_of(self, code: int) -> str:
        return (self.req_id if code & 1 else self.item_id).get(code >> 1)

    # -------------------------------------------------------------- helpers
    def err(self, line: int, field: str | None, message: str) -> TraceError:
        return TraceError(self.source, line, field, message)

    def _stream(self, line: int, obj: dict) -> int:
        name = obj.get("stream", "")
        if not isinstance(name, str):
            raise self.err(line, "stream", f'field "stream" must be a string, got {shown(name)}')
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
        t = finite_number(obj["t"], MAX_MAGNITUDE)
        if t is None:
            raise self.err(line, "t", f'field "t" must be a finite number of seconds (at most '
                                      f"{MAX_MAGNITUDE:g} in size), got {shown(obj['t'])}")  # fmt: skip
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
            raise self.err(line, "meta", f'field "meta" must be an object, got {shown(meta)}')
        extra = [k for k in obj if k not in known]
        if extra:
            meta = dict(meta)
            for k in extra:  # unknown fields are kept, not rejected
                meta.setdefault(k, obj[k])
        return meta

    def _str(self, line: int, obj: dict, name: str, default: str = "") -> str:
        v = obj.get(name, default)
        if not isinstance(v, str):
            raise self.err(line, name, f'field "{name}" must be a string, got {shown(v)}')
        return v

    def _new_id(self, line: int, obj: dict) -> tuple[str, int, int]:
        """The event's new id, and where it goes in the id table (see ``IdTable.find``)."""
        if "id" not in obj:
            raise self.err(line, "id", 'missing field "id"')
        ident = obj["id"]
        if not isinstance(ident, str) or not ident:
            raise self.err(line, "id", f'field "id" must be a non-empty string, got {shown(ident)}')
        code, slot, h = self.ids.find(ident)
        if code >= 0:
            raise self.err(line, "id", f'duplicate id "{ident}"')
        return ident, slot, h

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
        if len(self.ev_kind) >= MAX_EVENTS or line > MAX_LINE:
            raise self.err(line, None, f"more than {MAX_EVENTS:,} events or {MAX_LINE:,} lines: "
                                       "too large a trace")  # fmt: skip
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
            if len(self.ev_kind) or self.header:
                raise self.err(line, "event", "a header may only be the first line")
            version = obj.get("version", FORMAT_VERSION)
            known = VERSIONS.get(version) if isinstance(version, (int, float, str)) else None
            if known is None or isinstance(version, bool):
                raise self.err(line, "version", f"unsupported trace format version "
                                                f'{shown(version)} (expected 1 or "1.1")')  # fmt: skip
            self.version = known
            self.header = dict(obj)
        elif kind is None:
            raise self.err(line, "event", 'missing field "event"')
        else:
            raise self.err(
                line,
                "event",
                f"unknown event {shown(kind)} (expected one of write, request, pin, unpin, "
                "annotate)",
            )

    def _tokens(self, line: int, obj: dict, ident: str) -> int:
        if "tokens" not in obj:
            raise self.err(line, "tokens", f'write "{ident}": missing field "tokens"')
        given = tokens = obj["tokens"]
        if isinstance(tokens, float) and tokens.is_integer():
            tokens = int(tokens)
        if not isinstance(tokens, int) or isinstance(tokens, bool) or not 0 < tokens <= MAX_TOKENS:
            raise self.err(line, "tokens", f'write "{ident}": "tokens" must be a positive integer '
                                           f"(at most {MAX_TOKENS}), got {shown(given)}")  # fmt: skip
        return tokens

    def _write(self, obj: dict, line: int) -> None:
        ident, slot, h = self._new_id(line, obj)
        tokens = self._tokens(line, obj, ident)
        if "type" not in obj:
            raise self.err(line, "type", f'write "{ident}": missing field "type"')
        code = TYPE_CODE.get(obj["type"]) if isinstance(obj["type"], str) else None
        if code is None:
            raise self.err(line, "type", f'write "{ident}": "type" must be one of '
                                         f'{", ".join(TYPE_CODE)}, got {shown(obj["type"])}')  # fmt: skip
        cost = finite_number(obj.get("cost", 0.0), MAX_MAGNITUDE)
        if cost is None:
            raise self.err(line, "cost", f'write "{ident}": "cost" must be a number (at most '
                                         f'{MAX_MAGNITUDE:g} in size), got {shown(obj["cost"])}')  # fmt: skip
        s = self._stream(line, obj)
        t = self._time(line, obj, s)
        text, task = self._str(line, obj, "text"), self._str(line, obj, "task")
        session, meta = self._str(line, obj, "session"), self._meta(line, obj, WRITE_FIELDS)
        i = len(self.item_tokens)
        e = self._event(WRITE, s, i, t, line)
        self.item_tokens.append(tokens)
        self.item_type.append(code)
        self.item_stream.append(s)
        self.item_t.append(t)
        self.item_cost.append(cost)
        self.item_event.append(e)
        self.item_id.append(ident)
        self.item_text.append(text)
        self.item_task.append(task)
        self.item_session.append(session)
        self.item_meta.append(meta)
        self.ids.insert(slot, h, 2 * i)

    def _item_need(self, line: int, need, field: str, s: int) -> int:
        """The item index of the needed id ``need`` (an earlier write of stream ``s``)."""
        code = self.ids.get(need)
        if code < 0 or code & 1 or self.item_stream[code >> 1] != s:
            raise self.err(line, field, f'request needs "{need}", which no earlier write in '
                                        f'stream "{self.stream_names[s]}" defines')  # fmt: skip
        return code >> 1

    def _group(self, line: int, group: list, ident: str, k: int, s: int) -> tuple[int, ...]:
        """A list of alternative ids (format 1.1) as item indices, in listed order."""
        field = f"needs[{k}]"
        if self.version != ALTERNATIVES_VERSION:
            raise self.err(line, field, f'request "{ident}": a list of alternative ids in '
                                        '"needs" requires "version": "1.1" in the header')  # fmt: skip
        if not group:
            raise self.err(line, field, f'request "{ident}": an empty list of alternatives')
        items: dict[int, None] = {}
        for a, need in enumerate(group):
            if not isinstance(need, str):
                what = "nested more than one level" if isinstance(need, list) else shown(need)
                raise self.err(line, f"{field}[{a}]", f'request "{ident}": alternatives must be '
                                                      f"ids (strings), got {what}")  # fmt: skip
            i = self._item_need(line, need, f"{field}[{a}]", s)
            if i in items:
                raise self.err(line, f"{field}[{a}]", f'request "{ident}": alternative "{need}" '
                                                      "is listed twice")  # fmt: skip
            items[i] = None
        return tuple(items)

    def _needs(self, line: int, obj: dict, ident: str, s: int) -> list:
        """The request's needs in first-listed order, each an item index (a plain id, or a list
        of one) or a tuple of 2+ alternative item indices; a repeated need (the same items) is
        kept once.  Plain ids take the short path: most traces have nothing else."""
        resolved: dict = {}
        item_stream, find = self.item_stream, self.ids.get
        for k, need in enumerate(obj["needs"]):
            if isinstance(need, str):
                code = find(need)
                if code < 0 or code & 1 or item_stream[code >> 1] != s:
                    self._item_need(line, need, "needs", s)  # raises, naming the need
                resolved[code >> 1] = code >> 1
            elif isinstance(need, list):
                group = self._group(line, need, ident, k, s)
                key = group[0] if len(group) == 1 else tuple(sorted(group))
                resolved.setdefault(key, key if len(group) == 1 else group)
            else:
                raise self.err(line, "needs", f'request "{ident}": "needs" entries must be '
                                              f"strings, got {shown(need)}")  # fmt: skip
        return list(resolved.values())

    def _request(self, obj: dict, line: int) -> None:
        ident, slot, h = self._new_id(line, obj)
        if "needs" not in obj:
            raise self.err(line, "needs", f'request "{ident}": missing field "needs"')
        if not isinstance(obj["needs"], list):
            raise self.err(line, "needs", f'request "{ident}": "needs" must be a list of ids')
        s = self._stream(line, obj)
        resolved = self._needs(line, obj, ident, s)
        t = self._time(line, obj, s)
        text, meta = self._str(line, obj, "text"), self._meta(line, obj, REQUEST_FIELDS)
        r = len(self.req_stream)
        e = self._event(REQUEST, s, r, t, line)
        self.req_stream.append(s)
        self.req_t.append(t)
        self.req_event.append(e)
        self.req_id.append(ident)
        self.req_text.append(text)
        self.req_meta.append(meta)
        if self.version == FORMAT_VERSION_1:
            self.needs.extend(resolved)  # item indices only
        else:
            for need in resolved:
                if isinstance(need, tuple):  # alternatives: the first in needs, the rest apart
                    self.alt_need.append(len(self.needs))
                    self.alt_items.extend(need[1:])
                    self.alt_ptr.append(len(self.alt_items))
                    need = need[0]
                self.needs.append(need)
        self.needs_ptr.append(len(self.needs))
        self.ids.insert(slot, h, 2 * r + 1)

    def _target(self, obj: dict, line: int, kind: int) -> None:
        name = EVENT_KINDS[kind]
        if "target" not in obj:
            raise self.err(line, "target", f'{name}: missing field "target"')
        target = obj["target"]
        code = self.ids.get(target) if isinstance(target, str) else -1
        if code < 0 or code & 1:
            raise self.err(line, "target", f"{name} targets {_quoted(target)}, which no earlier "
                                           "write defines")  # fmt: skip
        i = code >> 1
        s = self.item_stream[i]
        if "stream" in obj and obj["stream"] != self.stream_names[s]:
            raise self.err(line, "stream", f'{name} of "{target}" says stream '
                                           f'{shown(obj["stream"])}, but "{target}" was written '
                                           f'in stream "{self.stream_names[s]}"')  # fmt: skip
        value = note = None
        if kind == ANNOTATE:
            value, note = self._annotation(line, obj)
        t = self._time(line, obj, s)
        e = self._event(kind, s, i, t, line)
        if kind == ANNOTATE:
            self.annotations[e] = (value, note)
        meta = self._meta(line, obj, TARGET_FIELDS)
        if meta:
            self.event_meta[e] = meta

    def _annotation(self, line: int, obj: dict) -> tuple[float | None, str | None]:
        if "value" not in obj and "note" not in obj:
            raise self.err(line, "value", 'annotate needs "value" and/or "note"')
        value = note = None
        if "value" in obj:
            value = finite_number(obj["value"], 1.0)
            if value is None or not 0.0 <= value <= 1.0:
                raise self.err(line, "value", 'annotate "value" must be a number in [0, 1], '
                                              f'got {shown(obj["value"])}')  # fmt: skip
        if "note" in obj:
            note = self._str(line, obj, "note")
        return value, note

    # --------------------------------------------------------------- freeze
    def build(self, sha256: str) -> Trace:
        self.ids = None  # frees the id table now: it refers back to this builder (a cycle)
        col = np.frombuffer
        return Trace(
            source=self.source,
            sha256=sha256,
            header=self.header,
            stream_names=self.stream_names,
            ev_kind=col(self.ev_kind, dtype=np.int8),
            ev_stream=col(self.ev_stream, dtype=np.int32),
            ev_ref=col(self.ev_ref, dtype=np.int32),
            ev_t=col(self.ev_t, dtype=np.float64),
            ev_line=col(self.ev_line, dtype=np.int32),
            item_id=self.item_id.build(),
            item_tokens=col(self.item_tokens, dtype=np.int64),
            item_type=col(self.item_type, dtype=np.int8),
            item_stream=col(self.item_stream, dtype=np.int32),
            item_t=col(self.item_t, dtype=np.float64),
            item_cost=col(self.item_cost, dtype=np.float64),
            item_event=col(self.item_event, dtype=np.int64),
            item_text=self.item_text.build(),
            item_task=self.item_task.build(),
            item_session=self.item_session.build(),
            item_meta=self.item_meta.build(),
            req_id=self.req_id.build(),
            req_stream=col(self.req_stream, dtype=np.int32),
            req_t=col(self.req_t, dtype=np.float64),
            req_event=col(self.req_event, dtype=np.int64),
            req_text=self.req_text.build(),
            req_meta=self.req_meta.build(),
            needs_ptr=col(self.needs_ptr, dtype=np.int64),
            needs=col(self.needs, dtype=np.int32),
            alt_need=col(self.alt_need, dtype=np.int64),
            alt_ptr=col(self.alt_ptr, dtype=np.int64),
            alt_items=col(self.alt_items, dtype=np.int32),
            annotations=self.annotations,
            event_meta=self.event_meta,
        )


def _quoted(value) -> str:
    text = str(value)
    return f'"{text}"' if len(text) <= 80 else f'"{text[:60]}..." ({len(text):,} characters)'


def _decode(source: str, line: int, raw: bytes, loads=orjson.loads):
    """The JSON value of one non-blank line, or ``None`` for a line of Unicode whitespace
    (blank, as it always was); :class:`TraceError` naming the line for anything else."""
    try:
        return loads(raw)
    except orjson.JSONDecodeError as exc:
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as bad:
            raise TraceError(source, line, None, f"not valid UTF-8: byte {bad.start + 1} of the "
                                                 f"line is {raw[bad.start:bad.start + 1]!r} "
                                                 "(a trace is UTF-8 text)") from None  # fmt: skip
        if not text.strip():
            return None
        hint = ""
        if b"\r" in raw.rstrip(b"\r"):
            hint = " (the line holds a carriage return \\r: lines must end with \\n)"
        raise TraceError(source, line, None, f"malformed JSON: {exc}{hint}") from None


def load_trace(path: str | os.PathLike, max_line_bytes: int | None = None,
               limits: TraceLimits | None = None) -> Trace:  # fmt: skip
    """Parse and validate a ``.jsonl`` / ``.jsonl.gz`` trace.  Raises :class:`TraceError`.

    ``Trace.sha256`` is *the* trace hash, defined once: the SHA-256 of the trace's JSON Lines
    text, decompressed, UTF-8, blank lines left out, every line ended by one ``\\n`` (lines are
    split at ``\\n``; a line's trailing ``\\r`` are not part of it).  ``trace_from_events``
    hashes the lines ``write_trace`` would write, so writing events and loading them back (gzip
    or not) gives the same hash.  (The parsed-trace cache keys entries by the file's raw bytes:
    that is a cache key, not the trace's identity.)

    ``max_line_bytes``: the longest line accepted (default ``trace_lines.MAX_LINE_BYTES``);
    ``limits``: the most blank lines and the largest decompression ratio
    (``memlens.trace.limits.TraceLimits``, defaults when None).

    The bulk parser (``memlens.trace.bulk.parse``) loads the trace when it can vouch for every line;
    otherwise (any error, or a form it leaves alone) :func:`load_trace_exact` decides, so every
    error is the exact parser's.
    """
    from memlens.trace.bulk.parse import load_fast  # it imports this module

    check_trace_file(path)
    fix_mmap_threshold()  # growing columns must not leave holes in the heap (memlens._util.malloc)
    trace = load_fast(path, max_line_bytes, limits)
    if trace is None:
        return load_trace_exact(path, max_line_bytes, limits)
    release_free_memory()
    return trace


def load_trace_exact(path: str | os.PathLike, max_line_bytes: int | None = None,
                     limits: TraceLimits | None = None) -> Trace:  # fmt: skip
    """:func:`load_trace` by the exact line-by-line parser only: an event at a time, every
    error named by file, line and field (the reference the bulk parser is tested against)."""
    source = str(path)
    check_trace_file(path)
    fix_mmap_threshold()
    builder = _Builder(source, trace_limits.SPILL_BYTES)
    digest = hashlib.sha256()
    update = digest.update
    for line_no, raw in read_lines(path, max_line_bytes, limits):
        if not raw or raw.isspace():
            continue
        obj = _decode(source, line_no, raw)
        if obj is None:
            continue
        update(raw.rstrip(b"\r") if raw[-1:] == b"\r" else raw)
        update(b"\n")
        check_depth(source, line_no, raw, obj)
        builder.add(obj, line_no)
    trace = builder.build(digest.hexdigest())
    release_free_memory()
    return trace


def trace_from_events(events: Iterable[dict], source: str = "<events>") -> Trace:
    """Build a trace from event dicts (tests, generators), with the same validation as files."""
    builder = _Builder(source, trace_limits.SPILL_BYTES)
    digest = hashlib.sha256()
    for line_no, obj in enumerate(events, start=1):
        check_depth(source, line_no, None, obj)
        builder.add(obj, line_no)  # field errors first (a number too large for JSON, say)
        try:
            raw = orjson.dumps(obj)  # the line write_trace writes for it
        except orjson.JSONEncodeError as exc:
            raise TraceError(source, line_no, None, f"not representable as JSON: {exc}") from None
        digest.update(raw + b"\n")
    return builder.build(digest.hexdigest())


def iter_trace_lines(events: Iterable[dict]) -> Iterator[bytes]:
    for obj in events:
        yield orjson.dumps(obj) + b"\n"


def write_trace(path: str | os.PathLike, events: Iterable[dict], header: dict | None = None) -> int:
    """Stream events to ``path`` (gzip if it ends in ``.gz``) atomically; returns lines written.

    Events are written as they come, so a generator can produce traces far larger than memory.
    The header says ``"version": 1`` unless ``header`` gives its own (``"1.1"`` for a trace with
    alternatives in ``needs``).
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
    "ALTERNATIVES_VERSION",
    "FORMAT_VERSION",
    "MAX_LINE_BYTES",
    "TraceError",
    "check_trace_file",
    "load_trace",
    "load_trace_exact",
    "trace_from_events",
    "write_trace",
    "PIN",
    "UNPIN",
    "REQUEST",
]
