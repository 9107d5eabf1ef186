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
    plans = [
        np.stack([ev[ptr[s] : ptr[s + 1]], item[ptr[s] : ptr[s + 1]]], axis=1).astype(np.int64)
        for s in range(n)
    ]
    return OracleResult(
        budget=meta["budget"],
        demand_fetch=meta["demand_fetch"],
        streams=[StreamBound(**d) for d in meta["streams"]],
        plans=plans,
        wall_s=meta["wall_s"],
        from_cache=True,
    )


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
    safecache.store(_path(cache_dir, k), KIND, arrays, meta)
