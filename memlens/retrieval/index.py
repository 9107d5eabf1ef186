"""The long-term store's vector index: one hnswlib (cosine) index per stream.

Why one index per stream: the first pre-filter (same stream) is then structural and free, and a
stream's searches never visit another agent's memories.  The other pre-filters (task, type,
time window, :class:`Prefilter`) are applied *before* the vector search: the store keeps its
members grouped by (task, type), so it knows how many items can pass without scanning.  At most
``exact_below`` of them are listed and scored exactly (a graph walk would be slower there and
could come back short); more are searched in hnswlib with a filter callable that admits only
them, so the walk never returns an item the filter excludes and never needs "top-k, then drop".

The store holds pointers (item indices, which address the full content in the trace); an item
that leaves the store (fetched back into working memory) is marked deleted in the graph and
un-marked if it returns, so each item is embedded and added once.

Determinism: each index is seeded (``random_seed``), items are added one thread at a time in
replay order and queried single-threaded, so the same config and seed give the same results.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from itertools import chain

import hnswlib
import numpy as np


def top_k(vectors: np.ndarray, items, q: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Exact top ``k`` of ``items`` by dot product with ``q``; ties go to the lower index.

    Each similarity is a product per dimension summed along the row, which depends on the item
    and the query alone: a matrix product (BLAS) rounds a row's last bit differently with the
    number and place of the rows it is batched with, so the same item would score a hair apart
    when scored among all stored items or among a backend's ``k`` (retrieval.store)."""
    items = np.asarray(items, dtype=np.int64)
    if items.size == 0 or k <= 0:
        return np.empty(0, dtype=np.int64), np.empty(0, dtype=np.float32)
    sims = (vectors[items] * np.asarray(q, dtype=vectors.dtype)).sum(axis=1)
    order = np.lexsort((items, -sims))[:k]
    return items[order], sims[order].astype(np.float32)


@dataclass(frozen=True)
class Prefilter:
    """Which stored items a request may see beyond its stream (None: no condition)."""

    types: tuple[int, ...] | None = None  # allowed item type codes
    task: int | None = None  # required task code (-1 matches nothing)
    min_t: float | None = None  # oldest allowed write time (trace seconds)


