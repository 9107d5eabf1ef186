"""The fast first load of a JSON Lines trace: a block of lines at a time, validated in bulk.

``memlens.trace.io`` validates and stores one event at a time in Python (``_Builder``): about
100,000 events a second of CPU time, most of it per-event bookkeeping rather than reading or
JSON decoding.  This module does the same work a block of lines (512 KiB) at a time, each
block by the first of three tiers that takes it:

1. **the compiled scanner** (``memlens.trace.bulk.scan``, numba): reads the block's bytes straight
   into arrays and packed string columns, with no Python object per event, for lines of the
   shape trace writers produce (``"event"`` first, known fields once, every JSON escape and
   valid UTF-8 in strings, numbers it can convert exactly, ``meta`` an object).  Each
   distinct ``meta`` text of a block is decoded once by orjson (the exact parser's decoder,
   which also validates it) and stored as ``orjson.dumps`` writes it, as the exact parser
   does; pins, unpins and annotations are decoded by orjson, line by line.  A thread scans one
   block ahead (numba releases the GIL) while this one takes the block before (and hashes
   it), and another reads and decompresses (ISA-L's igzip when installed, else zlib) ahead;
2. **msgspec** (a block the scanner leaves: a field it does not know, a key twice, a number
   it cannot convert exactly...): decodes the whole block in one call into typed structs, one
   class per event kind (``decode_lines``): the JSON and every field's type are checked as it
   decodes, a missing field takes the exact parser's default, an unknown field fails it.
   Ranges and ``meta`` are checked after, on arrays or by orjson; pins, unpins and
   annotations are decoded again by orjson; one JSON object per line (``_typed_events``);
3. **orjson, line by line** (a block msgspec refuses: an unknown field, which the exact parser
   keeps in ``meta``; blanks around a line...): into dicts type-checked per column
   (``map(dict.get, ...)`` and the set of value types).

Whatever the tier, the cross-event rules are checked once, over the whole trace, on arrays:
ids unique and needs/targets resolved (one compiled hash table, ``memlens.trace.bulk.rules``, in a
thread while the columns are frozen), each need an earlier write of the same stream, time
never going backwards within a stream (one compiled pass).  The trace hash is computed here,
block by block, while the scanner thread works.  The cyclic garbage collector is paused, and
the GIL's switch interval shortened, while the blocks come and go (:data:`SWITCH_INTERVAL`).

**This module never reports a problem.**  Whatever it cannot vouch for (a JSON error, a value
of the wrong type, an unknown id, time going backwards, a blank line, a carriage return, a
list of alternatives in ``needs``, a gzip error, a line too long) makes it give up
(:class:`Unsupported`), and ``trace_io.load_trace`` then runs the exact line-by-line parser,
which raises the precise ``TraceError`` (file, line, field) or, for a valid input this module
does not handle, loads it.  The errors are therefore the exact parser's by construction; what
this module must guarantee is that it accepts nothing the exact parser rejects and builds the
very same :class:`~memlens.trace.model.Trace` (tests/trace/test_fast_parse.py checks both, differentially,
through each tier; tests/trace/test_json_scan.py checks the scanner's numbers and strings against
orjson's).

Why a compiled scanner, and not ``pyarrow.json.read_json`` or orjson with vectorised column
building (benchmarks/results/parse.md: the 1M-event agent trace, 2 cores, numba cache warm):
the whole first load, validation and columns included, takes 0.91 s wall from ``.jsonl``
(1.10M events/s, 1.41 s of CPU over the threads) and 0.90 s from ``.jsonl.gz`` (1.11M/s).
Loading the compiled code costs a fresh process about 0.3 s more, once (numba's start-up,
shared with the replay kernels); the first load ever compiles it (about 20 s, once per
checkout).  With msgspec as the first tier the same load takes 1.92 s, with every block
through orjson 3.67 s: both keep a Python object per event (a struct or a dict), and pulling
about fifteen fields out of a million of them and packing them costs more than decoding them
(msgspec decodes alone in 0.60 s, orjson in 1.28 s).  Arrow decodes alone in 0.74 s wall
(1.43 s of CPU on both cores), but could not be used at any speed: it gives each field one
type for the whole file, so it cannot tell a missing ``"t"`` (valid) from ``"t": null`` (an
error) nor a missing ``meta`` from a null one, it stores a ``meta`` object's keys in the
column's order rather than the line's (so the meta texts would differ from the exact
parser's), and a field whose type varies across lines fails the whole file: it could neither
build the same Trace nor refuse exactly what the exact parser refuses.
"""

