"""The tiers' storage behind three small protocols, with embedded defaults that need no server.

What a tier keeps is separate from how it is kept: a policy and the simulator decide *which*
items sit where; a store only holds them.  Three protocols cover what the tiers need:

* :class:`DocumentStore` (``put``, ``get``, ``delete``): an item's content by id (the long-term
  store's documents, the live manager's items);
* :class:`VectorIndex` (``add``, ``search``, ``delete``): nearest items by cosine similarity,
  optionally among ``allowed`` keys only (a filter applied inside the search, so the answer is
  the top ``k`` of the allowed keys, never "top ``k``, then drop");
* :class:`ShortTermCache` (``get``, ``set`` with a time to live).

Defaults, all in process or in a file: :class:`InProcessDocuments`, :class:`SQLiteDocuments`
(one file, survives a restart), :class:`InProcessCache`, :class:`ExactVectorIndex` (numpy, exact,
ties to the smaller key) and :class:`HnswVectorIndex` (hnswlib, seeded: the same adds in the same
order give the same graph).  Server backends implement the same protocols as optional extras:
``memlens.retrieval.redis_store`` (Redis: cache and documents) and
``memlens.retrieval.qdrant_store`` (Qdrant, local mode or a server: vectors and documents).
"""

from __future__ import annotations

import math
import sqlite3
import time
from collections.abc import Callable
from pathlib import Path
from typing import Protocol, runtime_checkable

import numpy as np
import orjson


@runtime_checkable
class DocumentStore(Protocol):
    def put(self, key: str, doc: dict) -> None: ...
    def get(self, key: str) -> dict | None: ...
    def delete(self, key: str) -> None: ...


@runtime_checkable
class VectorIndex(Protocol):
    def add(self, key: int, vector: np.ndarray) -> None: ...
    def search(self, vector: np.ndarray, k: int, allowed=None) -> list[tuple[int, float]]: ...
    def delete(self, key: int) -> None: ...


@runtime_checkable
class ShortTermCache(Protocol):
    def get(self, key: str) -> object | None: ...
    def set(self, key: str, value: object, ttl_s: float | None = None) -> None: ...


class InProcessDocuments:
    """Documents in a dict (copied in and out: a caller cannot change what is stored)."""

    def __init__(self) -> None:
        self._docs: dict[str, bytes] = {}

    def put(self, key: str, doc: dict) -> None:
        self._docs[key] = orjson.dumps(doc)

    def get(self, key: str) -> dict | None:
        raw = self._docs.get(key)
        return None if raw is None else orjson.loads(raw)

    def delete(self, key: str) -> None:
        self._docs.pop(key, None)


class SQLiteDocuments:
    """Documents in one SQLite file (JSON text per key), committed per call."""

    def __init__(self, path: str | Path) -> None:
        self._db = sqlite3.connect(str(path))
        self._db.execute(
            "CREATE TABLE IF NOT EXISTS docs (key TEXT PRIMARY KEY, doc TEXT NOT NULL)"
        )
        self._db.commit()

    def put(self, key: str, doc: dict) -> None:
        self._db.execute(
            "INSERT OR REPLACE INTO docs VALUES (?, ?)", (key, orjson.dumps(doc).decode())
        )
        self._db.commit()

    def get(self, key: str) -> dict | None:
        row = self._db.execute("SELECT doc FROM docs WHERE key = ?", (key,)).fetchone()
        return None if row is None else orjson.loads(row[0])

    def delete(self, key: str) -> None:
        self._db.execute("DELETE FROM docs WHERE key = ?", (key,))
        self._db.commit()

    def close(self) -> None:
        self._db.close()


