"""Numba helpers every kernel shares: the move log, and the cursor over a request's needs and
their alternatives (trace format 1.1).

Two layouts of alternatives reach the kernels.  The group layout (``group_ptr``/``group_items``:
every need's alternatives, itself first) serves :func:`first_resident`.  The sparse layout
(``alt_need``: the needs that have alternatives, sorted; ``alt_ptr``/``alt_items``: the other
alternatives of each) is walked with a cursor ``g`` that advances past a need's alternatives
as its need is visited: :func:`count_needs` and :func:`any_resident`.  The reference engine's
rule is one: a need is served when any alternative it lists is resident, and every item it
lists counts one use."""

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


@numba.njit(cache=True, nogil=True, inline="always")
def count_needs(lo, hi, g0, needs, alt_need, alt_ptr, alt_items, in_wm, uses_seen, need_hit):
    """Needs ``lo..hi`` of one request, the cursor at ``g0``: ``need_hit[j] = 1`` when any
    alternative of need ``j`` is resident; every item listed counts one use."""
    n_alt = alt_need.shape[0]
    g = g0
    for j in range(lo, hi):
        i = needs[j]
        hit = in_wm[i] == 1
        if g < n_alt and alt_need[g] == j:
            for q in range(alt_ptr[g], alt_ptr[g + 1]):
                hit = hit or in_wm[alt_items[q]] == 1
                uses_seen[alt_items[q]] += 1
            g += 1
        if hit:
            need_hit[j] = 1
        uses_seen[i] += 1


@numba.njit(cache=True, nogil=True, inline="always")
def any_resident(j, g, needs, alt_need, alt_ptr, alt_items, in_wm):
    """(whether need ``j`` has a resident alternative, the cursor past ``j``'s alternatives);
    ``g`` is the cursor as need ``j`` is reached."""
    present = in_wm[needs[j]] == 1
    if g < alt_need.shape[0] and alt_need[g] == j:
        for q in range(alt_ptr[g], alt_ptr[g + 1]):
            present = present or in_wm[alt_items[q]] == 1
        g += 1
    return present, g