from __future__ import annotations

import contextlib
import gc
import gzip
import hashlib
import math
import os
import queue
import sys
import threading
import zlib
from array import array as typed_array
from collections.abc import Iterator, Sequence
from itertools import chain, compress, repeat
from operator import attrgetter, itemgetter

import msgspec
import numpy as np
import orjson

from memlens.trace import limits as trace_limits
from memlens.trace import lines as trace_lines
from memlens.trace.bulk import rules as trace_rules
from memlens.trace.bulk import scan as json_scan
from memlens.trace.limits import (
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
)
from memlens.trace.lines import open_trace
from memlens.trace.model import ANNOTATE, EVENT_KINDS, PIN, REQUEST, TYPE_CODE, UNPIN, WRITE, Trace
from memlens.trace.packed import _FLUSH_BYTES, PackedJSON, PackedStrings, StringsBuilder

try:  # ISA-L's gzip, three times zlib's speed (a dependency; the standard library's otherwise)
    from isal import igzip as _igzip
except ImportError:  # pragma: no cover
    _igzip = None

#: Decompressed bytes read per step: about 2,000 events of an agent trace.  Below
#: ``memlens._util.malloc.MMAP_THRESHOLD`` (1 MiB) with room to spare, so that a block's text and its
#: temporaries come from the heap and are reused: at 1 MiB each was mapped and unmapped again,
#: and the page faults cost 0.3 s of system time per million events.  (Measured on the
#: 1M-event agent trace, main-thread CPU: 64 KiB blocks took a quarter more, for the Python
#: steps made per block.)
BLOCK_BYTES = 512 << 10
#: The smallest trace file (bytes on disk) read by the compiled scanner; smaller ones go to
#: msgspec.  The scanner saves about a microsecond an event, and its first use in a checkout
#: compiles it (about 20 s and 1.6 GB): not worth it for the small traces of a first run or
#: a test (8 MiB: about 30,000 events of ``.jsonl``, 300,000 of ``.jsonl.gz``).
SCAN_MIN_BYTES = 8 << 20
#: The GIL's switch interval while parsing (Python's default: 5 ms).  The scanner thread needs
#: the GIL for a moment between blocks, and waits up to this long for the parser to hand it
#: over: 5 ms, several times a block, left the scanner idle.
SWITCH_INTERVAL = 0.0002
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


def load_fast(path: str | os.PathLike, max_line_bytes: int | None = None,
              limits: TraceLimits | None = None) -> Trace | None:  # fmt: skip
    """The trace at ``path``, or ``None`` when the exact parser must decide (see the module
    docstring: ``None`` for every invalid input, and for a few valid forms)."""
    # (read at call time, like the exact parser: tests and users may change these settings)
    limit = trace_lines.MAX_LINE_BYTES if max_line_bytes is None else max_line_bytes
    if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
        return None  # the exact parser raises the ValueError
    collecting, switching = gc.isenabled(), sys.getswitchinterval()
    gc.disable()
    sys.setswitchinterval(SWITCH_INTERVAL)
    try:
        return parse_fast(path, limit, limits)
    except _GIVE_UP:
        return None
    finally:
        sys.setswitchinterval(switching)
        if collecting:
            gc.enable()


