"""The fast first load of a JSON Lines trace: a block of lines at a time, validated in bulk.

``memlens.trace_io`` validates and stores one event at a time in Python (``_Builder``): about
100,000 events a second of CPU time, most of it per-event bookkeeping rather than reading or
JSON decoding.  This module does the same work a block of lines (512 KiB) at a time.

msgspec decodes a whole block in one call (``decode_lines``) into typed structs, one class per
event kind: the JSON is checked and every field's type with it (strings; numbers, never a
bool; ``needs`` a list of ids), a missing field takes the exact parser's default, and a field
the class does not know fails the decoding.  What msgspec does not check is checked after, on
arrays or by orjson (the exact parser's decoder): ranges (tokens, magnitudes, non-empty ids);
``meta``, which msgspec keeps as its JSON text unchecked, decoded by orjson (each distinct text
once) and stored as ``orjson.dumps`` writes it, as the exact parser does; the lines of pins,
unpins and annotations, decoded again by orjson; and one JSON object per line
(``_typed_events``).  A block msgspec refuses (an unknown field, which the exact parser keeps
in ``meta``; a wrong type; blanks around a line) is decoded line by line by orjson instead, into
dicts type-checked per column (``map(dict.get, ...)`` and the set of value types): the general
path, slower (``bulk-orjson`` below).  Either way every field of the block is then pulled out
at once (in C), packed in one join, and the cross-event rules are checked once, over the whole
trace, on arrays: ids unique and needs/targets resolved (Arrow hash tables), each need an
earlier write of the same stream, time never going backwards within a stream (a segmented
running maximum).  A thread reads ahead (decompression and hashing release the GIL), and the
cyclic garbage collector is paused while the blocks' objects come and go (they form no cycles).

**This module never reports a problem.**  Whatever it cannot vouch for (a JSON error, a value
of the wrong type, an unknown id, time going backwards, a blank line, a carriage return, a
list of alternatives in ``needs``, a gzip error, a line too long) makes it give up
(:class:`Unsupported`), and ``trace_io.load_trace`` then runs the exact line-by-line parser,
which raises the precise ``TraceError`` (file, line, field) or, for a valid input this module
does not handle, loads it.  The errors are therefore the exact parser's by construction; what
this module must guarantee is that it accepts nothing the exact parser rejects and builds the
very same :class:`~memlens.trace.Trace` (tests/test_fast_parse.py checks both, differentially,
with and without the typed decoding).

Why msgspec, and not orjson alone or ``pyarrow.json.read_json`` (benchmarks/results/parse.md,
the 1M-event agent trace, CPU seconds on a shared 2-core machine): decoding alone takes msgspec
0.65 s into typed structs, orjson 1.6 s into dicts, Arrow 1.8 s into columns; and msgspec
checks the types as it decodes, which with orjson's dicts takes one more pass per field.  The
whole first load, validation and columns included: 3.0 s (about 335,000 events/s of CPU time;
3.5 s from ``.jsonl.gz``), 5.3 s with every block decoded by orjson, 9.5 s for the exact
parser.  Arrow could not be used at any speed: it gives each field one type for the whole
file, so it cannot tell a missing ``"t"`` (valid) from ``"t": null`` (an error) nor a missing
``meta`` from a null one, it stores a ``meta`` object's keys in the column's order rather than
the line's (so the meta texts would differ from the exact parser's), and a field whose type
varies across lines fails the whole file: it could neither build the same Trace nor refuse
exactly what the exact parser refuses.  Of the 3.0 s, decoding is a fifth; the rest is pulling
about fifteen fields out of a million Python objects and packing them (about 1.2 s), the
whole-trace checks (0.4 s, the id hash table 0.17 s of it), page faults and the spilled
columns' writes (about 0.5 s of system time): a million events a second would need all of it
under a second of one core, which this design (a Python object per event) does not reach.
"""

from __future__ import annotations

import gc
import hashlib
import math
import os
import queue
import threading
import zlib
from collections.abc import Iterator, Sequence
from itertools import chain, compress, repeat
from operator import attrgetter, itemgetter

import msgspec
import numpy as np
import orjson
import pyarrow as pa
import pyarrow.compute as pc

from memlens import trace_io, trace_lines
from memlens.packed import _FLUSH_BYTES, PackedJSON, PackedStrings, StringsBuilder
from memlens.trace import ANNOTATE, EVENT_KINDS, PIN, REQUEST, TYPE_CODE, UNPIN, WRITE, Trace
from memlens.trace_io import (
    _VERSIONS,
    MAX_DEPTH,
    MAX_EVENTS,
    MAX_LINE,
    MAX_MAGNITUDE,
    MAX_TOKENS,
    REQUEST_FIELDS,
    TARGET_FIELDS,
    WRITE_FIELDS,
    _depth_error,
    _number,
)
from memlens.trace_lines import open_trace

