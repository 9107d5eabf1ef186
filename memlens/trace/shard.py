"""A trace split by stream into N shards, without ever holding the trace.

Streams are independent agents (each has its own working memory and budget, and every
interval is a bootstrap over streams), so a trace too large for one machine can be replayed a
shard of streams at a time and merged exactly (``memlens.analyze.merge``).  This module does
the split:

* the input is one ``.jsonl[.gz]`` file, a directory of them, or a glob; several files are one
  trace, read in name order (a stream's events may be spread over several files: they are
  its events in that order, as if the files were concatenated with the later headers left out);
* every line is read as a stream of lines (``memlens.trace.lines``: bounded line length, gzip
  and decompression-ratio checks, blank lines) and goes to shard
  ``blake2b(stream id) mod N`` (:func:`shard_of`: stable across processes and machines, unlike
  ``hash()``).  A pin, unpin or annotate without a ``stream`` takes its target's stream, which
  only the target's write knows: such a line goes to *every* shard, and each shard keeps it only
  where an earlier write of its own defines the target (:func:`resolved_shard`); a line no
  shard keeps is the error the single-file parser reports;
* each shard is itself a trace file (the first file's header, then its lines in input order),
  so the one exact parser validates it, and the worker that replays it keeps the parse in the
  parsed-trace cache's safe format (``memlens.trace.cache``).  Beside it, in flat int64 files,
  where each of its lines came from (file, line: an error in a shard names the *input's* file
  and line) and the global index of each event, item and request (what the merged
  ``per_request.parquet`` and ``events.parquet`` say);
* ids are unique in the whole trace, also across shards: every id goes to one of
  :data:`ID_BUCKETS` bucket files by its hash and each bucket is checked on its own
  afterwards, so the check holds one bucket's ids at a time.

Memory: the open shard files' buffers, one bucket of ids, and per stream its shard and first
event (O(streams), never O(events)).  The shards of a trace are made once and cached under
``<cache root>/shards/<key>/``, key = the input files' bytes + N + :data:`SHARD_FORMAT`; the
``meta.json`` written last says a shard set is complete.
"""

from __future__ import annotations

import glob
import hashlib
import json
import os
import shutil
import tempfile
from array import array
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import orjson

from memlens._util.cachedir import cache_dir
from memlens.trace.io import _decode
from memlens.trace.limits import TraceLimits
from memlens.trace.lines import TraceError, check_trace_file, read_lines

SHARD_FORMAT = 1
KIND = "shards"
#: Bucket files the global id check spreads ids over (one bucket in memory at a time).
ID_BUCKETS = 64
_TARGETED = frozenset({"pin", "unpin", "annotate"})
_FLUSH = 1 << 16  # sidecar entries buffered per shard before they go to disk
_FILE_BITS = 40  # a line's origin: file index << 40 | line number


def shard_of(stream: str, n: int) -> int:
    """The shard of a stream id: its BLAKE2b digest modulo ``n`` (the same everywhere)."""
    digest = hashlib.blake2b(stream.encode("utf-8", "surrogatepass"), digest_size=8).digest()
    return int.from_bytes(digest, "little") % n


def input_files(spec: str) -> list[Path]:
    """The files of a trace: ``spec`` itself, the ``.jsonl``/``.jsonl.gz`` files of a directory,
    or the matches of a glob, in name order.  A ``TraceError`` (line 0) when there is none."""
    path = Path(spec)
    if path.is_dir():
        files = [f for f in path.iterdir() if f.name.endswith((".jsonl", ".jsonl.gz"))]
    elif glob.has_magic(spec):
        files = [Path(f) for f in glob.glob(spec)]
    else:
        check_trace_file(spec)
        return [path]
    files = sorted(f for f in files if f.is_file())
    if not files:
        raise TraceError(spec, 0, None, "no .jsonl or .jsonl.gz trace file found there")
    return files


def origin(files: list[str], code: int) -> tuple[str, int]:
    """(file, 1-based line) of a line's origin code."""
    return files[code >> _FILE_BITS], code & ((1 << _FILE_BITS) - 1)