def parse_fast(path: str | os.PathLike, limit: int | None = None,
               limits: TraceLimits | None = None) -> Trace:  # fmt: skip
    """The trace at ``path``; raises (:data:`_GIVE_UP`) instead of naming any problem (a
    decompression ratio past ``limits`` too: the exact parser names it)."""
    limit = trace_lines.MAX_LINE_BYTES if limit is None else limit
    digest = hashlib.sha256()
    columns = _Columns(trace_limits.SPILL_BYTES)  # read at call time (tests lower it)
    line = 1
    reader = _ReadAhead(path, limits or TraceLimits())
    scanner = os.path.getsize(path) >= SCAN_MIN_BYTES
    scans = _ScanAhead(_line_blocks(reader, limit), limit, scanner)
    try:
        for lines, header, text, scan in scans:
            digest.update(lines)  # (the hash, see _line_blocks: here, where there is time to
            digest.update(b"\n")  # spare while the scanner runs; hashlib releases the GIL)
            if header is not None:
                columns.set_header(header)
                line = 2
            if text is not None:  # (None: the header was all; an empty text: a blank line)
                try:
                    line += columns.add_block(text, line, scan)
                finally:
                    scans.release(scan)
    finally:
        try:
            scans.close()
        finally:
            reader.close()
    return columns.build(str(path), digest.hexdigest())


def _split_header(text: bytes) -> tuple[dict | None, bytes | None]:
    """The first block's header (``None`` if its first line is not one) and its text after
    it (``None`` if nothing more)."""
    end = text.find(b"\n")
    first = orjson.loads(text if end < 0 else text[:end])
    if type(first) is not dict or first.get("event") != "header":
        return None, text
    return first, (None if end < 0 else text[end + 1 :])


_END = object()  # the end of an ``_Ahead`` thread's items


class _Ahead:
    """Items made by a thread (``_produce``) ahead of the consumer, who iterates over them in
    order.  An error in the thread is handed to the consumer (raised as :class:`Unsupported`),
    and :meth:`close` stops the thread wherever it is.  Subclasses set their own state before
    calling ``__init__``, which starts the thread."""

    def __init__(self, name: str, depth: int):
        self._out: queue.Queue = queue.Queue(maxsize=depth)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def _produce(self) -> None:
        raise NotImplementedError

    def _run(self) -> None:
        try:
            self._produce()
            self._put(_END)
        except BaseException as exc:  # noqa: BLE001 - handed over, raised in the consumer
            self._put(exc)

    def _put(self, item) -> bool:
        """Hand ``item`` over (False: the consumer has closed, nothing more is wanted)."""
        while not self._stop.is_set():
            try:
                self._out.put(item, timeout=0.01)
                return True
            except queue.Full:
                continue
        return False

    def __iter__(self) -> Iterator:
        while True:
            item = self._out.get()
            if isinstance(item, BaseException):
                raise Unsupported from item
            if item is _END:
                return
            yield item

    def close(self) -> None:
        self._stop.set()
        _drain(self._out)  # (a put waiting for room ends now, not at its timeout)
        self._thread.join()


class _ScanAhead(_Ahead):
    """The blocks of lines, each with the compiled scanner's reading of it (a
    :class:`~memlens.trace.bulk.scan.BlockScanner`, or ``None`` if it gave up or was not asked),
    made by a thread one block ahead: the scanner releases the GIL, so it runs while the parser
    takes the block before.  The first block's header line is split off here.  Each scanner
    handed out comes back with :meth:`release` (three take turns).  Items: ``(lines, header,
    text, scan)``."""

    def __init__(self, texts: Iterator[bytes], limit: int, scanner: bool = True):
        self.texts, self.limit, self.scanner = texts, limit, scanner
        self._free: queue.Queue = queue.Queue()
        for _ in range(3 if scanner else 0):
            self._free.put(json_scan.BlockScanner())
        super().__init__("trace-scan-ahead", 1)

    def _produce(self) -> None:
        first = True
        for lines in self.texts:
            if len(lines) > self.limit and max(map(len, lines.split(b"\n"))) > self.limit:
                raise Unsupported
            header, text = None, lines
            if first:
                header, text = _split_header(lines)
                first = False
            scan = self._take() if text and self.scanner else None
            if scan is not None and not _scanned(scan, text):
                self.release(scan)
                scan = None
            if self._stop.is_set() or not self._put((lines, header, text, scan)):
                return

    def _take(self) -> json_scan.BlockScanner | None:
        while not self._stop.is_set():
            try:
                return self._free.get(timeout=0.01)
            except queue.Empty:
                continue
        return None

    def release(self, scan: json_scan.BlockScanner | None) -> None:
        if scan is not None:
            self._free.put(scan)


