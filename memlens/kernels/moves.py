"""Numba helpers every kernel shares: the move log, an eviction's counts, and the cursor over
a request's needs and their alternatives (trace format 1.1).

Two layouts of alternatives reach the kernels.  The group layout (``group_ptr``/``group_items``:
every need's alternatives, itself first) serves :func:`first_resident`.  The sparse layout
(``alt_need``: the needs that have alternatives, sorted; ``alt_ptr``/``alt_items``: the other
alternatives of each) is walked with a cursor ``g`` that advances past a need's alternatives
as its need is visited: :func:`count_needs` and :func:`to_fetch`.  The reference engine's
rule is one: a need is served when any alternative it lists is resident, and every item it
lists counts one use."""

from __future__ import annotations

import numba

from memlens.simulator import MoveKind


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
def count_group_uses(j, group_ptr, group_items, uses_seen):
    """Every item need ``j`` lists (group layout) counts one use."""
    for p in range(group_ptr[j], group_ptr[j + 1]):
        uses_seen[group_items[p]] += 1


@numba.njit(cache=True, nogil=True, inline="always")
def count_group_needs(lo, hi, group_ptr, group_items, in_wm, uses_seen, need_hit):
    """:func:`count_needs` in the group layout, for a policy whose hits move nothing."""
    for j in range(lo, hi):
        if first_resident(j, group_ptr, group_items, in_wm) >= 0:
            need_hit[j] = 1
        count_group_uses(j, group_ptr, group_items, uses_seen)


@numba.njit(cache=True, nogil=True, inline="always")
def cursor_at(g0, alt_need, lo):
    """The cursor moved on to the first need with alternatives at or after need ``lo`` (requests
    are visited in file order, so it only moves forward)."""
    while g0 < alt_need.shape[0] and alt_need[g0] < lo:
        g0 += 1
    return g0


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
def to_fetch(j, g, needs, alt_need, alt_ptr, alt_items, in_wm, tokens, budget):
    """(the item demand fetch brings back for need ``j``: its primary, when none of its
    alternatives is resident and it fits the budget, else -1; the cursor past ``j``)."""
    i = needs[j]
    present = in_wm[i] == 1
    if g < alt_need.shape[0] and alt_need[g] == j:
        for q in range(alt_ptr[g], alt_ptr[g + 1]):
            present = present or in_wm[alt_items[q]] == 1
        g += 1
    return (-1 if present or tokens[i] > budget else i), g


@numba.njit(cache=True, nogil=True, inline="always")
def count_eviction(v, s, e, m, tokens, in_wm, used, uses_seen, n_uses, evictions, false_ev,
                   mv_event, mv_item, mv_kind):  # fmt: skip
    """Item ``v`` of stream ``s`` leaves working memory at event ``e``: the simulator's counts
    (an eviction; a false one when ``v`` is needed again later) and the move at slot ``m``.
    Returns the next slot."""
    in_wm[v] = 0
    used[s] -= tokens[v]
    evictions[s] += 1
    if uses_seen[v] < n_uses[v]:
        false_ev[s] += 1
    mv_event[m] = e
    mv_item[m] = v
    mv_kind[m] = MoveKind.EVICT
    return m + 1
