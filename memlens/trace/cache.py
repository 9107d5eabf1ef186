"""A disk cache of parsed traces, keyed by the trace file's bytes.

Parsing and validating JSON Lines costs about 8 s per million events; a sweep (``-m``) starts a
process per job and would pay it every time.  The columnar ``Trace`` is therefore stored once,
after successful validation, under ``<cache root>/traces/<key>.npz``, where the key is the
SHA-256 of the file's bytes (plus this module's and ``memlens._util.safecache``'s format versions), so
an edited trace is never served stale.  The entry holds ``Trace.to_arrays()`` (numbers and JSON
only) in ``memlens._util.safecache``'s format: it cannot execute code, and a damaged entry is
detected by its checksum, discarded with one warning and rebuilt from the file.  A trace that
fails validation is never cached.  Turn the cache off with ``trace_cache=false``.
"""

from __future__ import annotations

import hashlib
import json
import os
import zipfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from memlens._util import safecache
from memlens._util.cachedir import cache_dir
from memlens.trace.derived import CACHE_ROOT_KEY
from memlens.trace.io import TraceError, load_trace
from memlens.trace.limits import TraceLimits
from memlens.trace.model import Trace

CACHE_FORMAT = 3  # 3: need groups (format 1.1); 2: safecache .npz; 1: a pickle (ignored)
KIND = "traces"


def file_key(path: str | os.PathLike) -> str:
    digest = hashlib.sha256(
        f"memlens-trace-cache-v{CACHE_FORMAT}-store{safecache.FORMAT}\n".encode()
    )
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def entry_path(path: str | os.PathLike, directory: str | os.PathLike | None = None) -> Path:
    return cache_dir(KIND, directory) / f"{file_key(path)}.npz"


def load_trace_cached(
    path: str | os.PathLike, enabled: bool = True, directory: str | os.PathLike | None = None,
    limits: TraceLimits | None = None,
) -> Trace:  # fmt: skip
    """``load_trace(path, limits=limits)``, served from / stored in the cache when ``enabled``
    (an entry exists only for a trace that passed the limits it was parsed under)."""
    if not enabled:
        return load_trace(path, limits=limits)
    if not Path(path).exists():
        raise TraceError(str(path), 0, None, "no such trace file")
    entry = entry_path(path, directory)
    trace = safecache.load(
        entry, KIND, lambda arrays, meta: Trace.from_arrays(arrays, meta, str(path))
    )
    if trace is None:
        trace = load_trace(path, limits=limits)
        if trace.n_requests:  # a trace with nothing to replay is refused by runs: keep no entry
            arrays, meta = trace.to_arrays()
            safecache.store(entry, KIND, arrays, meta)
    trace.__dict__[CACHE_ROOT_KEY] = str(entry.parent.parent)  # its derived arrays beside it
    return trace


@dataclass(frozen=True)
class CachedFacts:
    """What a process that does not replay a trace needs of it (a compare's main process, whose
    workers load the trace): its hash, events and requests."""

    sha256: str
    n_events: int
    n_requests: int


def cached_facts(
    path: str | os.PathLike, directory: str | os.PathLike | None = None
) -> CachedFacts | None:
    """The facts of the trace at ``path`` from its cache entry's header alone (20 ms, where
    reading and verifying the arrays of 870,000 events takes 0.4 s; the header member's CRC is
    checked as it is read, and whoever loads the arrays verifies them and rebuilds a damaged
    entry from the file), or None when it has no entry of this format (or the header cannot
    be read).  An entry exists only for a trace that parsed and had requests."""
    try:
        with np.load(entry_path(path, directory), allow_pickle=False) as z:
            header = json.loads(z["__header__"].tobytes())
        if header["format"] != safecache.FORMAT or header["kind"] != KIND:
            return None
        shapes = {name: shape for name, _, shape in header["arrays"]}
        return CachedFacts(str(header["meta"]["sha256"]), int(shapes["ev_kind"][0]),
                           int(shapes["req_stream"][0]))  # fmt: skip
    except (OSError, ValueError, KeyError, TypeError, IndexError, zipfile.BadZipFile):
        return None


def cached_events(
    path: str | os.PathLike, directory: str | os.PathLike | None = None
) -> int | None:
    """How many events the trace at ``path`` has (:func:`cached_facts`; a hint, for how many
    workers a sweep over it will start), or None when it has no entry."""
    facts = cached_facts(path, directory)
    return None if facts is None else facts.n_events
