"""An indexed binary min-heap per stream on two integer keys, for the lfu and oracle kernels.

The same layout as ``memlens.kernels.heap`` (one flat array, a region per stream from
``base[s]`` to ``base[s + 1]``, ``pos`` mapping an item to its slot or -1), with entries
``(k1, k2)`` of int64 compared in that order, ``k2`` unique per item so no third tie-break is
read, and sifting that moves a hole instead of swapping entries (fewer loads and stores per
level than ``heap``'s float/int/item entries).  The functions are compiled without numba's
reference counting (``_nrt=False``) to be called from kernels compiled the same way: with it,
every array a kernel unpacked from a tuple was counted up and down around each call, which
cost more than the heap operation itself.

A heap is the tuple ``(k1, k2, item, pos, size, base)`` made by :func:`new_int_heap`.
"""

from __future__ import annotations

import numba
import numpy as np

from memlens.kernels.heap import heap_slot


def new_int_heap(n_items: int, base: np.ndarray) -> tuple:
    """Empty heaps for ``n_items`` items over the stream regions ``base`` (n_streams + 1).

    Made in Python, outside the kernel: a kernel compiled without numba's reference counting
    (``_nrt=False``, as the lfu and oracle loops are) cannot allocate."""
    n_streams = base.shape[0] - 1
    return (np.zeros(n_items, np.int64), np.zeros(n_items, np.int64),
            np.full(n_items, -1, np.int64), np.full(n_items, -1, np.int64),
            np.zeros(n_streams, np.int64), base.astype(np.int64))  # fmt: skip


def stream_regions(item_stream: np.ndarray, n_streams: int) -> np.ndarray:
    """Per stream the start of its heap region (length ``n_streams + 1``: as many slots as the
    stream has items).  ``memlens.kernels.common.stream_offsets`` gives the same bases and
    per-item slots, which these heaps do not need (its sort cost a tenth of a replay)."""
    base = np.zeros(n_streams + 1, np.int64)
    np.cumsum(np.bincount(item_stream, minlength=n_streams), out=base[1:])
    return base


@numba.njit(cache=True, nogil=True, _nrt=False)
def _place(h, s, p, i, a1, a2):
    """Put entry ``(a1, a2)`` of item ``i`` at hole ``p`` of stream ``s``'s region and move the
    hole up, then down, until the heap property holds."""
    k1, k2, item, pos, size, base = h
    b0 = base[s]
    while p > b0:
        q = b0 + (p - b0 - 1) // 2
        if not (a1 < k1[q] or (a1 == k1[q] and a2 < k2[q])):
            break
        k1[p], k2[p], item[p] = k1[q], k2[q], item[q]
        pos[item[p]] = p
        p = q
    end = b0 + size[s]
    while True:
        c = b0 + 2 * (p - b0) + 1
        if c >= end:
            break
        if c + 1 < end and (k1[c + 1] < k1[c] or (k1[c + 1] == k1[c] and k2[c + 1] < k2[c])):
            c += 1
        if not (k1[c] < a1 or (k1[c] == a1 and k2[c] < a2)):
            break
        k1[p], k2[p], item[p] = k1[c], k2[c], item[c]
        pos[item[p]] = p
        p = c
    k1[p], k2[p], item[p] = a1, a2, i
    pos[i] = p


@numba.njit(cache=True, nogil=True, _nrt=False)
def int_heap_set(h, s, i, a1, a2):
    """Put item ``i`` in stream ``s``'s heap with entry ``(a1, a2)`` (insert or re-key)."""
    pos, size, base = h[3], h[4], h[5]
    _place(h, s, heap_slot(pos, size, base, s, i), i, a1, a2)


@numba.njit(cache=True, nogil=True, _nrt=False)
def int_heap_remove(h, s, i):
    """Take item ``i`` out of stream ``s``'s heap (nothing if it is not there)."""
    k1, k2, item, pos, size, base = h
    p = pos[i]
    if p < 0:
        return
    pos[i] = -1
    size[s] -= 1
    last = base[s] + size[s]
    if p != last:
        _place(h, s, p, item[last], k1[last], k2[last])


@numba.njit(cache=True, nogil=True, _nrt=False)
def int_heap_pop(h, s):
    """Remove and return the item with the smallest entry of stream ``s`` (-1 when empty)."""
    k1, k2, item, pos, size, base = h
    if size[s] == 0:
        return -1
    i = item[base[s]]
    int_heap_remove(h, s, i)
    return i