#: Decompressed bytes read per step: about 2,000 events of an agent trace.  Below
#: ``memlens.heap.MMAP_THRESHOLD`` (1 MiB) with room to spare, so that a block's text and its
#: temporaries come from the heap and are reused: at 1 MiB each was mapped and unmapped again,
#: and the page faults cost 0.3 s of system time per million events.  (Measured on the
#: 1M-event agent trace, main-thread CPU: 64 KiB blocks took a quarter more, for the Python
#: steps made per block.)
BLOCK_BYTES = 512 << 10
_KIND = {name: code for code, name in enumerate(EVENT_KINDS)}
_NUMBER = frozenset({int, float})
_NO_META: dict = {}  # a missing "meta" (never mutated)
_ABSENT = object()  # a missing "stream" on a pin, unpin or annotate
# The fields every event, write and request must have (a KeyError: the exact parser's case).
_EVENT = itemgetter("event")
_WRITE_REQUIRED = itemgetter("id", "tokens", "type")
_REQUEST_REQUIRED = itemgetter("id", "needs")
_NO_RAW = msgspec.Raw(b"")  # a missing "meta" in a typed event


# The events as msgspec decodes (and type-checks) them, a block of lines in one call.  Each
# class accepts exactly what the exact parser accepts for its fields' types: strings, numbers
# (msgspec refuses a bool for a number, as the exact parser does), ``needs`` a list of plain
# ids; a field it does not know (kept in ``meta`` by the exact parser) fails the decoding and
# the block takes the general path.  Defaults are what the exact parser takes for a missing
# field (NaN marks a missing time: JSON has no NaN).  Ranges (tokens, magnitudes, non-empty
# ids) are checked afterwards, on arrays; ``meta`` is kept as its JSON text and decoded by
# orjson, the exact parser's decoder (msgspec does not validate the text it skips).
class _Write(msgspec.Struct, tag_field="event", tag="write", forbid_unknown_fields=True,
             gc=False):  # fmt: skip
    id: str
    tokens: int | float
    type: str
    stream: str = ""
    t: float = math.nan
    cost: float = 0.0
    text: str = ""
    task: str = ""
    session: str = ""
    meta: msgspec.Raw = _NO_RAW


class _Request(msgspec.Struct, tag_field="event", tag="request", forbid_unknown_fields=True,
               gc=False):  # fmt: skip
    id: str
    needs: list[str]
    stream: str = ""
    t: float = math.nan
    text: str = ""
    meta: msgspec.Raw = _NO_RAW


# Pins, unpins and annotations: rare; their lines are decoded again by orjson (all fields,
# validated as the exact parser does), msgspec only tells their kind and time.
class _Pin(msgspec.Struct, tag_field="event", tag="pin", gc=False):
    t: float = math.nan


class _Unpin(msgspec.Struct, tag_field="event", tag="unpin", gc=False):
    t: float = math.nan


class _Annotate(msgspec.Struct, tag_field="event", tag="annotate", gc=False):
    t: float = math.nan


_DECODER = msgspec.json.Decoder(_Write | _Request | _Pin | _Unpin | _Annotate)
_STRUCT_KIND = {_Write: WRITE, _Request: REQUEST, _Pin: PIN, _Unpin: UNPIN, _Annotate: ANNOTATE}
_T, _STREAM = attrgetter("t"), attrgetter("stream")
_WRITE_ATTRS = tuple(
    map(attrgetter, ("id", "tokens", "type", "cost", "text", "task", "session", "meta"))
)
_REQUEST_ATTRS = tuple(map(attrgetter, ("id", "needs", "text", "meta")))


class Unsupported(Exception):
    """This input is for the exact parser: it holds an error to name, or a form (blank lines,
    ``\\r``, alternatives in ``needs``...) that the fast path leaves to it."""


# What giving up looks like: ours, orjson's (ValueError), wrong types met in C (TypeError),
# a required field missing (KeyError),
# numbers numpy cannot hold, and read errors (OSError, EOFError, zlib.error, TraceError).
_GIVE_UP = (
    Unsupported,
    ValueError,
    TypeError,
    OverflowError,
    KeyError,
    OSError,
    EOFError,
    zlib.error,
)


def load_fast(path: str | os.PathLike, max_line_bytes: int | None = None) -> Trace | None:
    """The trace at ``path``, or ``None`` when the exact parser must decide (see the module
    docstring: ``None`` for every invalid input, and for a few valid forms)."""
    # (read at call time, like the exact parser: tests and users may change these settings)
    limit = trace_lines.MAX_LINE_BYTES if max_line_bytes is None else max_line_bytes
    if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
        return None  # the exact parser raises the ValueError
    collecting = gc.isenabled()
    gc.disable()
    try:
        return parse_fast(path, limit)
    except _GIVE_UP:
        return None
    finally:
        if collecting:
            gc.enable()


