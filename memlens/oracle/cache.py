"""On-disk cache of oracle results, so a sweep over policies solves each bound once.

One entry per key (``memlens._util.safecache``: numbers and JSON only, checksummed): the per-stream
numbers as JSON metadata plus the plans the oracle policy replays as arrays.  The key hashes the
trace content (``Trace.sha256``), its pins (``Trace.pin_keys``), the budget, demand fetch, the
solver settings, ``FORMAT`` and the storage format; bump ``FORMAT`` whenever a change to the
oracle can change its numbers, so stale entries are never read.  A damaged entry is discarded
with one warning and solved again.
"""

from __future__ import annotations

import hashlib
import json
import operator
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from memlens._util import safecache
from memlens._util.cachedir import cache_dir as shared_cache_dir
from memlens.oracle.result import OracleResult, StreamBound
from memlens.trace.model import Trace

FORMAT = 4  # 4: short streams solved exactly (memlens.oracle.exact); 3: integer programs after the replay
KIND = "oracle"


def key(trace: Trace, budget: int, demand_fetch: bool, solver: dict) -> str:
    pins = hashlib.sha256(repr(trace.pin_keys()).encode()).hexdigest()
    blob = json.dumps(
        {
            "format": FORMAT,
            "store": safecache.FORMAT,
            "trace": trace.sha256,
            "pins": pins,
            "budget": budget,
            "demand_fetch": demand_fetch,
            "solver": solver,
        },
        sort_keys=True,
    )
    return hashlib.sha256(blob.encode()).hexdigest()[:32]


def directory(cache_dir: str | None) -> Path:
    """``cache_dir``, or ``$MEMLENS_CACHE/oracle``, or ``~/.cache/memlens/oracle``."""
    return shared_cache_dir("oracle", cache_dir)


def _path(cache_dir, k: str) -> Path:
    return Path(cache_dir) / f"{k}.npz"


def exists(cache_dir, k: str) -> bool:
    return _path(cache_dir, k).exists()


def load(cache_dir: str, k: str):
    """The stored ``OracleResult`` for key ``k``, or ``None`` (absent, or damaged and dropped)."""
    return safecache.load(_path(cache_dir, k), KIND, _decode)


def _decode(arrays: dict, meta: dict):
    ptr, ev, item = arrays["plan_ptr"], arrays["plan_event"], arrays["plan_item"]
    n = len(meta["streams"])
    if ptr.shape != (n + 1,) or ev.shape != item.shape or ptr[0] != 0 or ptr[-1] != ev.size:
        raise ValueError("the plans do not match the streams")
    if np.any(np.diff(ptr) < 0):
        raise ValueError("the plan offsets decrease")
    return OracleResult(
        budget=meta["budget"],
        demand_fetch=meta["demand_fetch"],
        streams=[StreamBound(**d) for d in meta["streams"]],
        plans=StoredPlans(ptr, ev, item),
        wall_s=meta["wall_s"],
        from_cache=True,
    )


class StoredPlans(Sequence):
    """A stored result's per-stream plans, each ``(n, 2)`` array made when it is read: a run
    that needs only the bounds (every policy but ``oracle``) makes none of them (5,800 small
    arrays took 0.1 s of a warm ``simulate``; issue 34)."""

    def __init__(self, ptr: np.ndarray, event: np.ndarray, item: np.ndarray) -> None:
        self._ptr, self._event, self._item = ptr, event, item

    def __len__(self) -> int:
        return len(self._ptr) - 1

    def __getitem__(self, s):
        if isinstance(s, slice):
            return [self[k] for k in range(*s.indices(len(self)))]
        s = operator.index(s)
        if not -len(self) <= s < len(self):
            raise IndexError(f"stream {s} of {len(self)}")
        s %= len(self)
        lo, hi = self._ptr[s], self._ptr[s + 1]
        return np.stack([self._event[lo:hi], self._item[lo:hi]], axis=1).astype(np.int64)


def store(cache_dir: str, k: str, result) -> None:
    meta = {
        "budget": result.budget,
        "demand_fetch": result.demand_fetch,
        "streams": [s.as_dict() for s in result.streams],
        "wall_s": result.wall_s,
    }
    lens = [p.shape[0] for p in result.plans]
    ptr = np.concatenate([[0], np.cumsum(lens)]).astype(np.int64)
    allp = np.concatenate(result.plans) if result.plans else np.zeros((0, 2), np.int64)
    arrays = {
        "plan_ptr": ptr,
        "plan_event": allp[:, 0].astype(np.int64),
        "plan_item": allp[:, 1].astype(np.int64),
    }
    # deflate level 1: a compare writes one per budget before its jobs start (level 6 took
    # 0.17 s of a 5,800-stream entry's 0.25 s; the file is a fifth larger)
    safecache.store(_path(cache_dir, k), KIND, arrays, meta, level=1)