class _ReadAhead(_Ahead):
    """Decompressed blocks of a trace file, read by a thread one block ahead.

    Decompression (igzip or zlib) releases the GIL on large buffers, so on a machine with a
    spare core the reading costs the parser little.  (The hashing is done by the parser
    itself, between blocks: the scanner thread shares the spare core with this one.)"""

    def __init__(self, path: str | os.PathLike, limits: TraceLimits):
        self.path, self.limits = path, limits
        super().__init__("trace-read-ahead", 2)

    def _produce(self) -> None:
        produced = 0
        with _open_decompressed(self.path) as fh:
            while not self._stop.is_set():
                block = fh.read(BLOCK_BYTES)
                produced += len(block)
                if trace_lines.ratio_error(fh, produced, self.limits) is not None:
                    raise Unsupported  # (the exact parser names the line)
                if not block or not self._put(block):
                    return


@contextlib.contextmanager
def _open_decompressed(path: str | os.PathLike) -> Iterator:
    """``open_trace(path)``, a gzip file decompressed by ISA-L's igzip if installed: the same
    bytes as zlib, and an error (here: a give-up) for every file zlib refuses, truncated,
    corrupt or with trailing garbage (tests/trace/test_fast_parse.py checks both)."""
    fh = open_trace(path)
    raw = fh.fileobj if _igzip is not None and isinstance(fh, gzip.GzipFile) else None
    try:
        if raw is None:
            yield fh
        else:
            with _igzip.IGzipFile(fileobj=raw, mode="rb") as fast:
                yield fast
    finally:
        fh.close()
        if raw is not None:
            raw.close()


def _drain(items: queue.Queue) -> None:
    while True:
        try:
            items.get_nowait()
        except queue.Empty:
            return


def _line_blocks(blocks, limit: int) -> Iterator[bytes]:
    """Runs of whole lines (without the last ``\\n``) from decompressed ``blocks``.

    The trace hash is the hash of the text's lines, each ended by ``\\n``, blank lines left out
    and trailing ``\\r`` dropped: with no ``\\r`` and no blank line (a blank line makes the JSON
    decoding fail, and so the fast path give up) that is the file's text as it is, plus a
    ``\\n`` when the last line has none: every run this yields followed by one ``\\n``."""
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
    """A :class:`~memlens.trace.packed.StringsBuilder` that also takes many encoded strings at once
    (same buffers, same spilling to a temporary file past ``spill_bytes``)."""

    def extend(self, data: bytes, lengths: np.ndarray) -> None:
        self.extend_ends(data, np.cumsum(lengths, dtype=np.int64))

    def extend_ends(self, data: bytes | memoryview, ends: np.ndarray) -> None:
        """Append the strings ``data`` holds end to end, the i-th ending at ``ends[i]``."""
        if self._files is not None and ends.shape[0]:
            return self._write_through(data, ends)
        self._offsets.frombytes((ends + self.size).tobytes())
        self._data += data  # (bytes or a memoryview: never a numpy array, which would add)
        self.size += len(data)
        self.n += int(ends.shape[0])
        if self.spill_bytes is not None:
            limit = self.spill_bytes if self._files is None else _FLUSH_BYTES
            if len(self._data) + 8 * len(self._offsets) > limit:
                self._spill()

    def _write_through(self, data: bytes | memoryview, ends: np.ndarray) -> None:
        """Once spilled, a block's strings go straight to the spill files, not through the
        buffer (which ``_spill`` leaves holding the last offset written: the file has every
        offset but the last)."""
        if self._data or len(self._offsets) > 1:
            self._spill()  # (what is buffered first, in order)
        absolute = ends + self.size
        data_file, offsets_file = self._files
        data_file.write(data)
        offsets_file.write(self._offsets.tobytes())
        offsets_file.write(absolute[:-1].tobytes())
        self._offsets = typed_array("q", [int(absolute[-1])])
        self.size += len(data)
        self.n += int(ends.shape[0])


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
                if depth_error(obj) is not None:
                    raise Unsupported
                metas[r] = _merged(obj, metas[r], known)
    full = np.flatnonzero(np.fromiter(map(bool, metas), bool, len(metas)))
    data, lengths = _dumps(_pick(metas, full))
    for r in full[_maybe_deep(data, lengths)].tolist():
        if depth_error(rows[r]) is not None:
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
        if depth_error({"meta": values[k]}) is not None:
            raise Unsupported
    lengths = np.fromiter(map(len, texts), np.int64, len(texts))
    full = np.flatnonzero(lengths > 2)  # b"{}": an empty object, b"": none (not stored)
    if full.shape[0] == len(texts):
        return full, b"".join(texts), lengths
    return full, b"".join(_pick(texts, full)), lengths[full]


