"""Cover inequalities for the oracle's LP: a tighter upper bound where items are large.

Most of the gap between the LP bound and the replayed schedule is the LP's integrality gap:
when items are a large share of the budget, the LP keeps, at a check point of capacity ``C``,
two items whole and 0.4 of a third that does not fit beside them.  No schedule can.  A *cover*
at check point ``k`` is a set of items whose sizes sum to more than ``C_k``: at most
``|cover| - 1`` of them can be resident there together, in every schedule of the class (the
capacity row holds after every event), so

    sum over the cover's items of (resident at k)  <=  |cover| - 1

is a valid inequality: adding it to the LP keeps its optimum an upper bound on every policy's
hits, and cuts off such fractional points.

The LP here is ``memlens.oracle.bounds.lp_candidates``' chain form: variable ``m`` is "kept from
its chain's start through gap ``m``", an interval of check points ``[a_m, b_m)`` with ``a_m =
k_start[head[m]]`` and ``b_m = k_end[m]``; an item (a chain) is resident at ``k`` iff one of its
intervals covering ``k`` is chosen, and at most one is. So the cut's row has a 1 for every
interval of a cover chain that covers ``k``.

Separation (the classic greedy for knapsack covers): at every check point, the chains resident
in the LP solution with occupancy ``o_c``, sorted by ``(1 - o_c) / size`` (whole ones first,
then the cheapest per token), are taken until their sizes exceed ``C_k``; items are then dropped
from that cover, least resident first, while it stays a cover (a smaller cover is a stronger
cut); it is violated iff ``sum (1 - o_c) < 1``. A cut at ``k`` with the same chains as the cut
at ``k - 1`` is implied by it (its row has a subset of the columns) and is skipped.
``bounds.lp_candidates`` re-solves with the cuts a fixed number of rounds, so the bound does not
depend on the machine's speed.
"""

from __future__ import annotations

import numba as nb
import numpy as np

from memlens.oracle import rows
from memlens.oracle.rows import Rows

_VIOLATION = 1e-4  # a cut must cut the LP point off by at least this much


@nb.njit(cache=True)
def _occupancy(a, b, head, x, n_points):
    """Per check point, the chains resident in ``x`` and their occupancy, as CSR
    (``ptr``, ``chain``, ``occ``)."""
    count = np.zeros(n_points + 1, np.int64)
    for m in range(x.shape[0]):
        if x[m] > 1e-9:
            for k in range(a[m], b[m]):
                count[k + 1] += 1
    ptr = np.cumsum(count)
    chain = np.empty(ptr[-1], np.int64)
    occ = np.empty(ptr[-1], np.float64)
    fill = ptr[:-1].copy()
    for m in range(x.shape[0]):
        if x[m] > 1e-9:
            for k in range(a[m], b[m]):
                chain[fill[k]] = head[m]
                occ[fill[k]] = x[m]
                fill[k] += 1
    return ptr, chain, occ


@nb.njit(cache=True)
def _separate(ptr, chain, occ, size_of_chain, capacity, scratch):
    """Violated covers: (point, chain) pairs of the cuts, point-major, and the cut count."""
    out_k = []
    out_c = []
    prev_set = np.zeros(0, np.int64)
    prev_k = -2
    for k in range(capacity.shape[0]):
        lo, hi = ptr[k], ptr[k + 1]
        # merge the intervals of one chain: its occupancy at k
        chains = []
        for j in range(lo, hi):
            c = chain[j]
            if scratch[c] == 0.0:
                chains.append(c)
            scratch[c] += occ[j]
        n = len(chains)
        cs = np.empty(n, np.int64)
        key = np.empty(n, np.float64)
        for i in range(n):
            cs[i] = chains[i]
            o = min(scratch[chains[i]], 1.0)
            scratch[chains[i]] = 0.0
            key[i] = (1.0 - o) / size_of_chain[chains[i]] if size_of_chain[chains[i]] > 0 else 1e18
        if n == 0:
            continue
        order = np.argsort(key, kind="mergesort")
        total = 0
        taken = 0
        while taken < n and total <= capacity[k]:
            total += size_of_chain[cs[order[taken]]]
            taken += 1
        if total <= capacity[k]:
            continue
        cover = cs[order[:taken]]
        slack = key[order[:taken]] * size_of_chain[cover]  # 1 - occupancy
        keep = np.ones(taken, np.bool_)
        for i in np.argsort(-slack, kind="mergesort"):  # drop the least resident first
            if total - size_of_chain[cover[i]] > capacity[k]:
                keep[i] = False
                total -= size_of_chain[cover[i]]
        if slack[keep].sum() >= 1.0 - _VIOLATION:
            continue
        chosen = np.sort(cover[keep])
        if prev_k == k - 1 and chosen.shape[0] == prev_set.shape[0] and np.all(chosen == prev_set):
            prev_k = k  # implied by the cut at k - 1
            continue
        for c in chosen:
            out_k.append(k)
            out_c.append(c)
        prev_set, prev_k = chosen, k
    return np.array(out_k, dtype=np.int64), np.array(out_c, dtype=np.int64)


def cover_cuts(a: np.ndarray, b: np.ndarray, head: np.ndarray, size: np.ndarray, x: np.ndarray,
               capacity: np.ndarray, n_cols: int) -> tuple[Rows, np.ndarray]:  # fmt: skip
    """Cover cuts the chain-form LP point ``x`` violates: rows over the ``n_cols`` LP columns
    (the first ``x.size`` are the intervals; ``memlens.oracle.rows``) and their right-hand
    sides ``|cover| - 1``."""
    n = x.shape[0]
    size_of_chain = np.zeros(n, np.int64)
    size_of_chain[head] = size
    ptr, chain, occ = _occupancy(a, b, head, x, capacity.shape[0])
    cut_k, cut_c = _separate(ptr, chain, occ, size_of_chain, capacity, np.zeros(n, np.float64))
    if cut_k.size == 0:
        return rows.empty(n_cols), np.zeros(0)
    new_row = np.diff(cut_k, prepend=-1) != 0
    row_of_pair = np.cumsum(new_row) - 1
    n_rows = int(new_row.sum())
    rhs = np.bincount(row_of_pair, minlength=n_rows).astype(np.float64) - 1.0
    # columns: every interval of a cover chain that covers the cut's point, i.e. per (row,
    # point k, chain c) pair the intervals of c (grouped by chain) that end after k
    order = np.argsort(head, kind="stable")
    first = np.searchsorted(head[order], cut_c)
    count = np.searchsorted(head[order], cut_c, side="right") - first
    pair = np.repeat(np.arange(cut_c.size), count)
    members = order[np.repeat(first - np.cumsum(count) + count, count) + np.arange(pair.size)]
    covers = b[members] > cut_k[pair]
    members, pair = members[covers], pair[covers]
    matrix = rows.from_coo(row_of_pair[pair], members, np.ones(members.size), (n_rows, n_cols))
    return matrix, rhs
