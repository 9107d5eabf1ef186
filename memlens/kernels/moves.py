"""Numba helpers the queue and heap kernels share: the move log and the serving alternative."""

from __future__ import annotations

import numba


@numba.njit(cache=True, nogil=True, inline="always")
def log_move(mv, m, e, x, kind):
    """Append move ``(e, x, kind)`` at slot ``m`` of the move log; the next slot."""
    mv[0][m] = e
    mv[1][m] = x
    mv[2][m] = kind
    return m + 1


@numba.njit(cache=True, nogil=True, inline="always")
def first_resident(j, group_ptr, group_items, in_wm):
    """The first resident alternative of need ``j`` in listed order (-1 if none is)."""
    for p in range(group_ptr[j], group_ptr[j + 1]):
        if in_wm[group_items[p]]:
            return group_items[p]
    return -1