def parse_fast(path: str | os.PathLike, limit: int | None = None) -> Trace:
    """The trace at ``path``; raises (:data:`_GIVE_UP`) instead of naming any problem."""
    limit = trace_lines.MAX_LINE_BYTES if limit is None else limit
    digest = hashlib.sha256()
    columns = _Columns(trace_io.SPILL_BYTES)
    line = 1
    reader = _ReadAhead(path, digest)
    try:
        for text in _line_blocks(reader, limit):
            if len(text) > limit and max(map(len, text.split(b"\n"))) > limit:
                raise Unsupported
            if line == 1:
                text, line = _after_header(text, columns)
                if text is None:
                    continue
            line += columns.add_block(text, line)
    finally:
        reader.close()
    return columns.build(str(path), digest.hexdigest())


def _after_header(text: bytes, columns: _Columns) -> tuple[bytes | None, int]:
    """The first block's text after its header line, if it has one (``None``: nothing more),
    and the number of the line the text starts on."""
    end = text.find(b"\n")
    first = orjson.loads(text if end < 0 else text[:end])
    if type(first) is not dict or first.get("event") != "header":
        return text, 1
    columns.set_header(first)
    return (None if end < 0 else text[end + 1 :]), 2


class _ReadAhead:
    """Decompressed blocks of a trace file, read (and hashed) by a thread one block ahead.

    ``zlib`` and ``hashlib`` release the GIL on large buffers, so on a machine with a spare
    core the reading costs the parser nothing.  A read error is handed to the consumer."""

    def __init__(self, path: str | os.PathLike, digest):
        self.path, self.digest = path, digest
        self._queue: queue.Queue = queue.Queue(maxsize=2)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="trace-read-ahead", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        try:
            with open_trace(self.path) as fh:
                while not self._stop.is_set():
                    block = fh.read(BLOCK_BYTES)
                    if block:
                        self.digest.update(block)
                    self._put(block)
                    if not block:
                        return
        except BaseException as exc:  # noqa: BLE001 - handed over, raised in the consumer
            self._put(exc)

    def _put(self, item) -> None:
        while not self._stop.is_set():
            try:
                self._queue.put(item, timeout=0.1)
                return
            except queue.Full:
                continue

    def __iter__(self) -> Iterator[bytes]:
        while True:
            item = self._queue.get()
            if isinstance(item, BaseException):
                raise Unsupported from item
            if not item:
                return
            yield item

    def close(self) -> None:
        self._stop.set()
        self._thread.join()


def _line_blocks(blocks, limit: int) -> Iterator[bytes]:
    """Runs of whole lines (without the last ``\\n``) from decompressed ``blocks``.

    The trace hash is the hash of the text's lines, each ended by ``\\n``, blank lines left out
    and trailing ``\\r`` dropped: with no ``\\r`` and no blank line (a blank line makes the JSON
    decoding fail, and so the fast path give up) that is the file's text as it is, plus a
    ``\\n`` when the last line has none (hashed here, after the reader's blocks)."""
    tail = b""
    for block in blocks:
        if b"\r" in block:
            raise Unsupported
        cut = block.rfind(b"\n")
        if cut < 0:
            tail += block
        else:
            yield tail + block[:cut]
            tail = block[cut + 1 :]
        if len(tail) > limit:
            raise Unsupported
    if tail:
        blocks.digest.update(b"\n")
        yield tail


def _pick(values: list, index: np.ndarray) -> list:
    """``[values[i] for i in index]`` (``index`` increasing), in C."""
    if index.shape[0] == len(values):
        return values
    if index.shape[0] * 8 < len(values):
        return list(map(values.__getitem__, index.tolist()))
    keep = np.zeros(len(values), bool)
    keep[index] = True
    return list(compress(values, keep.tolist()))


def _strings(rows: list[dict], key: str, default) -> list[str]:
    """Field ``key`` of every row (``default`` when absent), all of them strings."""
    values = list(map(dict.get, rows, repeat(key), repeat(default)))
    if values and set(map(type, values)) != {str}:
        raise Unsupported
    return values


def _field(rows: list[dict], key: str, default) -> list:
    """Field ``key`` of every row (``default`` when absent), unchecked: ``_encode`` refuses a
    value that is not a string (``TypeError``), which saves a type check."""
    return list(map(dict.get, rows, repeat(key), repeat(default)))


def _numbers(rows: list[dict], key: str, default) -> np.ndarray:
    """Field ``key`` of every row as float64 (``default`` when absent): real numbers (no bool)
    of magnitude at most ``MAX_MAGNITUDE``; a NaN ``default`` marks the absent ones."""
    return _as_numbers(list(map(dict.get, rows, repeat(key), repeat(default))))


def _as_numbers(values: Sequence) -> np.ndarray:
    """``values`` as float64, if all are real numbers (no bool) of magnitude at most
    ``MAX_MAGNITUDE``."""
    if values and not set(map(type, values)) <= _NUMBER:
        raise Unsupported
    return _within(np.array(values, dtype=np.float64))


def _within(values: np.ndarray) -> np.ndarray:
    """``values``, if none is larger than ``MAX_MAGNITUDE`` in size (NaN: absent, passes)."""
    if bool((np.abs(values) > MAX_MAGNITUDE).any()):
        raise Unsupported
    return values