def _stored_metas(metas: list[bytes], codes: np.ndarray) -> tuple[np.ndarray, bytes, np.ndarray]:
    """The rows whose meta is not empty, and their texts as the exact parser stores them
    (``metas``: each distinct meta of the block so, ``codes``: each row's, -1 for none)."""
    size = np.fromiter(map(len, metas), np.int64, len(metas))
    full = np.flatnonzero(codes >= 0)
    full = full[size[codes[full]] > 2]  # b"{}": an empty object, not stored
    return (full, *json_scan.gather(metas, codes[full]))


def _scanned(scanner: json_scan.BlockScanner, text: bytes) -> bool:
    """Whether the compiled scanner read every line of ``text`` (``memlens.trace.bulk.scan``)."""
    return scanner.scan(text)


def _scanned_strings(scan: json_scan.BlockScanner, col: int) -> list[str]:
    """The distinct values of column ``col`` (STREAMS or TYPES) of the scanned block, in the
    order of their codes (valid UTF-8: the scanner checked)."""
    data, ends = scan.column(col)
    text = bytes(data)
    bounds = [0, *ends.tolist()]
    return [text[a:b].decode() for a, b in zip(bounds, bounds[1:])]


def _typed_events(text: bytes) -> list | None:
    """The events of ``text``, one a line, as typed structs; ``None`` unless every line is
    one event that msgspec decodes (and type-checks) as a write, request, pin, unpin or
    annotate.

    ``decode_lines`` reads a stream of values, blind to where the lines break; the exact
    parser wants one object per line.  Every line break here lies between a ``}`` and a
    ``{`` (the check below), which no JSON value holds inside itself: a string cannot hold a
    raw line break, and ``}`` then ``{`` is not valid inside an object or a list (msgspec
    checks the grammar of the text it skips too, tests/trace/test_fast_parse.py; only its UTF-8 and
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
        self.meta_texts: dict[bytes, bytes] = {}  # a raw meta text -> as the exact parser stores it

    def _keep(self, **arrays: np.ndarray) -> None:
        for name, array in arrays.items():
            self.parts.setdefault(name, []).append(array)

    def set_header(self, obj: dict) -> None:
        version = obj.get("version", 1)
        if type(version) not in (int, float, str) or version not in VERSIONS:
            raise Unsupported
        if depth_error(obj) is not None:
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

    def add_block(self, text: bytes, first_line: int,
                  scan: json_scan.BlockScanner | None = None) -> int:  # fmt: skip
        """Take the events of ``text`` (whole lines, ``first_line`` on, no header): as the
        compiled scanner read them (``scan``, if it could), else decoded by msgspec if every
        line is a typed event, else by orjson line by line.  The number of lines taken."""
        if scan is not None:
            return self._add_scanned(scan, text, first_line)
        events = _typed_events(text)
        if events is not None:
            self._add(_TypedRows(text), events, first_line)
            return len(events)
        objs = list(map(orjson.loads, text.split(b"\n")))
        if set(map(type, objs)) != {dict}:
            raise Unsupported
        self._add(_DictRows(), objs, first_line)
        return len(objs)

    def _add_scanned(self, scan: json_scan.BlockScanner, text: bytes, first_line: int) -> int:
        """Take the events of ``text`` as the compiled scanner read them (``scan``'s buffers,
        copied out here: the next block reuses them); the number of lines taken."""
        n, n_writes, n_requests, n_targets = (int(c) for c in scan.counts[:4])
        if self.n_events + n >= MAX_EVENTS or first_line + n > MAX_LINE:
            raise Unsupported
        kind, t = scan.ev_kind[:n].copy(), scan.ev_t[:n].copy()
        stream, ref = np.full(n, -1, np.int32), np.full(n, -1, np.int32)
        local_streams = self._streams(_scanned_strings(scan, json_scan.STREAMS))
        spans = scan.metas[: scan.counts[json_scan.C_METAS]].tolist()
        metas = [self._stored_meta(text[a:b]) for a, b in spans]
        e0 = self.n_events
        if n_writes:
            w = scan.writes[:n_writes, json_scan.W_LINE]
            stream[w] = local_streams[scan.writes[:n_writes, json_scan.W_STREAM]]
            ref[w] = np.arange(self.n_items, self.n_items + n_writes)
            self._scanned_writes(scan, metas, w + e0, stream[w])
        if n_requests:
            r = scan.requests[:n_requests, json_scan.R_LINE]
            stream[r] = local_streams[scan.requests[:n_requests, json_scan.R_STREAM]]
            ref[r] = np.arange(self.n_requests, self.n_requests + n_requests)
            self._scanned_requests(scan, metas, r + e0, stream[r])
        if n_targets:
            lines = scan.targets[:n_targets, json_scan.T_LINE]
            spans = scan.targets[:n_targets, json_scan.T_START :].tolist()
            objs = [orjson.loads(text[a:b]) for a, b in spans]
            if set(map(type, objs)) != {dict} or any(
                obj.get("event") != EVENT_KINDS[k] for obj, k in zip(objs, kind[lines].tolist())
            ):
                raise Unsupported  # (a second "event" key: the last one counts)
            t[lines] = _numbers(objs, "t", math.nan)
            self._targets(objs, lines + e0, kind[lines])
        line = np.arange(first_line, first_line + n, dtype=np.int32)
        self._keep(ev_kind=kind, ev_stream=stream, ev_ref=ref, ev_t=t, ev_line=line)
        self.n_events += n
        return n

    def _scanned_writes(self, scan: json_scan.BlockScanner, metas: list[bytes], events: np.ndarray,
                        stream: np.ndarray) -> None:  # fmt: skip
        n = events.shape[0]
        tokens = scan.writes[:n, json_scan.W_TOKENS].copy()  # (in range: the scanner checked)
        codes = [TYPE_CODE.get(name, -1) for name in _scanned_strings(scan, json_scan.TYPES)]
        if min(codes) < 0:
            raise Unsupported  # (every distinct type is some write's)
        type_code = np.array(codes, np.int8)[scan.writes[:n, json_scan.W_TYPE]]
        self.item_id.extend_ends(*scan.column(json_scan.ITEM_ID))  # (none empty: checked)
        self.item_text.extend_ends(*scan.column(json_scan.ITEM_TEXT))
        self.item_task.extend_ends(*scan.column(json_scan.ITEM_TASK))
        self.item_session.extend_ends(*scan.column(json_scan.ITEM_SESSION))
        self.item_meta.extend(n, *_stored_metas(metas, scan.writes[:n, json_scan.W_META]))
        self._keep(item_tokens=tokens, item_type=type_code, item_cost=scan.costs[:n].copy(),
                   item_stream=stream, item_event=events.astype(np.int64))  # fmt: skip
        self.n_items += n

    def _scanned_requests(self, scan: json_scan.BlockScanner, metas: list[bytes],
                          events: np.ndarray,
                          stream: np.ndarray) -> None:  # fmt: skip
        n = events.shape[0]
        self.req_id.extend_ends(*scan.column(json_scan.REQ_ID))
        self.need_id.extend_ends(*scan.column(json_scan.NEED_ID))
        self.req_text.extend_ends(*scan.column(json_scan.REQ_TEXT))
        self.req_meta.extend(n, *_stored_metas(metas, scan.requests[:n, json_scan.R_META]))
        count = scan.requests[:n, json_scan.R_NEEDS].copy()
        self._keep(req_stream=stream, req_event=events.astype(np.int64), need_count=count)
        self.n_requests += n

    def _stored_meta(self, raw: bytes) -> bytes:
        """The meta text ``raw`` as the exact parser stores it: ``orjson.dumps`` of what
        ``orjson.loads`` makes of it (decoded once per distinct text; orjson validates it)."""
        stored = self.meta_texts.get(raw)
        if stored is None:
            value = orjson.loads(raw)
            if type(value) is not dict:
                raise Unsupported
            if len(self.meta_texts) >= 1 << 16:  # (all distinct: keep the memory bounded)
                self.meta_texts.clear()
            stored = self.meta_texts[raw] = orjson.dumps(value)
        return stored

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
            if type(target) is not str or type(meta) is not dict or depth_error(obj):
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
        targets = _encode(self.target_id)
        wanted = [self.need_id.build(), (np.frombuffer(targets[0], np.uint8), _offsets(targets[1]))]
        lookup = _Background(_lookup, item_id, req_id, wanted)  # (compiled: no GIL)
        ev_t = None if self.target_id else _times(col["ev_t"], col["ev_stream"], self.stream_names)
        texts = [b.build() for b in (self.item_text, self.item_task, self.item_session,
                                     self.req_text)]  # fmt: skip
        metas = self.item_meta.build(), self.req_meta.build()
        need_item, target_item = lookup.result()
        needs, needs_ptr = _resolve_needs(col, need_item)
        self._resolve_targets(col, target_item)
        if ev_t is None:  # (the pins' streams are known now)
            ev_t = _times(col["ev_t"], col["ev_stream"], self.stream_names)
        return Trace(
            source=source, sha256=sha256, header=self.header, stream_names=self.stream_names,
            ev_kind=col["ev_kind"], ev_stream=col["ev_stream"], ev_ref=col["ev_ref"], ev_t=ev_t,
            ev_line=col["ev_line"], item_id=item_id, item_tokens=col["item_tokens"],
            item_type=col["item_type"], item_stream=col["item_stream"],
            item_t=ev_t[col["item_event"]], item_cost=col["item_cost"],
            item_event=col["item_event"], item_text=texts[0], item_task=texts[1],
            item_session=texts[2], item_meta=metas[0], req_id=req_id, req_stream=col["req_stream"],
            req_t=ev_t[col["req_event"]], req_event=col["req_event"], req_text=texts[3],
            req_meta=metas[1],
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
        value = finite_number(obj["value"], 1.0)
        if value is None or not 0.0 <= value <= 1.0:
            raise Unsupported
    if "note" in obj:
        note = obj["note"]
        if type(note) is not str:
            raise Unsupported
    return value, note


def _lookup(item_id: PackedStrings, req_id: PackedStrings, wanted: list) -> list[np.ndarray]:
    """The item index of each id in each of ``wanted`` (packed columns), after checking that no
    id is defined twice; gives up on an id that is not a write's (``trace_rules``)."""
    found = trace_rules.resolve_ids(_packed(item_id), _packed(req_id), list(map(_packed, wanted)))
    if found is None:
        raise Unsupported  # a duplicate id, an unknown one, or a request's
    return found