class LongTermIndex:
    """Membership, metadata and vector search of the long-term store, per stream."""

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
        item_type: np.ndarray | None = None,
        item_task: np.ndarray | None = None,
        item_t: np.ndarray | None = None,
    ):
        self.vectors = np.ascontiguousarray(vectors, dtype=np.float32)
        self.dim = int(self.vectors.shape[1])
        n = self.vectors.shape[0]
        self.item_stream = np.asarray(item_stream, dtype=np.int64)
        zeros = np.zeros(n, dtype=np.int64)
        self.item_type = zeros if item_type is None else np.asarray(item_type, dtype=np.int64)
        self.item_task = zeros if item_task is None else np.asarray(item_task, dtype=np.int64)
        self.item_t = np.zeros(n) if item_t is None else np.asarray(item_t, dtype=np.float64)
        # plain lists: the filter callable reads one label at a time, where lists beat numpy
        self._type_l = self.item_type.tolist()
        self._task_l = self.item_task.tolist()
        self._t_l = self.item_t.tolist()
        self.n_per_stream = np.bincount(self.item_stream, minlength=n_streams)
        self.M, self.ef_construction, self.ef_search = int(M), int(ef_construction), int(ef_search)
        self.seed = int(seed)
        self.exact_below = int(exact_below)
        self.in_lts = np.zeros(n, dtype=bool)
        self._added = np.zeros(n, dtype=bool)
        self.live = [0] * n_streams
        #: per stream: (task, type) -> members, so a pre-filter is counted without a scan
        self._groups: list[dict[tuple[int, int], set[int]]] = [{} for _ in range(n_streams)]
        self._index: list[hnswlib.Index | None] = [None] * n_streams
        self.build_s = 0.0  # wall time spent adding to the graphs
        self.index_queries = 0
        self.exact_queries = 0

    # ------------------------------------------------------------- membership
    def _graph(self, s: int) -> hnswlib.Index:
        g = self._index[s]
        if g is None:
            g = hnswlib.Index(space="cosine", dim=self.dim)
            g.init_index(
                max_elements=max(1, int(self.n_per_stream[s])),
                ef_construction=self.ef_construction,
                M=self.M,
                random_seed=self.seed + s,
            )
            g.set_ef(self.ef_search)
            g.set_num_threads(1)
            self._index[s] = g
        return g

    def _join(self, i: int, s: int) -> None:
        self.in_lts[i] = True
        self.live[s] += 1
        key = (self._task_l[i], self._type_l[i])
        self._groups[s].setdefault(key, set()).add(i)

    def add_many(self, items: np.ndarray, num_threads: int = 1) -> None:
        """Bulk insert (benchmarks); replay uses :meth:`lts_enter` one item at a time."""
        items = np.asarray(items, dtype=np.int64)
        t0 = time.perf_counter()
        for s in np.unique(self.item_stream[items]).tolist():
            mine = items[self.item_stream[items] == s]
            self._graph(s).add_items(self.vectors[mine], mine, num_threads=num_threads)
            self._added[mine] = True
            for i in mine.tolist():
                self._join(i, s)
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
        self._join(i, s)

    def lts_leave(self, i: int) -> None:
        if not self.in_lts[i]:
            return
        s = int(self.item_stream[i])
        self._index[s].mark_deleted(i)
        self._part(i, s)

    def _part(self, i: int, s: int) -> None:
        self.in_lts[i] = False
        self.live[s] -= 1
        self._groups[s][(self._task_l[i], self._type_l[i])].discard(i)

    def members(self, s: int, pre: Prefilter | None = None) -> np.ndarray:
        """Stored items of stream ``s`` that pass ``pre`` (ascending item index)."""
        groups = self._matching(s, pre)
        out = np.fromiter(chain.from_iterable(groups), dtype=np.int64)
        if pre is not None and pre.min_t is not None and out.size:
            out = out[self.item_t[out] >= pre.min_t]
        return np.sort(out)

    # ------------------------------------------------------------- pre-filter
    def _matching(self, s: int, pre: Prefilter | None) -> list[set[int]]:
        groups = self._groups[s]
        if pre is None:
            return list(groups.values())
        types = None if pre.types is None else set(pre.types)
        return [
            g
            for (task, ty), g in groups.items()
            if (pre.task is None or task == pre.task) and (types is None or ty in types)
        ]

    def mask(self, items: np.ndarray, pre: Prefilter | None) -> np.ndarray:
        """Vectorised pre-filter over any items (the short-term cache uses it too)."""
        ok = np.ones(items.shape[0], dtype=bool)
        if pre is None:
            return ok
        if pre.types is not None:
            ok &= np.isin(self.item_type[items], pre.types)
        if pre.task is not None:
            ok &= self.item_task[items] == pre.task
        if pre.min_t is not None:
            ok &= self.item_t[items] >= pre.min_t
        return ok

    def _predicate(self, pre: Prefilter):
        """The per-label filter hnswlib calls during its graph walk."""
        types = None if pre.types is None else frozenset(pre.types)
        task, min_t = pre.task, pre.min_t
        ty, ta, tt = self._type_l, self._task_l, self._t_l
        if task is None and min_t is None and types is not None:
            return lambda label: ty[label] in types
        return lambda label: (
            (types is None or ty[label] in types)
            and (task is None or ta[label] == task)
            and (min_t is None or tt[label] >= min_t)
        )

    # ----------------------------------------------------------------- search
    def exact(self, items: np.ndarray, q: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        """Top ``k`` of ``items`` by cosine similarity to ``q`` (ties: lower item index)."""
        if items.size and k > 0:
            self.exact_queries += 1
        return top_k(self.vectors, items, q, k)

    def search(
        self, s: int, q: np.ndarray, k: int, pre: Prefilter | None = None
    ) -> tuple[np.ndarray, np.ndarray]:
        """The ``k`` stored items of stream ``s`` most similar to ``q`` among those ``pre``
        admits.  Returns (items, cosine similarities), best first."""
        live = self.live[s]
        if live == 0 or k <= 0:
            return np.empty(0, dtype=np.int64), np.empty(0, dtype=np.float32)
        if pre is None:
            if live <= self.exact_below:
                return self.exact(self.members(s), q, k)
            try:
                return self._knn(s, q, min(k, live), None)
            except RuntimeError:  # a graph walk that came back short: fall back to exact
                return self.exact(self.members(s), q, k)
        bound = sum(len(g) for g in self._matching(s, pre))  # exact unless a time window
        if bound <= max(self.exact_below, k):
            return self.exact(self.members(s, pre), q, k)
        try:
            return self._knn(s, q, k, self._predicate(pre))
        except RuntimeError:  # fewer than k pass (a narrow time window): score them exactly
            return self.exact(self.members(s, pre), q, k)

    def _knn(self, s: int, q: np.ndarray, k: int, filt) -> tuple[np.ndarray, np.ndarray]:
        self.index_queries += 1
        labels, dists = self._index[s].knn_query(q, k=k, num_threads=1, filter=filt)
        return labels[0].astype(np.int64), (1.0 - dists[0]).astype(np.float32)


class GrowingLongTermIndex(LongTermIndex):
    """A :class:`LongTermIndex` whose items arrive while an agent runs (the live manager's
    incremental retrieval): :meth:`add_items` appends items (vectors and metadata) and streams,
    and each stream's graph grows as items enter it.  Entering, leaving and searching are the
    base class's, so the same adds in the same order give the same answers as an index built
    over the finished trace (hnswlib's levels come from its seeded generator, one draw per
    add, whatever the graph's capacity)."""

    def __init__(self, dim: int, M: int = 16, ef_construction: int = 100, ef_search: int = 64,
                 seed: int = 0, exact_below: int = 64) -> None:  # fmt: skip
        super().__init__(np.zeros((0, dim), np.float32), np.zeros(0, np.int64), 0, M=M,
                         ef_construction=ef_construction, ef_search=ef_search, seed=seed,
                         exact_below=exact_below)  # fmt: skip
        self.n = 0

    def add_items(self, vectors: np.ndarray, streams, types, tasks, times, n_streams: int
                  ) -> None:  # fmt: skip
        """New items (the next indices), none in the store yet; streams up to ``n_streams``."""
        k = len(streams)
        lo, hi = self.n, self.n + k
        if hi > self.vectors.shape[0]:
            self._reserve(max(hi, 2 * self.vectors.shape[0], 64))
        self.vectors[lo:hi] = vectors
        self.item_stream[lo:hi] = streams
        self.item_type[lo:hi] = types
        self.item_task[lo:hi] = tasks
        self.item_t[lo:hi] = times
        self._type_l.extend(types)
        self._task_l.extend(tasks)
        self._t_l.extend(times)
        self.n = hi
        while len(self.live) < n_streams:
            self.live.append(0)
            self._groups.append({})
            self._index.append(None)
        self.n_per_stream = np.bincount(self.item_stream[:hi], minlength=n_streams)

    def _reserve(self, capacity: int) -> None:
        """Room for ``capacity`` items in the per-item arrays (copied into larger ones)."""

        def larger(a: np.ndarray) -> np.ndarray:
            out = np.zeros((capacity, *a.shape[1:]), a.dtype)
            out[: self.n] = a[: self.n]
            return out

        self.vectors, self.item_stream = larger(self.vectors), larger(self.item_stream)
        self.item_type, self.item_task = larger(self.item_type), larger(self.item_task)
        self.item_t, self.in_lts, self._added = (
            larger(self.item_t), larger(self.in_lts), larger(self._added))  # fmt: skip

    def lts_enter(self, i: int, e: int = -1) -> None:
        if not self.in_lts[i] and not self._added[i]:
            g = self._graph(int(self.item_stream[i]))
            if g.get_current_count() >= g.get_max_elements():
                g.resize_index(2 * g.get_max_elements())
        super().lts_enter(i, e)
