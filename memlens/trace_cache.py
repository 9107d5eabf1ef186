"""A disk cache of parsed traces, keyed by the trace file's bytes.

Parsing and validating JSON Lines costs about 8 s per million events; a sweep (``-m``) starts a
process per job and would pay it every time.  The columnar ``Trace`` is therefore stored once,
after successful validation, under ``<cache root>/traces/<sha256 of the file bytes>.pkl``.  The
key is the file's content (plus this module's format version), so an edited trace is never
served stale; an unreadable entry is ignored and rewritten; a trace that fails validation is
never cached.  Turn it off with ``trace_cache=false``.
"""

from __future__ import annotations

import hashlib
import os
import pickle
from dataclasses import fields
from pathlib import Path

from memlens.atomic import atomic_path
from memlens.cachedir import cache_dir
from memlens.trace import Trace
from memlens.trace_io import TraceError, load_trace

CACHE_FORMAT = 1
_FIELDS = [f.name for f in fields(Trace)]


def file_key(path: str | os.PathLike) -> str:
    digest = hashlib.sha256(f"memlens-trace-cache-v{CACHE_FORMAT}\n".encode())
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def entry_path(path: str | os.PathLike, directory: str | os.PathLike | None = None) -> Path:
    return cache_dir("traces", directory) / f"{file_key(path)}.pkl"


def load_trace_cached(
    path: str | os.PathLike, enabled: bool = True, directory: str | os.PathLike | None = None
) -> Trace:
    """``load_trace(path)``, served from / stored in the cache when ``enabled``."""
    if not enabled:
        return load_trace(path)
    if not Path(path).exists():
        raise TraceError(str(path), 0, None, "no such trace file")
    entry = entry_path(path, directory)
    try:
        with open(entry, "rb") as fh:
            state = pickle.load(fh)
        if set(state) == set(_FIELDS):
            state["source"] = str(path)
            return Trace(**state)
    except FileNotFoundError:
        pass
    except (OSError, EOFError, pickle.UnpicklingError, AttributeError, TypeError, ValueError):
        pass  # a damaged or foreign entry: parse again and overwrite it
    trace = load_trace(path)
    state = {name: getattr(trace, name) for name in _FIELDS}
    try:
        with atomic_path(entry) as tmp, open(tmp, "wb") as fh:
            pickle.dump(state, fh, protocol=pickle.HIGHEST_PROTOCOL)
    except OSError:
        pass  # a read-only or full cache must not stop a run
    return trace