def _encode(values: list[str]) -> tuple[bytes, np.ndarray]:
    """``values`` UTF-8 encoded end to end, and each one's length in bytes."""
    joined = "".join(values)  # TypeError unless all are strings
    if joined.isascii():
        return joined.encode("ascii"), np.fromiter(map(len, values), np.int64, len(values))
    raw = list(map(str.encode, values))
    return b"".join(raw), np.fromiter(map(len, raw), np.int64, len(raw))


def _merged(obj: dict, meta: dict, known: frozenset) -> dict:
    """``meta`` with ``obj``'s unknown fields added, as the exact parser keeps them."""
    meta = dict(meta)
    for key in obj:
        if key not in known:
            meta.setdefault(key, obj[key])
    return meta


class _BulkStrings(StringsBuilder):
    """A :class:`~memlens.packed.StringsBuilder` that also takes many encoded strings at once
    (same buffers, same spilling to a temporary file past ``spill_bytes``)."""

    def extend(self, data: bytes, lengths: np.ndarray) -> None:
        ends = np.cumsum(lengths, dtype=np.int64)
        ends += self.size
        self._data += data
        self._offsets.frombytes(ends.tobytes())
        self.size += len(data)
        self.n += int(lengths.shape[0])
        if self.spill_bytes is not None:
            limit = self.spill_bytes if self._files is None else _FLUSH_BYTES
            if len(self._data) + 8 * len(self._offsets) > limit:
                self._spill()


class _BulkJSON:
    """The rows with a non-empty object, and their JSON texts (a ``PackedJSON`` to be)."""

    def __init__(self, spill_bytes: int | None):
        self.n = 0
        self.rows: list[np.ndarray] = []
        self.values = _BulkStrings(spill_bytes)

    def extend(self, n: int, rows: np.ndarray, data: bytes, lengths: np.ndarray) -> None:
        self.rows.append(rows + self.n)
        self.values.extend(data, lengths)
        self.n += n

    def build(self) -> PackedJSON:
        return PackedJSON(self.n, _cat(self.rows, np.int64), self.values.build())


def _cat(parts: list[np.ndarray], dtype) -> np.ndarray:
    return np.concatenate(parts).astype(dtype, copy=False) if parts else np.zeros(0, dtype)


def _metas(rows: list[dict], known: frozenset) -> tuple[np.ndarray, bytes, np.ndarray]:
    """The rows whose meta (unknown fields included) is not empty, and their JSON texts; gives up
    on a meta that is not an object or an event nested deeper than ``MAX_DEPTH``."""
    metas = list(map(dict.get, rows, repeat("meta"), repeat(_NO_META)))
    if metas and set(map(type, metas)) != {dict}:
        raise Unsupported
    if not set().union(*rows) <= known:
        for r, obj in enumerate(rows):
            if not known.issuperset(obj):
                if _depth_error(obj) is not None:
                    raise Unsupported
                metas[r] = _merged(obj, metas[r], known)
    full = np.flatnonzero(np.fromiter(map(bool, metas), bool, len(metas)))
    data, lengths = _dumps(_pick(metas, full))
    for r in full[_maybe_deep(data, lengths)].tolist():
        if _depth_error(rows[r]) is not None:
            raise Unsupported
    return full, data, lengths


def _maybe_deep(data: bytes, lengths: np.ndarray) -> np.ndarray:
    """Which of the JSON texts ``data`` (end to end, ``lengths`` bytes each) might nest
    ``MAX_DEPTH`` deep: only a text with that many brackets can (and with one bracket each,
    none is nested at all)."""
    if data.count(b"{") + data.count(b"[") <= lengths.shape[0]:
        return np.zeros(0, np.int64)
    text = np.frombuffer(data, np.uint8)
    starts = np.zeros(lengths.shape[0], np.int64)
    np.cumsum(lengths[:-1], out=starts[1:])
    brackets = np.add.reduceat(((text == 0x7B) | (text == 0x5B)).astype(np.int32), starts)
    return np.flatnonzero(brackets >= MAX_DEPTH)


def _raw_metas(raws: Sequence[msgspec.Raw]) -> tuple[np.ndarray, bytes, np.ndarray]:
    """``_metas`` for typed events: the rows whose meta is not empty, and their JSON texts as
    the exact parser stores them (``orjson.dumps`` of what ``orjson.loads`` makes of the
    line's text); gives up on a meta that is not an object or nests too deep.

    Each distinct text is decoded once (metas repeat: an agent trace has a handful), by orjson,
    which also validates it (msgspec skips it unchecked); a text that is already what
    ``orjson.dumps`` writes (compact, keys once, orjson's number forms) is kept as it is."""
    texts = list(map(bytes, raws))
    distinct = dict.fromkeys(texts)
    distinct.pop(b"", None)  # no meta
    given = list(distinct)
    values = list(map(orjson.loads, given))
    if values and set(map(type, values)) != {dict}:
        raise Unsupported
    canon = list(map(orjson.dumps, values))
    if canon != given:
        as_stored = dict(zip(given, canon))
        as_stored[b""] = b""
        texts = list(map(as_stored.__getitem__, texts))
    sizes = np.array(list(map(len, canon)), np.int64)
    for k in _maybe_deep(b"".join(canon), sizes).tolist():
        if _depth_error({"meta": values[k]}) is not None:
            raise Unsupported
    lengths = np.fromiter(map(len, texts), np.int64, len(texts))
    full = np.flatnonzero(lengths > 2)  # b"{}": an empty object, b"": none (not stored)
    if full.shape[0] == len(texts):
        return full, b"".join(texts), lengths
    return full, b"".join(_pick(texts, full)), lengths[full]


