"""The simulator's long-term store on a chosen backend (``retrieval.store``).

``hnsw`` (the default) is :class:`memlens.retrieval.index.LongTermIndex` itself: hnswlib per
stream, exact scoring below ``retrieval.hnsw.exact_below`` candidates.  ``exact`` and ``qdrant``
keep the vectors in a :class:`memlens.retrieval.storage.VectorIndex` per stream, made by a
factory (:class:`memlens.retrieval.storage.ExactVectorIndex`, or a Qdrant collection per stream
in local mode, :class:`memlens.retrieval.qdrant_store.QdrantVectorIndex`), and search through
the protocol: :class:`ProtocolLongTermIndex` is the adapter the
:class:`memlens.retrieval.assemble.Retriever` drives exactly as it drives the default one.

What moves to the backend and what does not: the decisions stay in process.  The tier state
(:class:`memlens.retrieval.tiers.TierState`) decides when an item enters or leaves the store;
the adapter keeps the membership and the pre-filter's groups (which items of a stream pass a
:class:`memlens.retrieval.index.Prefilter`), and hands the backend the vectors (``add``,
``delete``) and the search, with the keys the pre-filter admits as ``allowed`` (a filter inside
the backend's search).  The backend's answer is which keys are nearest (asked for more than
``k`` when scores near the ``k``-th are within :data:`SCORE_SLACK`, so a near tie is settled
here, not by the backend's rounding); their similarities are then computed from the trace's
vectors by :func:`memlens.retrieval.index.top_k`, as the default store's exact path computes
them.  Exact backends therefore agree with each other key for key, and with ``hnsw`` wherever
hnswlib is exact by design (at most ``exact_below`` candidates).
"""

from __future__ import annotations

import shutil
import tempfile
import time
import weakref
from collections.abc import Callable

import numpy as np

from memlens.retrieval.config import STORES
from memlens.retrieval.index import LongTermIndex, Prefilter, top_k
from memlens.retrieval.storage import ExactVectorIndex, VectorIndex

#: how far a backend's cosine may be from the trace's own (float32 rounding is ~1e-7)
SCORE_SLACK = 1e-4


class ProtocolLongTermIndex(LongTermIndex):
    """:class:`LongTermIndex`'s membership, metadata and pre-filter, with each stream's vectors
    in the :class:`VectorIndex` that ``make_store(stream)`` returns (made on first use)."""

    def __init__(self, vectors: np.ndarray, item_stream: np.ndarray, n_streams: int,
                 make_store: Callable[[int], VectorIndex], **kw) -> None:  # fmt: skip
        super().__init__(vectors, item_stream, n_streams, **kw)
        self._make_store = make_store
        self._stores: dict[int, VectorIndex] = {}

    def close(self) -> None:
        """Release the backend (a Qdrant factory's client and folder), if it holds anything."""
        getattr(self._make_store, "close", lambda: None)()

    def _store(self, s: int) -> VectorIndex:
        if s not in self._stores:
            self._stores[s] = self._make_store(s)
        return self._stores[s]

    def lts_enter(self, i: int, e: int = -1) -> None:
        if self.in_lts[i]:
            return
        s = int(self.item_stream[i])
        t0 = time.perf_counter()
        self._store(s).add(i, self.vectors[i])
        self.build_s += time.perf_counter() - t0
        self._join(i, s)

    def lts_leave(self, i: int) -> None:
        if not self.in_lts[i]:
            return
        s = int(self.item_stream[i])
        self._store(s).delete(i)
        self._part(i, s)

    def search(self, s: int, q: np.ndarray, k: int, pre: Prefilter | None = None
               ) -> tuple[np.ndarray, np.ndarray]:  # fmt: skip
        """The backend's ``k`` nearest of stream ``s`` among what ``pre`` admits, scored and
        ordered as :func:`memlens.retrieval.index.top_k` does (ties: lower item index)."""
        allowed = None
        if pre is not None:
            allowed = self.members(s, pre)
        if self.live[s] == 0 or k <= 0 or (allowed is not None and allowed.size == 0):
            return np.empty(0, dtype=np.int64), np.empty(0, dtype=np.float32)
        self.index_queries += 1
        keys = self._candidates(self._store(s), q, k, allowed)
        return top_k(self.vectors, keys, q, k)

    @staticmethod
    def _candidates(store: VectorIndex, q: np.ndarray, k: int, allowed) -> np.ndarray:
        """The backend's nearest keys, asked for more until every key scoring within
        :data:`SCORE_SLACK` of its ``k``-th is in (or it has no more): the top ``k`` by the
        trace's own arithmetic is then among them, whatever the backend's rounding."""
        limit = k
        while True:
            hits = store.search(q, limit, allowed=allowed)
            if len(hits) < limit or hits[-1][1] < hits[k - 1][1] - SCORE_SLACK:
                return np.fromiter((key for key, _ in hits), dtype=np.int64, count=len(hits))
            limit *= 2


class QdrantStreams:
    """One Qdrant collection per stream, in local mode, in a fresh temporary folder (removed
    when this object goes): a replay's store starts empty and is never shared by two runs."""

    def __init__(self, dim: int) -> None:
        from memlens.retrieval.qdrant_store import QdrantVectorIndex, _client

        self.dim, self._index_cls = int(dim), QdrantVectorIndex
        self.folder = tempfile.mkdtemp(prefix="memlens-qdrant-")
        self.client = _client(self.folder, None, None)
        self.close = weakref.finalize(self, _close_and_remove, self.client, self.folder)
        """Close the client and remove the folder (at most once; also when garbage-collected
        or at exit)."""

    def __call__(self, s: int) -> VectorIndex:
        return self._index_cls(self.dim, collection=f"stream_{s}", client=self.client)


def _close_and_remove(client, folder: str) -> None:
    client.close()
    shutil.rmtree(folder, ignore_errors=True)


def store_factory(store: str, dim: int) -> Callable[[int], VectorIndex]:
    """``make_store(stream)`` for a protocol backend (``exact`` or ``qdrant``)."""
    if store == "exact":
        return lambda s: ExactVectorIndex(dim)
    if store == "qdrant":
        return QdrantStreams(dim)
    raise ValueError(f"retrieval.store must be one of {', '.join(STORES)}, got {store!r}")


def long_term_index(store: str, vectors: np.ndarray, item_stream: np.ndarray, n_streams: int,
                    **kw) -> LongTermIndex:  # fmt: skip
    """The long-term store's index for ``retrieval.store`` (``kw``: LongTermIndex's settings)."""
    if store == "hnsw":
        return LongTermIndex(vectors, item_stream, n_streams, **kw)
    make_store = store_factory(store, int(np.asarray(vectors).shape[1]))
    return ProtocolLongTermIndex(vectors, item_stream, n_streams, make_store, **kw)