@dataclass(frozen=True)
class ShardSet:
    """A sharded trace on disk: ``n`` shard traces and what the merge needs to know."""

    folder: Path
    n: int
    meta: dict  # meta.json: files, sha256, events, per shard: events, streams, broadcast

    @property
    def files(self) -> list[str]:
        return self.meta["files"]

    @property
    def sha256(self) -> str:
        return self.meta["sha256"]

    @property
    def n_events(self) -> int:
        return int(self.meta["events"])

    @property
    def n_streams(self) -> int:
        return sum(len(s["streams"]) for s in self.meta["shards"])

    def trace_path(self, k: int) -> Path:
        return self.folder / f"{k}.jsonl"

    def sidecar(self, k: int, what: str) -> np.ndarray:
        """Shard ``k``'s ``lines`` (origin code per line), ``events``, ``items`` or ``requests``
        (global index per shard event, write, request); of the resolved shard
        (:func:`resolved_shard`) once it exists."""
        resolved = self.folder / f"{k}.resolved.{what}.bin"
        path = resolved if resolved.is_file() else self.folder / f"{k}.{what}.bin"
        return np.fromfile(path, dtype=np.int64)

    def broadcast_origins(self) -> np.ndarray:
        """The origin code of every broadcast line (a pin, unpin or annotate without
        ``stream``), in input order."""
        return np.fromfile(self.folder / "broadcast.bin", dtype=np.int64)

    def unkept_error(self, kept: list[np.ndarray]) -> TraceError | None:
        """The error for the first broadcast line no shard kept (its target was written by no
        earlier line of any stream), as the single-file parser words it; None if every one
        was kept."""
        if not kept or not len(kept[0]):
            return None
        lost = np.flatnonzero(~np.logical_or.reduce(kept))
        if not lost.size:
            return None
        source, line = origin(self.files, int(self.broadcast_origins()[lost[0]]))
        obj = next(_decode(source, n, raw) for n, raw in read_lines(source) if n == line)
        target = obj.get("target")
        if target is None:
            return TraceError(source, line, "target", f'{obj["event"]}: missing field "target"')
        return TraceError(
            source,
            line,
            "target",
            f"{obj['event']} targets {json.dumps(target)[:80]}, which no earlier write defines",
        )

    def error(self, k: int, err: TraceError) -> TraceError:
        """A shard's parse error, naming the input's file and line instead of the shard's."""
        if err.line <= 0:
            return TraceError(self.meta["source"], 0, err.field, err.message)
        lines = self.sidecar(k, "lines")
        source, line = origin(self.files, int(lines[err.line - 1]))
        return TraceError(source, line, err.field, err.message)


def shard_key(files: list[Path], n: int) -> str:
    digest = hashlib.sha256(f"memlens-shards-v{SHARD_FORMAT}\n{n}\n".encode())
    for f in files:
        digest.update(f"{f.resolve()}\n".encode())
        with open(f, "rb") as fh:
            for block in iter(lambda: fh.read(1 << 20), b""):
                digest.update(block)
    return digest.hexdigest()


def shard_trace(spec: str, n: int, directory: str | os.PathLike | None = None,
                limits: TraceLimits | None = None) -> ShardSet:  # fmt: skip
    """The trace at ``spec`` split into ``n`` shards (made once, then read from the cache).

    Raises ``TraceError`` naming file, line and field for what can be checked while splitting
    (unreadable lines, malformed JSON, a ``stream`` that is not a string, mismatched headers,
    duplicate ids); every other rule is checked when a shard is parsed (``ShardSet.error``
    names the input's line)."""
    if not (type(n) is int and n >= 1):
        raise ValueError(f"shards must be a positive number, got {n!r}")
    files = input_files(spec)
    folder = cache_dir(KIND, directory) / shard_key(files, n)
    meta_path = folder / "meta.json"
    if meta_path.is_file():
        return ShardSet(folder, n, json.loads(meta_path.read_text()))
    folder.parent.mkdir(parents=True, exist_ok=True)
    stage = Path(tempfile.mkdtemp(prefix=".staging.", dir=folder.parent))
    try:
        meta = _Splitter(stage, n, files, spec, limits or TraceLimits()).run()
        (stage / "meta.json").write_text(json.dumps(meta))
        try:
            os.rename(stage, folder)
        except OSError:  # another process made the same shards first
            shutil.rmtree(stage, ignore_errors=True)
    except BaseException:
        shutil.rmtree(stage, ignore_errors=True)
        raise
    return ShardSet(folder, n, json.loads(meta_path.read_text()))