def _typed_events(text: bytes) -> list | None:
    """The events of ``text``, one a line, as typed structs; ``None`` unless every line is
    one event that msgspec decodes (and type-checks) as a write, request, pin, unpin or
    annotate.

    ``decode_lines`` reads a stream of values, blind to where the lines break; the exact
    parser wants one object per line.  Every line break here lies between a ``}`` and a
    ``{`` (the check below), which no JSON value holds inside itself: a string cannot hold a
    raw line break, and ``}`` then ``{`` is not valid inside an object or a list (msgspec
    checks the grammar of the text it skips too, tests/test_fast_parse.py; only its UTF-8 and
    number ranges go unchecked, which orjson then checks).  So each value lies within one
    line, each line starts one, and ``n`` values for ``n`` lines means one a line (and the
    k-th event is the k-th line, which the pins' second decoding relies on)."""
    chars = np.frombuffer(text, np.uint8)
    if chars.shape[0] < 2 or chars[0] != 0x7B or chars[-1] != 0x7D:  # { ... }
        return None
    breaks = np.flatnonzero(chars == 0x0A)  # (neither the first nor the last byte)
    n = breaks.shape[0] + 1
    if n > 1 and not (
        bool((chars[breaks - 1] == 0x7D).all()) and bool((chars[breaks + 1] == 0x7B).all())
    ):
        return None
    try:
        events = _DECODER.decode_lines(text)
    except (msgspec.DecodeError, RecursionError):
        return None
    return events if len(events) == n else None


class _DictRows:
    """Reads the fields of events decoded by orjson (dicts), checking their types."""

    @staticmethod
    def kinds(objs: list[dict]) -> np.ndarray:
        kinds = map(_KIND.get, map(_EVENT, objs), repeat(-1))
        return np.fromiter(kinds, np.int8, len(objs))

    @staticmethod
    def times(objs: list[dict]) -> np.ndarray:
        return _numbers(objs, "t", math.nan)

    @staticmethod
    def streams(rows: list[dict]) -> list[str]:
        return _strings(rows, "stream", "")

    @staticmethod
    def writes(rows: list[dict]) -> _WriteColumns:
        ids, tokens, types = zip(*map(_WRITE_REQUIRED, rows))  # KeyError if one is missing
        strings = tuple(_field(rows, key, "") for key in ("text", "task", "session"))
        return (ids, _as_numbers(tokens), types, _numbers(rows, "cost", 0.0), strings,
                _metas(rows, WRITE_FIELDS))  # fmt: skip

    @staticmethod
    def requests(rows: list[dict]) -> _RequestColumns:
        ids, needs = zip(*map(_REQUEST_REQUIRED, rows))
        if set(map(type, needs)) != {list}:
            raise Unsupported
        return ids, needs, _field(rows, "text", ""), _metas(rows, REQUEST_FIELDS)

    @staticmethod
    def targets(objs: list[dict], index: np.ndarray) -> list[dict]:
        return _pick(objs, index)


def _attributes(rows: list, getters: tuple[attrgetter, ...]) -> list[list]:
    """Each attribute of ``rows`` as a list (one pass per attribute, in C: faster than one
    pass making a tuple per row and a transposition)."""
    return [list(map(get, rows)) for get in getters]


class _TypedRows:
    """Reads the fields of events decoded by msgspec (types already checked) from the block
    ``text``."""

    def __init__(self, text: bytes):
        self.text = text

    @staticmethod
    def kinds(events: list) -> np.ndarray:
        return np.fromiter(map(_STRUCT_KIND.__getitem__, map(type, events)), np.int8, len(events))

    @staticmethod
    def times(events: list) -> np.ndarray:
        return _within(np.fromiter(map(_T, events), np.float64, len(events)))

    @staticmethod
    def streams(rows: list) -> list[str]:
        return list(map(_STREAM, rows))

    @staticmethod
    def writes(rows: list[_Write]) -> _WriteColumns:
        ids, tokens, types, cost, text, task, session, meta = _attributes(rows, _WRITE_ATTRS)
        cost = _within(np.array(cost, np.float64))
        return (
            ids,
            np.array(tokens, np.float64),
            types,
            cost,
            (text, task, session),
            _raw_metas(meta),
        )

    @staticmethod
    def requests(rows: list[_Request]) -> _RequestColumns:
        ids, needs, text, meta = _attributes(rows, _REQUEST_ATTRS)
        return ids, needs, text, _raw_metas(meta)

    def targets(self, events: list, index: np.ndarray) -> list[dict]:
        """Their lines decoded again, by orjson: every field checked as the exact parser does."""
        lines = self.text.split(b"\n")
        objs = list(map(orjson.loads, map(lines.__getitem__, index.tolist())))
        if set(map(type, objs)) != {dict}:
            raise Unsupported
        return objs