class InProcessCache:
    """A dict with a time to live per entry (``clock``: seconds, injectable for replays)."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._data: dict[str, tuple[object, float]] = {}

    def get(self, key: str) -> object | None:
        entry = self._data.get(key)
        if entry is None:
            return None
        value, expires = entry
        if self._clock() >= expires:
            del self._data[key]
            return None
        return value

    def set(self, key: str, value: object, ttl_s: float | None = None) -> None:
        if ttl_s is not None and not (isinstance(ttl_s, (int, float)) and ttl_s > 0):
            raise ValueError(f"ttl_s: must be a positive number of seconds or None, got {ttl_s!r}")
        expires = math.inf if ttl_s is None else self._clock() + ttl_s
        self._data[key] = (value, expires)


def _unit(vector) -> np.ndarray:
    v = np.asarray(vector, np.float32).ravel()
    norm = float(np.linalg.norm(v))
    return v / norm if norm > 0 else v


class ExactVectorIndex:
    """Exact cosine search over every vector held (numpy); ties go to the smaller key."""

    def __init__(self, dim: int) -> None:
        self.dim = int(dim)
        self._vectors: dict[int, np.ndarray] = {}

    def add(self, key: int, vector) -> None:
        v = _unit(vector)
        if v.shape != (self.dim,):
            raise ValueError(f"vector: expected {self.dim} numbers, got {v.shape[0]}")
        self._vectors[int(key)] = v

    def search(self, vector, k: int, allowed=None) -> list[tuple[int, float]]:
        """The ``k`` most similar keys (of ``allowed`` only, when given: a mask)."""
        if not self._vectors or k <= 0:
            return []
        keys = np.fromiter(self._vectors, np.int64, len(self._vectors))
        rows = np.stack(list(self._vectors.values()))
        if allowed is not None:
            ok = np.isin(keys, np.asarray(allowed, np.int64))
            keys, rows = keys[ok], rows[ok]
        sims = rows @ _unit(vector)
        order = np.lexsort((keys, -sims))[:k]
        return [(int(keys[i]), float(sims[i])) for i in order]

    def delete(self, key: int) -> None:
        self._vectors.pop(int(key), None)


class HnswVectorIndex:
    """hnswlib (cosine), seeded and single-threaded: the same adds give the same answers."""

    def __init__(self, dim: int, capacity: int = 1024, M: int = 16, ef: int = 64,
                 seed: int = 0) -> None:  # fmt: skip
        import hnswlib

        self.dim, self.ef = int(dim), int(ef)
        self._index = hnswlib.Index(space="cosine", dim=self.dim)
        self._index.init_index(max_elements=capacity, M=M, ef_construction=100, random_seed=seed)
        self._index.set_num_threads(1)
        self._live: set[int] = set()
        self._known: set[int] = set()

    def add(self, key: int, vector) -> None:
        v = _unit(vector)
        if v.shape != (self.dim,):
            raise ValueError(f"vector: expected {self.dim} numbers, got {v.shape[0]}")
        key = int(key)
        if key in self._known:
            if key not in self._live:
                self._index.unmark_deleted(key)
            self._index.add_items(v[None, :], [key])  # an existing label: its vector replaced
        else:
            if len(self._known) >= self._index.get_max_elements():
                self._index.resize_index(2 * self._index.get_max_elements())
            self._index.add_items(v[None, :], [key])
            self._known.add(key)
        self._live.add(key)

    def search(self, vector, k: int, allowed=None) -> list[tuple[int, float]]:
        """Approximate top ``k``; ``allowed``: hnswlib's ``filter=`` callable admits only those
        keys during the graph walk (a walk that comes back short is answered exactly)."""
        keep = None if allowed is None else self._live.intersection(map(int, allowed))
        k = min(int(k), len(self._live if keep is None else keep))
        if k <= 0:
            return []
        self._index.set_ef(max(self.ef, k))
        q = _unit(vector)[None, :]
        try:
            labels, dist = self._index.knn_query(
                q, k=k, filter=None if keep is None else keep.__contains__)  # fmt: skip
        except RuntimeError:  # fewer than k reached through the filter: score them all
            keys = np.fromiter(sorted(keep), np.int64, len(keep))
            sims = np.asarray(self._index.get_items(keys), np.float32) @ q[0]
            order = np.lexsort((keys, -sims))[:k]
            return [(int(keys[i]), float(sims[i])) for i in order]
        return [(int(a), 1.0 - float(d)) for a, d in zip(labels[0], dist[0])]

    def delete(self, key: int) -> None:
        key = int(key)
        if key in self._live:
            self._index.mark_deleted(key)
            self._live.discard(key)
