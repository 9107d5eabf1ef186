"""An indexed binary min-heap per stream, for numba kernels whose eviction order is not a queue.

Entries are ``(key, sec, item)``, compared in that order (``key`` a float, ``sec`` an integer
tie-break such as the event of the last use, then the item index), which is how the reference
policies break ties.  Every stream has its own region of one flat array (``base[s]`` to
``base[s + 1]``: as many slots as the stream has items, ``memlens.kernels.common.
stream_offsets``), so streams replayed interleaved in file order never share a heap.  ``pos``
maps an item to its slot (-1 when absent), which gives O(log n) update and removal of any item
without stale entries.

A heap is the tuple ``(key, sec, item, pos, size, base)`` of arrays made by :func:`new_heap`.
"""

from __future__ import annotations

import numba
import numpy as np


def new_heap(n_items: int, base: np.ndarray):
    """Empty heaps for ``n_items`` items over the stream regions ``base``."""
    n_streams = base.shape[0] - 1
    return (np.zeros(n_items, np.float64), np.zeros(n_items, np.int64),
            np.full(n_items, -1, np.int64), np.full(n_items, -1, np.int64),
            np.zeros(n_streams, np.int64), base.astype(np.int64))  # fmt: skip


@numba.njit(cache=True, nogil=True, inline="always")
def _less(key, sec, item, a, b):
    if key[a] != key[b]:
        return key[a] < key[b]
    if sec[a] != sec[b]:
        return sec[a] < sec[b]
    return item[a] < item[b]


@numba.njit(cache=True, nogil=True)
def _swap(key, sec, item, pos, a, b):
    key[a], key[b] = key[b], key[a]
    sec[a], sec[b] = sec[b], sec[a]
    item[a], item[b] = item[b], item[a]
    pos[item[a]] = a
    pos[item[b]] = b


@numba.njit(cache=True, nogil=True)
def _sift(h, s, p):
    """Restore the heap property around slot ``p`` of stream ``s`` (up, then down)."""
    key, sec, item, pos, size, base = h
    b0 = base[s]
    while p > b0:
        q = b0 + (p - b0 - 1) // 2
        if not _less(key, sec, item, p, q):
            break
        _swap(key, sec, item, pos, p, q)
        p = q
    end = b0 + size[s]
    while True:
        c = b0 + 2 * (p - b0) + 1
        if c >= end:
            break
        if c + 1 < end and _less(key, sec, item, c + 1, c):
            c += 1
        if not _less(key, sec, item, c, p):
            break
        _swap(key, sec, item, pos, p, c)
        p = c


@numba.njit(cache=True, nogil=True, inline="always")
def heap_slot(pos, size, base, s, i):
    """Item ``i``'s slot in stream ``s``'s region of a heap, or a new slot at the region's end
    when ``i`` is not in the heap (the caller places it there and sifts); both heaps share it."""
    p = pos[i]
    if p < 0:
        p = base[s] + size[s]
        size[s] += 1
    return p


@numba.njit(cache=True, nogil=True)
def heap_set(h, s, i, k, t):
    """Put item ``i`` in stream ``s``'s heap with entry ``(k, t, i)`` (insert or re-key)."""
    key, sec, item, pos, size, base = h
    p = heap_slot(pos, size, base, s, i)
    item[p] = i
    pos[i] = p
    key[p] = k
    sec[p] = t
    _sift(h, s, p)


@numba.njit(cache=True, nogil=True)
def heap_remove(h, s, i):
    """Take item ``i`` out of stream ``s``'s heap (nothing if it is not there)."""
    key, sec, item, pos, size, base = h
    p = pos[i]
    if p < 0:
        return
    last = base[s] + size[s] - 1
    if p != last:
        _swap(key, sec, item, pos, p, last)
    pos[i] = -1
    size[s] -= 1
    if p != last:
        _sift(h, s, p)


@numba.njit(cache=True, nogil=True)
def heap_top(h, s):
    """The item with the smallest entry in stream ``s``'s heap, or -1 when it is empty."""
    key, sec, item, pos, size, base = h
    return item[base[s]] if size[s] > 0 else -1


@numba.njit(cache=True, nogil=True)
def heap_pop(h, s):
    """Remove and return the smallest item of stream ``s``'s heap (-1 when empty)."""
    i = heap_top(h, s)
    if i >= 0:
        heap_remove(h, s, i)
    return i