# A block's writes: ids, tokens (float64), types, costs (float64), (texts, tasks, sessions),
# and metas as ``_metas`` gives them; its requests: ids, needs, texts, metas.
_WriteColumns = tuple
_RequestColumns = tuple


def _dumps(values: list[dict], batch: int = 4096) -> tuple[bytes, np.ndarray]:
    """The JSON texts of ``values`` end to end, and each one's length.

    In batches: ``orjson.dumps`` allocates 1 KiB per result and then shrinks it, so keeping
    every result of a large block alive until one join grows the heap by about 1 KiB per
    object (measured: ten times the dumping time, in page faults)."""
    parts: list[bytes] = []
    lengths: list[int] = []
    for lo in range(0, len(values), batch):
        texts = list(map(orjson.dumps, values[lo : lo + batch]))
        lengths.extend(map(len, texts))
        parts.append(b"".join(texts))
    return b"".join(parts), np.array(lengths, np.int64)


class _Columns:
    """The trace's columns as they grow, block by block; :meth:`build` validates what needs
    the whole trace (ids, needs, targets, time) and freezes them into a :class:`Trace`."""

    def __init__(self, spill_bytes: int | None):
        self.header: dict = {}
        self.stream_index: dict[str, int] = {}
        self.stream_names: list[str] = []
        self.n_events = self.n_items = self.n_requests = 0
        self.parts: dict[str, list[np.ndarray]] = {}
        self.item_id, self.req_id, self.need_id = _BulkStrings(), _BulkStrings(), _BulkStrings()
        self.item_text, self.item_task, self.item_session, self.req_text = (
            _BulkStrings(spill_bytes) for _ in range(4))  # fmt: skip
        self.item_meta, self.req_meta = _BulkJSON(spill_bytes), _BulkJSON(spill_bytes)
        self.target_id: list[str] = []
        self.target_stream: list = []
        self.annotations: dict[int, tuple[float | None, str | None]] = {}
        self.event_meta: dict[int, dict] = {}

    def _keep(self, **arrays: np.ndarray) -> None:
        for name, array in arrays.items():
            self.parts.setdefault(name, []).append(array)

    def set_header(self, obj: dict) -> None:
        version = obj.get("version", 1)
        if type(version) not in (int, float, str) or version not in _VERSIONS:
            raise Unsupported
        if _depth_error(obj) is not None:
            raise Unsupported
        self.header = dict(obj)

    def _streams(self, names: Sequence[str]) -> np.ndarray:
        """The stream index of each name, new streams numbered in order of appearance."""
        index = self.stream_index
        for name in dict.fromkeys(names):
            if name not in index:
                index[name] = len(self.stream_names)
                self.stream_names.append(name)
        return np.fromiter(map(index.__getitem__, names), np.int32, len(names))

    def add_block(self, text: bytes, first_line: int) -> int:
        """Take the events of ``text`` (whole lines, ``first_line`` on, no header): decoded by
        msgspec if every line is a typed event, else by orjson line by line.  The number of
        lines taken."""
        events = _typed_events(text)
        if events is not None:
            self._add(_TypedRows(text), events, first_line)
            return len(events)
        objs = list(map(orjson.loads, text.split(b"\n")))
        if set(map(type, objs)) != {dict}:
            raise Unsupported
        self._add(_DictRows(), objs, first_line)
        return len(objs)

    def _add(self, rows: _DictRows | _TypedRows, events: list, first_line: int) -> None:
        n = len(events)
        if self.n_events + n >= MAX_EVENTS or first_line + n > MAX_LINE:
            raise Unsupported
        kind = rows.kinds(events)
        if n and int(kind.min()) < 0:
            raise Unsupported
        t = rows.times(events)
        stream = np.full(n, -1, np.int32)
        own = np.flatnonzero(kind <= REQUEST)  # writes and requests name their stream
        stream[own] = self._streams(rows.streams(_pick(events, own)))
        ref = np.full(n, -1, np.int32)
        e0 = self.n_events
        w, r = np.flatnonzero(kind == WRITE), np.flatnonzero(kind == REQUEST)
        ref[w] = np.arange(self.n_items, self.n_items + w.shape[0])
        ref[r] = np.arange(self.n_requests, self.n_requests + r.shape[0])
        if w.shape[0]:
            self._writes(rows.writes(_pick(events, w)), w + e0, stream[w])
        if r.shape[0]:
            self._requests(rows.requests(_pick(events, r)), r + e0, stream[r])
        targets = np.flatnonzero(kind > REQUEST)
        if targets.shape[0]:
            self._targets(rows.targets(events, targets), targets + e0, kind[targets])
        line = np.arange(first_line, first_line + n, dtype=np.int32)
        self._keep(ev_kind=kind, ev_stream=stream, ev_ref=ref, ev_t=t, ev_line=line)
        self.n_events += n

    def _writes(self, cols: _WriteColumns, events: np.ndarray, stream: np.ndarray) -> None:
        ids, tokens, types, cost, strings, meta = cols
        if not bool(((tokens > 0) & (tokens <= MAX_TOKENS) & (tokens == np.trunc(tokens))).all()):
            raise Unsupported
        # (no type check: only strings are keys)
        type_code = np.fromiter(map(TYPE_CODE.get, types, repeat(-1)), np.int8, len(types))
        if int(type_code.min()) < 0:
            raise Unsupported
        data, lengths = _encode(ids)
        if not bool(lengths.all()):
            raise Unsupported  # an empty id
        self.item_id.extend(data, lengths)
        for column, values in zip((self.item_text, self.item_task, self.item_session), strings):
            column.extend(*_encode(values))
        self.item_meta.extend(len(types), *meta)
        self._keep(item_tokens=tokens.astype(np.int64), item_type=type_code, item_cost=cost,
                   item_stream=stream, item_event=events.astype(np.int64))  # fmt: skip
        self.n_items += len(types)

    def _requests(self, cols: _RequestColumns, events: np.ndarray, stream: np.ndarray) -> None:
        ids, needs, text, meta = cols
        data, lengths = _encode(ids)
        if not bool(lengths.all()):
            raise Unsupported
        flat = list(chain.from_iterable(needs))
        need_data, need_lengths = _encode(flat)  # TypeError on alternatives (format 1.1)
        self.req_id.extend(data, lengths)
        self.need_id.extend(need_data, need_lengths)
        self.req_text.extend(*_encode(text))
        self.req_meta.extend(len(ids), *meta)
        count = np.fromiter(map(len, needs), np.int64, len(ids))
        self._keep(req_stream=stream, req_event=events.astype(np.int64), need_count=count)
        self.n_requests += len(ids)

    def _targets(self, rows: list[dict], events: np.ndarray, kinds: np.ndarray) -> None:
        """Pins, unpins and annotations: few, so one at a time."""
        for obj, e, kind in zip(rows, events.tolist(), kinds.tolist()):
            target, meta = obj.get("target"), obj.get("meta", _NO_META)
            if type(target) is not str or type(meta) is not dict or _depth_error(obj):
                raise Unsupported
            if kind == ANNOTATE:
                self.annotations[e] = _annotation(obj)
            if not TARGET_FIELDS.issuperset(obj):
                meta = _merged(obj, meta, TARGET_FIELDS)
            if meta:
                self.event_meta[e] = meta
            self.target_id.append(target)
            self.target_stream.append(obj.get("stream", _ABSENT))
        self._keep(target_event=events)

    def build(self, source: str, sha256: str) -> Trace:
        col = {name: np.concatenate(self.parts.pop(name)) for name in list(self.parts)}
        for name, dtype in _DTYPES.items():
            col[name] = col[name].astype(dtype, copy=False) if name in col else np.zeros(0, dtype)
        item_id, req_id = self.item_id.build(), self.req_id.build()
        wanted = [_arrow(self.need_id.build()), pa.array(self.target_id, pa.large_string())]
        need_item, target_item = _lookup(item_id, req_id, wanted)
        needs, needs_ptr = _resolve_needs(col, need_item)
        self._resolve_targets(col, target_item)
        ev_t = _times(col["ev_t"], col["ev_stream"])
        return Trace(
            source=source, sha256=sha256, header=self.header, stream_names=self.stream_names,
            ev_kind=col["ev_kind"], ev_stream=col["ev_stream"], ev_ref=col["ev_ref"], ev_t=ev_t,
            ev_line=col["ev_line"], item_id=item_id, item_tokens=col["item_tokens"],
            item_type=col["item_type"], item_stream=col["item_stream"],
            item_t=ev_t[col["item_event"]], item_cost=col["item_cost"],
            item_event=col["item_event"], item_text=self.item_text.build(),
            item_task=self.item_task.build(), item_session=self.item_session.build(),
            item_meta=self.item_meta.build(), req_id=req_id, req_stream=col["req_stream"],
            req_t=ev_t[col["req_event"]], req_event=col["req_event"],
            req_text=self.req_text.build(), req_meta=self.req_meta.build(),
            needs_ptr=needs_ptr, needs=needs, annotations=self.annotations,
            event_meta=self.event_meta,
        )  # fmt: skip

    def _resolve_targets(self, col: dict[str, np.ndarray], item: np.ndarray) -> None:
        """Each pin/unpin/annotate's item (an earlier write), whose stream it takes."""
        if not self.target_id:
            return
        events = col["target_event"]
        if bool((col["item_event"][item] >= events).any()):
            raise Unsupported  # written later
        stream = col["item_stream"][item]
        for given, s in zip(self.target_stream, stream.tolist()):
            if given is not _ABSENT and given != self.stream_names[s]:
                raise Unsupported
        col["ev_stream"][events] = stream
        col["ev_ref"][events] = item