class _Sidecar:
    """An int64 column written to disk a block at a time."""

    def __init__(self, path: Path):
        self.fh = open(path, "wb")  # noqa: SIM115 - closed by close()
        self.buf = array("q")

    def add(self, value: int) -> None:
        self.buf.append(value)
        if len(self.buf) >= _FLUSH:
            self.buf.tofile(self.fh)
            del self.buf[:]

    def close(self) -> None:
        self.buf.tofile(self.fh)
        self.fh.close()


class _Shard:
    """One shard being written: its trace file and sidecars."""

    def __init__(self, folder: Path, k: int):
        self.fh = open(folder / f"{k}.jsonl", "wb", buffering=1 << 20)  # noqa: SIM115
        self.side = {w: _Sidecar(folder / f"{k}.{w}.bin")
                     for w in ("lines", "events", "items", "requests")}  # fmt: skip
        self.streams: dict[str, int] = {}  # name -> global event index of its first event
        self.events = self.broadcast = 0

    def line(self, raw: bytes, code: int) -> None:
        self.fh.write(raw)
        self.fh.write(b"\n")
        self.side["lines"].add(code)

    def close(self) -> dict:
        self.fh.close()
        for s in self.side.values():
            s.close()
        return {"events": self.events, "broadcast": self.broadcast,
                "streams": list(self.streams.items())}  # fmt: skip


class _Splitter:
    """One pass over the input lines, writing every shard (see the module docstring)."""

    def __init__(self, folder: Path, n: int, files: list[Path], spec: str, limits: TraceLimits):
        self.folder, self.n, self.files, self.spec, self.limits = folder, n, files, spec, limits
        self.shards = [_Shard(folder, k) for k in range(n)]
        self.buckets = [open(folder / f"ids.{b}", "wb", buffering=1 << 16)  # noqa: SIM115
                        for b in range(ID_BUCKETS)]  # fmt: skip
        self.stream_shard: dict[str, int] = {}
        self.broadcast = _Sidecar(folder / "broadcast.bin")
        self.digest = hashlib.sha256()
        self.header: dict | None = None
        self.counts = {"events": 0, "items": 0, "requests": 0}

    def run(self) -> dict:
        try:
            for f_index, path in enumerate(self.files):
                self._file(f_index, path)
        finally:
            shards = [s.close() for s in self.shards]
            for b in self.buckets:
                b.close()
            self.broadcast.close()
        self._check_ids()
        return {"format": SHARD_FORMAT, "source": self.spec, "files": [str(f) for f in self.files],
                "sha256": self.digest.hexdigest(), "header": self.header,
                **self.counts, "shards": shards}  # fmt: skip

    def _file(self, f_index: int, path: Path) -> None:
        source, first = str(path), True
        for line_no, raw in read_lines(path, limits=self.limits):
            if not raw or raw.isspace():
                continue
            obj = _decode(source, line_no, raw)
            if obj is None:
                continue
            self.digest.update(raw.rstrip(b"\r") if raw[-1:] == b"\r" else raw)
            self.digest.update(b"\n")
            code = f_index << _FILE_BITS | line_no
            kind = obj.get("event") if isinstance(obj, dict) else None
            if kind == "header" and first:
                self._header(obj, source, line_no, code, f_index)
            else:
                self._event(obj, kind, raw, code, source, line_no)
            first = False

    def _header(self, obj: dict, source: str, line: int, code: int, f_index: int) -> None:
        if f_index == 0:
            self.header = obj
            for s in self.shards:
                s.line(orjson.dumps(obj), code)
        elif obj.get("version", 1) != (self.header or {}).get("version", 1):
            raise TraceError(source, line, "version", f"header version {obj.get('version', 1)!r} "
                             f"differs from {self.files[0]}'s "
                             f"{(self.header or {}).get('version', 1)!r}: one trace has one "
                             "format version")  # fmt: skip

    def _event(self, obj, kind, raw: bytes, code: int, source: str, line: int) -> None:
        targeted = kind in _TARGETED and isinstance(obj, dict) and "stream" not in obj
        if targeted:  # its stream is its target's: every shard gets it, one keeps it
            for s in self.shards:
                s.line(raw, code)
                s.side["events"].add(self.counts["events"])
                s.events += 1
                s.broadcast += 1
            self.broadcast.add(code)
            self.counts["events"] += 1
            return
        name = obj.get("stream", "") if isinstance(obj, dict) else ""
        if not isinstance(name, str):
            raise TraceError(
                source,
                line,
                "stream",
                f'field "stream" must be a string, got {json.dumps(name)[:80]}',
            )
        k = self.stream_shard.get(name)
        if k is None:
            k = self.stream_shard[name] = shard_of(name, self.n)
        shard = self.shards[k]
        shard.line(raw, code)
        shard.side["events"].add(self.counts["events"])
        shard.events += 1
        if kind in ("write", "request"):
            shard.streams.setdefault(name, self.counts["events"])
            plural = "items" if kind == "write" else "requests"
            shard.side[plural].add(self.counts[plural])
            self.counts[plural] += 1
            ident = obj.get("id")
            if isinstance(ident, str):
                key = orjson.dumps(ident)
                bucket = hashlib.blake2b(key, digest_size=2).digest()[0] % ID_BUCKETS
                self.buckets[bucket].write(b"%s\t%d\n" % (key, code))
        self.counts["events"] += 1

    def _check_ids(self) -> None:
        """Every id once in the whole trace: the earliest repeat (file, line) is the error."""
        worst: tuple[int, str] | None = None
        for b in range(ID_BUCKETS):
            seen: set[bytes] = set()
            with open(self.folder / f"ids.{b}", "rb") as fh:
                for row in fh:
                    key, _, code = row.rpartition(b"\t")
                    if key in seen and (worst is None or int(code) < worst[0]):
                        worst = (int(code), orjson.loads(key))
                    seen.add(key)
            os.unlink(self.folder / f"ids.{b}")
        if worst is not None:
            source, line = origin([str(f) for f in self.files], worst[0])
            raise TraceError(source, line, "id", f'duplicate id "{worst[1]}"')