def _packed(column) -> tuple[np.ndarray, np.ndarray]:
    """A packed string column (or its ``(bytes, offsets)``) as contiguous uint8 and int64."""
    data, offsets = (column.data, column.offsets) if isinstance(column, PackedStrings) else column
    return np.ascontiguousarray(data, np.uint8), np.ascontiguousarray(offsets, np.int64)


def _offsets(lengths: np.ndarray) -> np.ndarray:
    out = np.zeros(lengths.shape[0] + 1, np.int64)
    np.cumsum(lengths, out=out[1:])
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


def _times(t: np.ndarray, stream: np.ndarray, streams: list[str]) -> np.ndarray:
    """Every event's time: given ones never decrease within a stream (else give up); a missing
    one is its stream's last given time, or 0 before any (``memlens.trace.bulk.rules``)."""
    out = trace_rules.event_times(t, stream, len(streams))
    if out is None:
        raise Unsupported  # time goes backwards
    return out


class _Background:
    """``fn(*args)`` run by a thread (for work that releases the GIL); :meth:`result` waits
    for it and returns it or raises what it raised."""

    def __init__(self, fn, *args):
        self._value: tuple = (None, None)
        self._thread = threading.Thread(target=self._run, args=(fn, *args), daemon=True)
        self._thread.start()

    def _run(self, fn, *args) -> None:
        try:
            self._value = (fn(*args), None)
        except BaseException as exc:  # noqa: BLE001 - raised in result()
            self._value = (None, exc)

    def result(self):
        self._thread.join()
        value, exc = self._value
        if exc is not None:
            raise exc
        return value