_DTYPES = {
    "ev_kind": np.int8, "ev_stream": np.int32, "ev_ref": np.int32, "ev_t": np.float64,
    "ev_line": np.int32, "item_tokens": np.int64, "item_type": np.int8, "item_cost": np.float64,
    "item_stream": np.int32, "item_event": np.int64, "req_stream": np.int32,
    "req_event": np.int64, "need_count": np.int64, "target_event": np.int64,
}  # fmt: skip


def _annotation(obj: dict) -> tuple[float | None, str | None]:
    if "value" not in obj and "note" not in obj:
        raise Unsupported
    value = note = None
    if "value" in obj:
        value = _number(obj["value"], 1.0)
        if value is None or not 0.0 <= value <= 1.0:
            raise Unsupported
    if "note" in obj:
        note = obj["note"]
        if type(note) is not str:
            raise Unsupported
    return value, note


def _arrow(column: PackedStrings) -> pa.Array:
    """A packed string column as an Arrow ``large_string`` array (no copy)."""
    return pa.LargeStringArray.from_buffers(
        len(column), pa.py_buffer(np.ascontiguousarray(column.offsets)),
        pa.py_buffer(np.ascontiguousarray(column.data)),
    )  # fmt: skip


def _lookup(item_id: PackedStrings, req_id: PackedStrings, wanted: list[pa.Array]
            ) -> list[np.ndarray]:  # fmt: skip
    """The item index of each id in each of ``wanted``, after checking that no id is defined
    twice; gives up on an id that is not a write's.

    One pass of an Arrow hash table over every id and then the wanted ones
    (``dictionary_encode``: each new string gets the next number): every id must be new (else
    it is a duplicate) and every wanted one must not (else it is unknown), and it must be a
    write's.  (Half the time of building a table of the ids and probing it with all of them.)
    In the system allocator, whose freed memory ``load_trace`` hands back (Arrow's own pool
    would keep it)."""
    n_items, n_ids = len(item_id), len(item_id) + len(req_id)
    strings = pa.chunked_array([_arrow(item_id), _arrow(req_id), *wanted], type=pa.large_string())
    if len(strings) == 0:
        return [np.zeros(0, np.int64) for _ in wanted]
    codes = pc.dictionary_encode(strings, memory_pool=pa.system_memory_pool())
    index = np.concatenate([chunk.indices.to_numpy() for chunk in codes.chunks])
    del codes
    if not np.array_equal(index[:n_ids], np.arange(n_ids)):
        raise Unsupported  # a duplicate id
    out, lo = [], n_ids
    for array in wanted:
        out.append(index[lo : lo + len(array)].astype(np.int64))
        lo += len(array)
    if any(bool((part >= n_items).any()) for part in out):
        raise Unsupported  # an unknown id, or a request's
    return out