def resolved_shard(shards: ShardSet, k: int) -> tuple[Path, np.ndarray]:
    """Shard ``k``'s trace file with its broadcast lines resolved, and for each broadcast line
    of the input whether this shard kept it (in broadcast order).

    A broadcast line (a pin, unpin or annotate without ``stream``) is kept where an earlier
    write of this shard defines its target; the kept lines' sidecar entries stay, the others
    are dropped.  Without broadcast lines the shard file itself is returned."""
    path = shards.trace_path(k)
    info = shards.meta["shards"][k]
    if not info["broadcast"]:
        return path, np.zeros(0, dtype=bool)
    out = shards.folder / f"{k}.resolved.jsonl"
    kept_path = shards.folder / f"{k}.kept.npy"
    if out.is_file() and kept_path.is_file():
        return out, np.load(kept_path)
    raw_side = lambda what: np.fromfile(shards.folder / f"{k}.{what}.bin", dtype=np.int64)  # noqa: E731
    lines, events = raw_side("lines"), raw_side("events")
    keep_line = np.ones(len(lines), dtype=bool)
    keep_event = np.ones(len(events), dtype=bool)
    kept, ids, e = [], set(), -1
    with open(path, "rb") as fh:
        for i, raw in enumerate(fh):
            obj = orjson.loads(raw)
            kind = obj.get("event") if isinstance(obj, dict) else None
            if kind == "header":
                continue
            e += 1
            if kind == "write" and isinstance(obj.get("id"), str):
                ids.add(obj["id"])
            elif kind in _TARGETED and "stream" not in obj:
                mine = isinstance(obj.get("target"), str) and obj["target"] in ids
                kept.append(mine)
                keep_line[i] = keep_event[e] = mine
    _filter_file(path, out, keep_line, shards.folder, k, lines, events[keep_event])
    np.save(kept_path, np.asarray(kept, dtype=bool))
    return out, np.asarray(kept, dtype=bool)


def _filter_file(path: Path, out: Path, keep: np.ndarray, folder: Path, k: int,
                 lines: np.ndarray, events: np.ndarray) -> None:  # fmt: skip
    """The kept lines of ``path`` into ``out`` and their sidecars beside it; each file written
    under a name of this process's and renamed into place, the trace file last."""
    tag = f".{os.getpid()}.tmp"
    with open(path, "rb") as src, open(f"{out}{tag}", "wb", buffering=1 << 20) as dst:
        for i, raw in enumerate(src):
            if keep[i]:
                dst.write(raw)
    for what, column in (("lines", lines[keep]), ("events", events)):
        side = folder / f"{k}.resolved.{what}.bin"
        column.tofile(f"{side}{tag}")
        os.replace(f"{side}{tag}", side)
    os.replace(f"{out}{tag}", out)
