"""Per-stream doubly linked queues over item indices, for the queue kernels (FIFO, LRU, MemGPT).

A queue is four arrays ``prev, nxt, head, tail``: ``prev``/``nxt`` indexed by item (-1 at the ends),
``head``/``tail`` by stream (-1 when empty).  Unlinking and appending are O(1), which is what
lets the FIFO, LRU and MemGPT kernels replay without a scan per eviction.
"""

from __future__ import annotations

import numba


@numba.njit(cache=True, nogil=True)
def unlink(v, s, prev, nxt, head, tail):
    """Take ``v`` out of stream ``s``'s queue."""
    p, n = prev[v], nxt[v]
    if p == -1:
        head[s] = n
    else:
        nxt[p] = n
    if n == -1:
        tail[s] = p
    else:
        prev[n] = p
    prev[v] = -1
    nxt[v] = -1


@numba.njit(cache=True, nogil=True)
def append(v, s, prev, nxt, head, tail):
    """Put ``v`` at the end of stream ``s``'s queue (as its newest item)."""
    t = tail[s]
    prev[v] = t
    nxt[v] = -1
    if t == -1:
        head[s] = v
    else:
        nxt[t] = v
    tail[s] = v