def _resolve_needs(col: dict[str, np.ndarray], item: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(needs, needs_ptr)``: each request's needed items (earlier writes of its stream),
    a need listed twice kept once, in first-listed order."""
    count = col["need_count"]
    request = np.repeat(np.arange(count.shape[0], dtype=np.int64), count)
    if bool((col["item_stream"][item] != col["req_stream"][request]).any()):
        raise Unsupported
    if bool((col["item_event"][item] >= col["req_event"][request]).any()):
        raise Unsupported
    multi = np.flatnonzero(count[request] > 1)
    if multi.shape[0]:
        key = request[multi] * max(1, col["item_tokens"].shape[0]) + item[multi]
        _, first = np.unique(key, return_index=True)
        if first.shape[0] < multi.shape[0]:  # a need listed twice: keep its first listing
            keep = np.ones(item.shape[0], bool)
            keep[multi] = False
            keep[multi[first]] = True
            item, request = item[keep], request[keep]
            count = np.bincount(request, minlength=count.shape[0])
    ptr = np.zeros(count.shape[0] + 1, np.int64)
    np.cumsum(count, out=ptr[1:])
    return item.astype(np.int32), ptr


def _times(t: np.ndarray, stream: np.ndarray) -> np.ndarray:
    """Every event's time: given ones never decrease within a stream (else give up); a missing
    one is its stream's last given time, or 0 before any."""
    n = t.shape[0]
    order = np.argsort(stream, kind="stable").astype(np.int32)  # (n < 2**30: int32 halves
    ts, ss = t[order], stream[order]  # the peak memory of a large trace's first load)
    pos = np.arange(n, dtype=np.int32)
    given = ~np.isnan(ts)
    first = np.ones(n, bool)
    first[1:] = ss[1:] != ss[:-1]
    start = np.maximum.accumulate(np.where(first, pos, 0)) if n else pos
    last = np.maximum.accumulate(np.where(given, pos, -1)) if n else pos  # last given <= p
    before = np.empty(n, np.int32)
    before[:1] = -1
    before[1:] = last[:-1]  # last given < p
    check = given & (before >= start)
    if bool((ts[check] < ts[before[check]]).any()):
        raise Unsupported  # time goes backwards
    out = np.empty(n, np.float64)
    out[order] = np.where(last >= start, ts[np.maximum(last, 0)], 0.0)
    return out
