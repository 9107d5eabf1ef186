"""The long-term store's vector index: one hnswlib (cosine) index per stream.

Why one index per stream: the first pre-filter (same stream) is then structural and free, and a
stream's searches never visit another agent's memories.  The other pre-filters (task, type,
time window) are applied *before* the vector search: the eligible items are listed, and either
scored exactly (when at most ``exact_below`` remain, where a graph search would be slower and
could come back short) or searched in hnswlib with a filter callable that admits only them.

The store holds pointers (item indices, which address the full content in the trace); an item
that leaves the store (fetched back into working memory) is marked deleted in the graph and
un-marked if it returns, so each item is embedded and added once.

Determinism: each index is seeded (``random_seed``), items are added one thread at a time in
replay order and queried single-threaded, so the same config and seed give the same results.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import hnswlib
import numpy as np


def top_k(vectors: np.ndarray, items, q: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Exact top ``k`` of ``items`` by dot product with ``q``; ties go to the lower index."""
    items = np.asarray(items, dtype=np.int64)
    if items.size == 0 or k <= 0:
        return np.empty(0, dtype=np.int64), np.empty(0, dtype=np.float32)
    sims = vectors[items] @ q
    order = np.lexsort((items, -sims))[:k]
    return items[order], sims[order].astype(np.float32)


class LongTermIndex:
    """Membership and vector search of the long-term store, per stream."""

    def __init__(
        self,
        vectors: np.ndarray,
        item_stream: np.ndarray,
        n_streams: int,
        M: int = 16,
        ef_construction: int = 100,
        ef_search: int = 64,
        seed: int = 0,
        exact_below: int = 64,
    ):
        self.vectors = np.ascontiguousarray(vectors, dtype=np.float32)
        self.dim = int(self.vectors.shape[1])
        self.item_stream = np.asarray(item_stream, dtype=np.int64)
        order = np.argsort(self.item_stream, kind="stable")
        bounds = np.searchsorted(self.item_stream[order], np.arange(n_streams + 1))
        self.stream_items = [order[bounds[s] : bounds[s + 1]] for s in range(n_streams)]
        self.M, self.ef_construction, self.ef_search = int(M), int(ef_construction), int(ef_search)
        self.seed = int(seed)
        self.exact_below = int(exact_below)
        n = self.vectors.shape[0]
        self.in_lts = np.zeros(n, dtype=bool)
        self._added = np.zeros(n, dtype=bool)
        self._ok = np.zeros(n, dtype=bool)  # scratch: the eligible set during one filtered query
        self.live = [0] * n_streams
        self._index: list[hnswlib.Index | None] = [None] * n_streams
        self.build_s = 0.0  # wall time spent adding to the graphs
        self.index_queries = 0
        self.exact_queries = 0

    # ------------------------------------------------------------- membership
    def _graph(self, s: int) -> hnswlib.Index:
        g = self._index[s]
        if g is None:
            g = hnswlib.Index(space="cosine", dim=self.dim)
            g.init_index(max_elements=max(1, len(self.stream_items[s])),
                         ef_construction=self.ef_construction, M=self.M,
                         random_seed=self.seed + s)  # fmt: skip
            g.set_ef(self.ef_search)
            g.set_num_threads(1)
            self._index[s] = g
        return g

    def add_many(self, items: np.ndarray, num_threads: int = 1) -> None:
        """Bulk insert (benchmarks); replay uses :meth:`lts_enter` one item at a time."""
        items = np.asarray(items, dtype=np.int64)
        t0 = time.perf_counter()
        for s in np.unique(self.item_stream[items]).tolist():
            mine = items[self.item_stream[items] == s]
            self._graph(s).add_items(self.vectors[mine], mine, num_threads=num_threads)
            self._added[mine] = True
            self.in_lts[mine] = True
            self.live[s] += int(mine.size)
        self.build_s += time.perf_counter() - t0

    def lts_enter(self, i: int, e: int = -1) -> None:
        if self.in_lts[i]:
            return
        s = int(self.item_stream[i])
        g = self._graph(s)
        if self._added[i]:
            g.unmark_deleted(i)
        else:
            t0 = time.perf_counter()
            g.add_items(self.vectors[i : i + 1], np.asarray([i]), num_threads=1)
            self.build_s += time.perf_counter() - t0
            self._added[i] = True
        self.in_lts[i] = True
        self.live[s] += 1

    def lts_leave(self, i: int) -> None:
        if not self.in_lts[i]:
            return
        s = int(self.item_stream[i])
        self._index[s].mark_deleted(i)
        self.in_lts[i] = False
        self.live[s] -= 1

    def members(self, s: int) -> np.ndarray:
        items = self.stream_items[s]
        return items[self.in_lts[items]]

    # ----------------------------------------------------------------- search
    def exact(self, items: np.ndarray, q: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        """Top ``k`` of ``items`` by cosine similarity to ``q`` (ties: lower item index)."""
        if items.size and k > 0:
            self.exact_queries += 1
        return top_k(self.vectors, items, q, k)

    def search(
        self,
        s: int,
        q: np.ndarray,
        k: int,
        allow: Callable[[np.ndarray], np.ndarray] | None = None,
    ) -> tuple[np.ndarray, np.ndarray]:
        """The ``k`` stored items of stream ``s`` most similar to ``q`` among those ``allow``s.

        ``allow`` maps an array of item indices to a boolean mask (the pre-filter beyond the
        stream).  Returns (items, cosine similarities), best first.
        """
        live = self.live[s]
        if live == 0 or k <= 0:
            return np.empty(0, dtype=np.int64), np.empty(0, dtype=np.float32)
        if allow is None:
            if live <= self.exact_below:
                return self.exact(self.members(s), q, k)
            try:
                return self._knn(s, q, min(k, live), None)
            except RuntimeError:  # a graph walk that came back short: fall back to exact
                return self.exact(self.members(s), q, k)
        members = self.members(s)
        eligible = members[allow(members)]
        if eligible.size <= self.exact_below or eligible.size <= k:
            return self.exact(eligible, q, k)
        ok = self._ok
        ok[eligible] = True
        try:
            return self._knn(s, q, k, ok.__getitem__)
        except RuntimeError:  # the graph walk found fewer than k eligible items
            return self.exact(eligible, q, k)
        finally:
            ok[eligible] = False

    def _knn(self, s: int, q: np.ndarray, k: int, filt) -> tuple[np.ndarray, np.ndarray]:
        self.index_queries += 1
        labels, dists = self._index[s].knn_query(q, k=k, num_threads=1, filter=filt)
        return labels[0].astype(np.int64), (1.0 - dists[0]).astype(np.float32)
