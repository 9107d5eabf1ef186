"""The compiled replay shared by the score-scanning baselines (``policies/scan.py``).

MemoryBank (both variants), MemoryOS heat and Generative Agents rank their resident, unpinned items by a score
that moves with the trace time (a decay shared by every item, per-item constants, a relevance
to the latest request), so no fixed-key heap follows their order.  Their reference
(``ScanPolicy.victims``) scores every resident item at each victim choice.  This module finds
the same victim without scoring every item, for MemoryBank and MemoryOS heat: a **bound
tree**.  Generative Agents scans (``memlens/kernels/generative_agents.py`` says why), over
its candidates' components kept in slots of their own, end to end, with the vector loops of
``memlens/kernels/simd.py`` (:func:`scan_argmin`, :func:`_scan_spreads`, :func:`_rescore`).

Every score here is a function ``f(x0, x1, x2, t)`` of three per-item numbers, monotone in each
(non-decreasing or non-increasing, the direction given by the sign of the policy's weight), and
evaluated with the reference's exact floating-point expression.  IEEE rounding is monotone, so
``f`` evaluated at the per-component minimum (maximum for a decreasing direction) over a set of
items is a lower bound of the score of every item in the set.  A tighter bound follows the
time: each item's score is a line in a function of ``t``, so the lowest score of a set is
concave in it and at least the interpolation of its values at two times (the envelope,
:func:`_rebase`); it is the only bound the inner nodes use now (:func:`_bound`).  MemoryBank's
code variant counts whole days (``MEMORYBANK_DAYS``): its score is constant within a day, so
the tree keeps each item's exact score on the current day and recomputes them all when the
day changes (:func:`_rebase`).  Per stream,
a segment tree over the candidates (``new_tree``: leaves taken left to right as items are
placed, so about in recency order) keeps, per node, the minima of the stored components the
bound reads and the smallest recency rank; the victim is found by branch and bound (smaller
bound first, prune a node whose bound, or bound and best recency, can no longer beat the best
leaf found).  The leaves hold the exact components, so the winning score is the reference's
number and ties go, as in the reference, to the least recent item: recency is the pair (event
of the last write or use, a sequence number), which is the order of ``ScanPolicy``'s
``OrderedDict`` including its ``unpin`` placement.

Cost: an update is O(log m) (m = leaves: at most twice the most items held so far; packing
is amortised), a victim choice visits the nodes whose bound is at most the victim's score: the
items that could tie or beat it, and the paths to them.  It does not scan the resident set, but
it is not a worst-case bound: when many items have scores close to the minimum, or a node mixes
items whose minima come from different items (a loose bound), they are visited (each kernel's
docstring says when; ``benchmarks/bench_kernels.py`` measures it).

Compiled without numba's reference counting (``_nrt=False``: nothing here allocates), and with
the helpers inlined: state lives in tuples of arrays, and with reference counting every array
taken out of a tuple cost an atomic increment and decrement, which was most of the run time
(measured: 0.46M events/s before, 1.8M after, MemoryBank at budget 1024).
"""

from __future__ import annotations

import math

import numba
import numpy as np

from memlens.kernels.common import outputs, trace_arrays
from memlens.kernels.moves import count_eviction, count_needs, cursor_at, to_fetch
from memlens.kernels.simd import (
    LAST_TERM_BIT,
    LONG_ITEM,
    NAN_SCORE,
    QUERY_TERMS,
    argmin3,
    argmin3_unit,
    lowest_bit,
    minmax3,
    term_masks,
)
from memlens.simulator import MoveKind
from memlens.trace.model import EventKind, Trace

MEMORYBANK, MEMORYOS_HEAT, GENERATIVE_AGENTS, MEMORYBANK_DAYS = 0, 1, 2, 3
NO_REC = np.iinfo(np.int64).max  # the recency rank of an empty node
STACK = 256  # depth-first, at most two nodes pushed per level
#: candidates from which Generative Agents' scan uses ``simd``'s vectors (measured crossover: 20-30)
VECTOR_MIN = 32


def new_tree(trace: Trace, n_stored: int, inner: list[int] | None = None):
    """Empty bound trees for every stream of ``trace``, ``n_stored`` components per leaf, and
    per inner node the minima of the components at positions ``inner`` (default: all): the
    only ones a policy's bound reads above the leaves (``_bound``: the envelope alone, so
    keeping the other minima up to date at every update was wasted work, a tenth of MemoryOS
    heat's replay at budget 65536).

    A stream's candidates take leaves left to right in the order they are (re)placed, which is
    about their recency order, so neighbouring leaves have similar components and the bounds
    are tight.  When the last leaf is taken the live leaves are packed to the left (and the
    number of leaves doubled if they fill more than half), so the tree's size follows the
    items held, up to the stream's item count rounded up to a power of two.
    Returns ``(toff, width, cap, islot, slot_item, val, rec, nxt, live, sbase, inner)``: per
    stream the offset of its nodes (``2 * width`` of them) and its current number of leaves;
    per item its leaf slot (-1: not a candidate); per slot its item; per node the minima of the
    stored components (inner nodes: those in ``inner``) and the smallest recency rank; per
    stream the next free slot, the number of candidates and the offset of its slots."""
    n_streams = trace.n_streams
    counts = np.bincount(trace.item_stream, minlength=n_streams)
    width = np.ones(n_streams, np.int64)
    for s, c in enumerate(counts.tolist()):
        while width[s] < c:
            width[s] *= 2
    toff = np.zeros(n_streams, np.int64)
    sbase = np.zeros(n_streams, np.int64)
    if n_streams:
        toff[1:] = np.cumsum(2 * width)[:-1]
        sbase[1:] = np.cumsum(width)[:-1]
    n_nodes = int((2 * width).sum()) if n_streams else 1
    n_slots = int(width.sum()) if n_streams else 1
    cap = np.minimum(width, 8)
    # sized for every stream's largest tree but written only as far as its current one
    # (``_pack`` writes the whole of a grown tree): the untouched pages are never mapped,
    # where filling them (tens of MB on a 1M-event trace) cost a tenth of a replay
    val = np.empty((n_nodes, n_stored))
    rec = np.empty(n_nodes, np.int64)
    slot_item = np.empty(n_slots, np.int32)
    for s in range(n_streams):
        val[toff[s] : toff[s] + 2 * cap[s]] = np.inf
        rec[toff[s] : toff[s] + 2 * cap[s]] = NO_REC
        slot_item[sbase[s] : sbase[s] + width[s]] = -1
    inner = np.arange(n_stored, dtype=np.int64) if inner is None else np.array(inner, np.int64)
    return (toff, width, cap, np.full(trace.n_items, -1, np.int64), slot_item, val, rec,
            np.zeros(n_streams, np.int64), np.zeros(n_streams, np.int64), sbase,
            inner)  # fmt: skip


def no_tree():
    """:func:`new_tree`'s arrays, empty: Generative Agents scans its candidates instead."""
    z, e = np.zeros(1, np.int64), np.zeros(0, np.int64)
    return (z, z, z, e, np.zeros(0, np.int32), np.zeros((1, 1)), z, z, z, z, e)


@numba.njit(cache=True, nogil=True, _nrt=False, inline="always")
def _fix(tree, s, g):
    """Recompute the ancestors of node ``g`` of region ``s``'s tree (stop when one is equal)."""
    toff, val, rec, inner = tree[0][s], tree[5], tree[6], tree[10]
    nd = g - toff
    while nd > 1:
        nd >>= 1
        p = toff + nd
        a = toff + 2 * nd
        b = a + 1
        changed = False
        for j in inner:
            v = min(val[a, j], val[b, j])
            if v != val[p, j]:
                val[p, j] = v
                changed = True
        r = min(rec[a], rec[b])
        if r != rec[p]:
            rec[p] = r
            changed = True
        if not changed:
            break


@numba.njit(cache=True, nogil=True, _nrt=False)
def _pack(tree, s):
    """All of region ``s``'s leaves are taken: move the live ones to the left, in order, into
    a tree of the same or (when they fill more than half) twice the number of leaves."""
    toff, width, cap, islot, slot_item, val, rec = (tree[0][s], tree[1][s], tree[2], tree[3],
                                                    tree[4], tree[5], tree[6])  # fmt: skip
    nxt, live, sb = tree[7], tree[8], tree[9][s]
    c = cap[s]
    nc = c
    while 2 * live[s] > nc and nc < width:
        nc *= 2
    n_stored = val.shape[1]
    j = 0
    for k in range(c):
        i = slot_item[sb + k]
        if i < 0:
            continue
        for q in range(n_stored):
            val[toff + nc + j, q] = val[toff + c + k, q]
        rec[toff + nc + j] = rec[toff + c + k]
        slot_item[sb + k] = -1
        slot_item[sb + j] = i
        islot[i] = j
        j += 1
    for k in range(j, nc):
        for q in range(n_stored):
            val[toff + nc + k, q] = np.inf
        rec[toff + nc + k] = NO_REC
    for nd in range(nc - 1, 0, -1):
        for q in tree[10]:
            val[toff + nd, q] = min(val[toff + 2 * nd, q], val[toff + 2 * nd + 1, q])
        rec[toff + nd] = min(rec[toff + 2 * nd], rec[toff + 2 * nd + 1])
    cap[s] = nc
    nxt[s] = j


@numba.njit(cache=True, nogil=True, _nrt=False, inline="always")
def tree_drop(tree, s, i):
    """Item ``i`` (stream ``s``) is no longer a candidate."""
    toff, cap, islot, slot_item, val = tree[0], tree[2], tree[3], tree[4], tree[5]
    k = islot[i]
    if k < 0:
        return
    g = toff[s] + cap[s] + k
    for j in range(val.shape[1]):
        val[g, j] = np.inf
    tree[6][g] = NO_REC
    _fix(tree, s, g)
    islot[i] = -1
    slot_item[tree[9][s] + k] = -1
    tree[8][s] -= 1


@numba.njit(cache=True, nogil=True, _nrt=False, inline="always")
def tree_put(tree, s, i, stored, r):
    """Item ``i`` (stream ``s``) is a candidate with stored components ``stored``, recency
    ``r``, in the next leaf of its region (a candidate already placed leaves its old one)."""
    toff, cap, islot, slot_item, val, nxt = tree[0], tree[2], tree[3], tree[4], tree[5], tree[7]
    tree_drop(tree, s, i)
    if nxt[s] == cap[s]:
        _pack(tree, s)
    k = nxt[s]
    nxt[s] += 1
    tree[8][s] += 1
    islot[i] = k
    slot_item[tree[9][s] + k] = i
    g = toff[s] + cap[s] + k
    for j in range(val.shape[1]):
        val[g, j] = stored[j]
    tree[6][g] = r
    _fix(tree, s, g)


@numba.njit(cache=True, nogil=True, _nrt=False, inline="always")
def _bound(mode, val, g, t, prm, bidx, bsgn, leaf, best):
    """An inner node's envelope bound; at a ``leaf``, the policy's score expression (exact),
    or the envelope alone when that already exceeds ``best``, the best score found so far:
    the leaf is pruned either way (``best`` only goes down), and the division or ``exp`` is
    saved.  An inner node is bounded by its envelope alone: the score at the per-component
    minima (a second bound, the larger one taken) costs a division (MemoryBank) or an ``exp``
    (MemoryOS heat) at every node, and the minima an update at every level.  On the benchmark
    trace it never pruned a MemoryOS heat node the envelope kept; for MemoryBank it pruned
    some at small budgets (10 nodes per choice against 16 at budget 1024, 3.9M against 3.5M
    events/s) and none at 65536, where dropping it took the replay from 2.2M to 2.55M."""
    if mode == MEMORYBANK_DAYS:  # the exact exponent of the day (``_rebase``): no margin
        return val[g, 3]
    lo, hi = val[g, 3], val[g, 4]  # the envelope bound (``_rebase``), f = prm[4]
    env = lo + prm[4] * (hi - lo)
    if mode == MEMORYBANK:
        env -= 1e-9 * (abs(lo) + abs(hi) + 1.0)
    else:
        env -= 1e-9 * (abs(lo) + prm[4] * abs(hi) + abs(prm[2]) + 1.0)
    if env > best or not leaf:
        return env
    x0 = bsgn[0] * val[g, bidx[0]]
    x1 = bsgn[1] * val[g, bidx[1]]
    if mode == MEMORYBANK:  # -(t - learned) / unit / strength
        score = -(t - x0) / prm[0] / x1
        return score if score > env else env
    # MemoryOS heat: a * visits + b * length + g * exp((seen - t) / tau)
    heat = prm[0] * x0 + prm[1] * x1 + prm[2] * math.exp((bsgn[2] * val[g, bidx[2]] - t) / prm[3])
    return heat if heat > env else env


@numba.njit(cache=True, nogil=True, _nrt=False, inline="always")
def tree_argmin(tree, s, t, mode, prm, bidx, bsgn, stk_n, stk_b):
    """The candidate of stream ``s`` with the smallest (score at ``t``, recency), or -1.
    Depth first from the root, the child with the smaller bound first.  ``prm[6]`` and
    ``prm[7]`` count the calls and the nodes taken off the stack
    (``benchmarks/bench_scan_kernels.py`` reports nodes per choice)."""
    toff, width, slot_item, val, rec = tree[0][s], tree[2][s], tree[4], tree[5], tree[6]
    sbase = tree[9][s]
    best, best_rec, best_i = np.inf, NO_REC, -1
    sp = 0
    if rec[toff + 1] != NO_REC:
        stk_n[0], stk_b[0] = 1, _bound(mode, val, toff + 1, t, prm, bidx, bsgn, width == 1, best)
        sp = 1
    prm[6] += 1.0
    while sp > 0:
        sp -= 1
        prm[7] += 1.0
        nd, b = stk_n[sp], stk_b[sp]
        g = toff + nd
        if b > best or (b == best and rec[g] > best_rec):
            continue
        if nd >= width:  # a leaf: its bound is its exact score, and it beats the best
            best, best_rec, best_i = b, rec[g], slot_item[sbase + nd - width]
            continue
        ga = toff + 2 * nd
        gb = ga + 1
        leaf = 2 * nd >= width
        ba = _bound(mode, val, ga, t, prm, bidx, bsgn, leaf, best) if rec[ga] != NO_REC else np.inf
        bb = _bound(mode, val, gb, t, prm, bidx, bsgn, leaf, best) if rec[gb] != NO_REC else np.inf
        first, second, bf, bs = 2 * nd, 2 * nd + 1, ba, bb
        if bb < ba:
            first, second, bf, bs = second, first, bb, ba
        if rec[toff + second] != NO_REC:  # pushed first: explored after ``first``
            stk_n[sp], stk_b[sp] = second, bs
            sp += 1
        if rec[toff + first] != NO_REC:
            stk_n[sp], stk_b[sp] = first, bf
            sp += 1
    return best_i


@numba.njit(cache=True, nogil=True, _nrt=False, inline="always")
def scan_argmin(S, s, prm):
    """:func:`tree_argmin` of a stream without its tree (Generative Agents only), by a scan
    of its candidates: the leaf's score expression on the same components, the same rule for
    ties (the least recent wins).  ``prm[7]`` counts the candidates scored.  From
    ``VECTOR_MIN`` candidates on, the scan is ``simd.argmin3``'s vectors (the same winner)
    unless a score is NaN."""
    CX, CR, members, mbase, msize = S[15], S[16], S[10], S[11], S[13]
    prm[6] += 1.0
    prm[7] += msize[s]
    lo, hi = mbase[s], mbase[s] + msize[s]
    if hi - lo >= VECTOR_MIN:
        if prm[3] == 1.0:  # normalised: recency is rho itself
            k = argmin3_unit(CX[0], CX[1], CX[2], CR, lo, hi, prm[0], prm[1], prm[2], 1.0)
        else:
            k = argmin3(CX[0], CX[1], CX[2], CR, lo, hi, prm[0], prm[1], prm[2], prm[3])
        if k != NAN_SCORE:
            return members[k]
    best, best_rec, best_k = np.inf, NO_REC, -1
    for k in range(lo, hi):
        b = prm[0] * (prm[3] * CX[0, k]) + prm[1] * CX[1, k] + prm[2] * CX[2, k]
        if not (b > best or (b == best and CR[k] > best_rec)):
            best, best_rec, best_k = b, CR[k], k
    return members[best_k] if best_k >= 0 else -1


@numba.njit(cache=True, nogil=True, _nrt=False, inline="always")
def _scan_spreads(S, s, spread):
    """Every component's spread (maximum - minimum) over stream ``s``'s candidates, into
    ``spread``, in one pass over their slots (``simd.minmax3``'s vectors from
    ``VECTOR_MIN`` candidates on: the same extremes when no component is NaN, and with a
    NaN every score is NaN, so :func:`scan_argmin` scans as before)."""
    CX, mbase, msize = S[15], S[11], S[13]
    lo, hi = mbase[s], mbase[s] + msize[s]
    if hi - lo >= VECTOR_MIN:
        lo0, hi0, lo1, hi1, lo2, hi2 = minmax3(CX[0], CX[1], CX[2], lo, hi)
        spread[0], spread[1], spread[2] = hi0 - lo0, hi1 - lo1, hi2 - lo2
        return
    lo0, hi0, lo1, hi1, lo2, hi2 = np.inf, -np.inf, np.inf, -np.inf, np.inf, -np.inf
    for j in range(lo, hi):
        lo0, hi0 = min(lo0, CX[0, j]), max(hi0, CX[0, j])
        lo1, hi1 = min(lo1, CX[1, j]), max(hi1, CX[1, j])
        lo2, hi2 = min(lo2, CX[2, j]), max(hi2, CX[2, j])
    spread[0], spread[1], spread[2] = hi0 - lo0, hi1 - lo1, hi2 - lo2


# --------------------------------------------------------------------------- policy state
@numba.njit(cache=True, nogil=True, _nrt=False, inline="always")
def _relevance(Q, i, qr):
    """Cosine of item ``i``'s TF-IDF vector with request ``qr``'s (0 without a shared term),
    summed over the item's terms in stored order, as ``GenerativeAgents.relevance`` does.
    The loaded query's terms are bits of ``Q[6]`` (a vocabulary of 100,000 terms is 12.5 KB,
    so the test stays in the first-level cache) and its weights dense in ``Q[7]``."""
    return _relevance_of_terms(Q, Q[0][i], Q[0][i + 1], qr)


@numba.njit(cache=True, nogil=True, _nrt=False, inline="always")
def _load_query(Q, qr):
    """Make request ``qr`` the loaded query (its terms as bits of ``Q[6]``, its weights dense
    in ``Q[7]``); False when it has no term (or there is no request yet)."""
    qptr, qterm, qw, qbits, qdense, loaded = Q[3], Q[4], Q[5], Q[6], Q[7], Q[8]
    if qr < 0 or qptr[qr] == qptr[qr + 1]:
        return False
    if loaded[0] != qr:
        if loaded[0] >= 0:
            for k in range(qptr[loaded[0]], qptr[loaded[0] + 1]):
                qbits[qterm[k] >> 6] = 0
        for k in range(qptr[qr], qptr[qr + 1]):
            qbits[qterm[k] >> 6] |= np.uint64(1) << np.uint64(qterm[k] & 63)
            qdense[qterm[k]] = qw[k]
        loaded[0] = qr
    return True


@numba.njit(cache=True, nogil=True, _nrt=False, inline="always")
def _relevance_of_terms(Q, start, end, qr):
    """:func:`_relevance` of the item whose terms are ``Q[1][start:end]``."""
    if not _load_query(Q, qr):
        return 0.0
    iterm, iw, qbits, qdense = Q[1], Q[2], Q[6], Q[7]
    acc = 0.0
    for k in range(start, end):
        term = iterm[k]
        if (qbits[term >> 6] >> np.uint64(term & 63)) & np.uint64(1):
            acc += iw[k] * qdense[term]
    return acc


@numba.njit(cache=True, nogil=True, _nrt=False, inline="always")
def _rescore(S, Q, s, qr):
    """Every candidate's relevance to request ``qr`` (``observe``), as :func:`_relevance`
    gives it: first which terms each item shares with the query, for all the slots at once
    (``simd.term_masks``: vector compares against the query's terms), then for the items
    that share one the sum over the shared terms in the item's order.  An item with more
    terms than a mask holds takes :func:`_relevance_of_terms`'s path."""
    CX, CT, masks, mbase, msize = S[15], S[18], S[19], S[11], S[13]
    lo, hi = mbase[s], mbase[s] + msize[s]
    if not _load_query(Q, qr):
        for k in range(lo, hi):
            CX[2, k] = 0.0
        return
    iterm, iw, qptr, qterm, qdense = Q[1], Q[2], Q[3], Q[4], Q[7]
    if qptr[qr + 1] - qptr[qr] > QUERY_TERMS:  # a long query: the scalar path
        for k in range(lo, hi):
            CX[2, k] = _relevance_of_terms(Q, CT[0, k], CT[1, k], qr)
        return
    shared = masks[CX.shape[1] :]  # the second half: the slots with a shared term
    n = term_masks(iterm, CT[0], CT[1], lo, hi, qterm, qptr[qr], qptr[qr + 1], masks, shared)
    for k in range(lo, hi):
        CX[2, k] = 0.0
    for c in range(n):
        k = shared[c]
        m = masks[k]
        if m == LONG_ITEM:
            CX[2, k] = _relevance_of_terms(Q, CT[0, k], CT[1, k], qr)
            continue
        # the first two shared terms without a branch on how many there are (adding 0.0
        # changes no sum here: it is never -0.0); the others, rarer, in a loop
        base = CT[0, k]
        j = base + lowest_bit(m)
        acc = 0.0 + iw[j] * qdense[iterm[j]]
        m &= m - 1
        j = base + lowest_bit(m | LAST_TERM_BIT)  # with no second term: a padding entry
        second = iw[j] * qdense[iterm[j]]
        acc += second if m != 0 else 0.0
        m &= m - 1
        while m > 0:
            j = base + lowest_bit(m)
            acc += iw[j] * qdense[iterm[j]]
            m &= m - 1
        CX[2, k] = acc


@numba.njit(cache=True, nogil=True, _nrt=False)
def _rebase(mode, S, K, tree, s, t):
    """MemoryOS heat's envelope bound.  With ``u = exp((T - t) / tau)`` (``T = K[3][s]``, at
    most ``t``), an item's heat is ``P + gamma * r * u``, a line in ``u`` on [0, 1] (``P`` its
    static part, ``r = exp((seen - T) / tau)``).  The lowest heat of a node's items is a minimum
    of lines, so concave in ``u``, so at least the interpolation ``A + u * (B - A)`` between its
    values at 0 (``A``, the least ``P``) and at 1 (``B``, the least ``P + gamma * r``), which the
    tree keeps as components 3 and 4.  Unlike the per-component minima this bound follows one
    item's own pair (length and age); a margin of 1e-9 relative covers rounding.  ``r`` grows
    with the trace time, so ``T`` moves up to the event's time ``t`` when ``_heat_rebase_due``
    (before the event) and every candidate's ``B`` is recomputed (O(leaves)).

    MemoryBank's exponent ``-(t - learned) / unit / strength`` is a line in ``t`` itself, so
    its envelope interpolates between ``t = T`` and ``t = T + H`` (``H = K[7][s]``, about 256
    of the stream's events), with ``T`` moved up to ``t`` when ``t`` passes ``T + H``.

    MemoryBank's code variant (``MEMORYBANK_DAYS``) counts whole days, so its exponent is a
    step function of ``t``, constant within a day: ``T`` is the day number of the stream's
    last event, and components 3 and 4 both hold each item's exponent on that day, exact
    (``_envelope``); the tree is then a plain min-tree.  When an event falls on another day,
    ``T`` moves to it (before the event) and every candidate's exponent is recomputed: an
    O(leaves) rebase per day that has events, O(1) per event within a day."""
    X = S[0]
    toff, cap, slot_item, val, sb = tree[0][s], tree[2][s], tree[4], tree[5], tree[9][s]
    K[3][s] = t
    for k in range(cap):
        i = slot_item[sb + k]
        if i >= 0:
            _envelope(mode, X, K, s, i)
            val[toff + cap + k, 3] = X[3, i]
            val[toff + cap + k, 4] = X[4, i]
    for nd in range(cap - 1, 0, -1):
        for q in range(3, 5):
            val[toff + nd, q] = min(val[toff + 2 * nd, q], val[toff + 2 * nd + 1, q])


@numba.njit(cache=True, nogil=True, _nrt=False, inline="always")
def _heat_rebase_due(K, tree, s, e):
    """MemoryOS heat's base time is due to move up to event ``e``'s time: more than one
    ``tau`` behind, and at least as many events since the last rebase as the stream's tree
    has leaves (the O(leaves) rebase then costs O(1) per event); at any rate at 40 ``tau``
    (``r`` then stays below ``e ** 40``).  The envelope is exact at ``u = 1``
    (``t = T``), so the closer ``T`` follows the time, the tighter it is: rebasing after one
    ``tau`` rather than 40 halved the nodes a victim choice visits on the benchmark trace at
    budget 65536."""
    d = (K[0][e] - K[3][s]) / K[2][3]
    return d > 40.0 or (d > 1.0 and e - K[8][s] >= tree[2][s])


@numba.njit(cache=True, nogil=True, _nrt=False, inline="always")
def _envelope(mode, X, K, s, i):
    """Item ``i``'s two envelope values (``_rebase``) for the stream's base time ``T``."""
    pol, T = K[2], K[3][s]
    if mode == MEMORYOS_HEAT:
        X[3, i] = pol[0] * X[0, i] + pol[1] * X[1, i]
        X[4, i] = X[3, i] + pol[2] * math.exp((X[2, i] - T) / pol[3])
    elif mode == MEMORYBANK:
        X[3, i] = -(T - X[0, i]) / pol[0] / X[1, i]
        X[4, i] = -(T + K[7][s] - X[0, i]) / pol[0] / X[1, i]
    elif mode == MEMORYBANK_DAYS:  # ``MemoryBank._code_exponent``: (learned day - day) / 5 * S
        X[3, i] = (math.floor(X[0, i] / pol[0]) - T) / 5.0 * X[1, i]
        X[4, i] = X[3, i]


@numba.njit(cache=True, nogil=True, _nrt=False, inline="always")
def _copy_to_slot(S, i):
    """Candidate ``i``'s components, recency and span of TF-IDF terms into its slot of the
    candidates' own arrays (``S[15]``, ``S[16]``, ``S[18]``: in the order of ``members``, so
    a scan reads them end to end).  From then on the slot's relevance is the one kept up to
    date (``observe``), not ``X``'s."""
    X, CX, CT, iptr, k = S[0], S[15], S[18], S[17], S[12][i]
    CX[1, k] = X[1, i]
    CX[2, k] = X[2, i]
    CT[0, k] = iptr[i]
    CT[1, k] = iptr[i + 1]
    _refresh_slot(S, i)


@numba.njit(cache=True, nogil=True, _nrt=False, inline="always")
def _refresh_slot(S, i):
    """Candidate ``i`` was used: its slot's recency component and recency rank."""
    k = S[12][i]
    S[15][0, k] = S[0][0, i]
    S[16][k] = (S[4][i] << 32) | S[5][i]


@numba.njit(cache=True, nogil=True, _nrt=False, inline="always")
def _put(mode, S, K, tree, s, i):
    """(Re)place candidate ``i`` in the tree with its current components and recency
    (Generative Agents, which has no tree: in its slot, :func:`_copy_to_slot`)."""
    X, ssrc, ssgn, stored, last, seq = S[0], S[1], S[2], S[3], S[4], S[5]
    if mode == GENERATIVE_AGENTS:
        _copy_to_slot(S, i)
        return
    _envelope(mode, X, K, s, i)
    for j in range(ssrc.shape[0]):
        stored[j] = ssgn[j] * X[ssrc[j], i]
    tree_put(tree, s, i, stored, (last[i] << 32) | seq[i])


@numba.njit(cache=True, nogil=True, _nrt=False, inline="always")
def policy_insert(mode, S, K, Q, i, now, s):
    """``insert``: the item's policy state as the class sets it (not the tree)."""
    X, cnt, learned, strength, t0, qreq = S[0], S[6], S[7], K[1], K[3], K[4]
    t = K[0][now]
    if mode == MEMORYBANK or mode == MEMORYBANK_DAYS:
        if learned[i] == 0:
            learned[i] = 1
            X[0, i] = t
            X[1, i] = strength[cnt[i]]
    elif mode == MEMORYOS_HEAT:
        X[2, i] = t
    else:
        X[0, i] = math.exp(-K[2][3] * (t - t0[s]))
        X[2, i] = _relevance(Q, i, qreq[s])


@numba.njit(cache=True, nogil=True, _nrt=False, inline="always")
def policy_used(mode, S, K, i, now, s):
    """``used``: a request listed the item (resident or not)."""
    X, cnt, learned, strength, t0 = S[0], S[6], S[7], K[1], K[3]
    t = K[0][now]
    cnt[i] += 1
    if mode == MEMORYBANK or mode == MEMORYBANK_DAYS:
        learned[i] = 1
        X[0, i] = t
        X[1, i] = strength[cnt[i]]
    elif mode == MEMORYOS_HEAT:
        X[0, i] = float(cnt[i])
        X[2, i] = t
    else:
        X[0, i] = math.exp(-K[2][3] * (t - t0[s]))


@numba.njit(cache=True, nogil=True, _nrt=False, inline="always")
def cand_add(mode, S, K, tree, s, i):
    """Item ``i`` joins the candidates (the class's ``_res``) at the recency end."""
    inres, seq, ctr, members, mbase, mpos, msize = S[8], S[5], S[9], S[10], S[11], S[12], S[13]
    inres[i] = 1
    ctr[0] += 1
    seq[i] = ctr[0]
    k = mbase[s] + msize[s]
    members[k] = i
    mpos[i] = k
    msize[s] += 1
    _put(mode, S, K, tree, s, i)


@numba.njit(cache=True, nogil=True, _nrt=False, inline="always")
def cand_remove(mode, S, tree, s, i):
    """Item ``i`` leaves the candidates (evicted or pinned)."""
    inres, members, mbase, mpos, msize = S[8], S[10], S[11], S[12], S[13]
    if inres[i] == 0:
        return
    inres[i] = 0
    k = mpos[i]
    end = mbase[s] + msize[s] - 1
    j = members[end]
    members[k] = j
    mpos[j] = k
    msize[s] -= 1
    if mode == GENERATIVE_AGENTS:
        CX, CR, CT = S[15], S[16], S[18]
        CX[0, k], CX[1, k], CX[2, k], CR[k] = CX[0, end], CX[1, end], CX[2, end], CR[end]
        CT[0, k], CT[1, k] = CT[0, end], CT[1, end]
    else:
        tree_drop(tree, s, i)


@numba.njit(cache=True, nogil=True, _nrt=False, inline="always")
def observe(mode, S, K, Q, tree, x, now, s):
    """``observe``: every listed item is used and, if a candidate, moves to the recency end;
    Generative Agents then takes the request as its query, and its candidates' relevances are
    re-scored before they are next read (``K[9]``, :func:`make_room`: the class re-scores at
    once, but nothing reads a relevance before the next victim choice, and an insert or unpin
    in between scores its item against the new query), unless the query's TF-IDF vector
    equals the previous one's (``Q[9]``: per request the id of its vector): then every
    candidate's stored relevance, computed against an equal vector at the last request or at
    its insert or unpin since, is already the class's number (agent traces repeat a query
    often: most requests of the benchmark trace do)."""
    items_ptr, items, inres, last, seq, ctr = K[5], K[6], S[8], S[4], S[5], S[9]
    for j in range(items_ptr[x], items_ptr[x + 1]):
        i = items[j]
        last[i] = now
        policy_used(mode, S, K, i, now, s)
        if inres[i]:
            ctr[0] += 1
            seq[i] = ctr[0]
            if mode == GENERATIVE_AGENTS:
                _refresh_slot(S, i)
            else:
                _put(mode, S, K, tree, s, i)
    if mode == GENERATIVE_AGENTS:
        prev = K[4][s]
        K[4][s] = x
        if prev >= 0 and Q[9][prev] == Q[9][x]:
            return  # the same query vector: every candidate's relevance is already its own
        K[9][s] = 1  # re-scored when read (``make_room``): another query may come first


@numba.njit(cache=True, nogil=True, _nrt=False)
def _sift_down(order, key, lo, root, end):
    """Heap sort's sift of ``order[lo + root]`` within ``order[lo : lo + end]``, by ``key``."""
    while 2 * root + 1 < end:
        child = 2 * root + 1
        if child + 1 < end and key[order[lo + child + 1]] > key[order[lo + child]]:
            child += 1
        if key[order[lo + root]] >= key[order[lo + child]]:
            return
        order[lo + root], order[lo + child] = order[lo + child], order[lo + root]
        root = child


@numba.njit(cache=True, nogil=True, _nrt=False)
def _rank_recency(S, K, s):
    """Generative Agents' rank recency (``recency=rank``, the released code's): the stream's
    candidates in recency order (least recent first: ``ScanPolicy``'s ``OrderedDict``, which
    the recency ranks ``S[16]`` follow, all distinct) get ``K[1][k] = decay ** (k + 1)``,
    k = 0, 1, ..., as their recency component.  The slots are sorted by recency rank in the
    re-scoring scratch ``S[19]`` (free once ``_rescore`` is done), by heap sort: nothing is
    allocated.  O(n log n) per victim choice, beside the scan's O(n)."""
    CX, CR, order, mbase, msize = S[15], S[16], S[19], S[11], S[13]
    lo, n = mbase[s], msize[s]
    for p in range(n):
        order[lo + p] = lo + p
    for root in range(n // 2 - 1, -1, -1):
        _sift_down(order, CR, lo, root, n)
    for end in range(n - 1, 0, -1):
        order[lo], order[lo + end] = order[lo + end], order[lo]
        _sift_down(order, CR, lo, 0, end)
    table = K[1]
    for p in range(n):
        CX[0, order[lo + p]] = table[p]


@numba.njit(cache=True, nogil=True, _nrt=False, inline="always")
def _query_weights(mode, S, K, tree, s, t, W):
    """The score's parameters for one victim choice at ``t`` (``W[0]``).  Generative Agents'
    weights depend on the candidates' spreads (min-max normalisation), fixed for the whole
    choice as the class scores once and then sorts."""
    prm = W[0]
    pol = K[2]
    if mode == MEMORYOS_HEAT:
        prm[4] = math.exp((K[3][s] - t) / pol[3])
    elif mode == MEMORYBANK:
        prm[4] = (t - K[3][s]) / K[7][s]
    if mode != GENERATIVE_AGENTS:
        return
    spread = W[3]
    prm[3] = 1.0
    if pol[5] != 0.0:  # the rank recency: no common factor, normalised or not
        _rank_recency(S, K, s)
    if pol[4] != 0.0:
        _scan_spreads(S, s, spread)
    for k in range(3):
        w = pol[k]
        if pol[4] != 0.0:
            r = spread[k]
            w = w / r if r > 1e-12 else 0.0
        prm[k] = w
    if pol[4] == 0.0 and pol[5] == 0.0:
        prm[3] = math.exp(pol[3] * (t - K[3][s]))


@numba.njit(cache=True, nogil=True, _nrt=False, inline="always")
def make_room(mode, S, K, Q, tree, W, io, s, e, budget, stk_n, stk_b, m):
    """Evict the lowest (score, recency) candidates until the stream fits (``ScanPolicy.
    victims``: one choice frees at least the excess; its victims in ascending order)."""
    item_tokens, n_uses, uses_seen, in_wm, used, pinned_tok = (
        io[0],
        io[1],
        io[2],
        io[3],
        io[4],
        io[5],
    )
    evictions, false_ev, mv_event, mv_item, mv_kind = io[6], io[7], io[8], io[9], io[10]
    t = K[0][e]
    while used[s] > budget and used[s] > pinned_tok[s]:
        if mode == GENERATIVE_AGENTS and K[9][s]:  # relevances stale since a new query
            _rescore(S, Q, s, K[4][s])
            K[9][s] = 0
            W[0][4] += 1.0  # re-scoring passes and candidates re-scored (the benchmark's)
            W[0][5] += S[13][s]
        _query_weights(mode, S, K, tree, s, t, W)
        excess = used[s] - budget
        freed = 0
        while freed < excess:
            if mode == GENERATIVE_AGENTS:
                v = scan_argmin(S, s, W[0])
            else:
                v = tree_argmin(tree, s, t, mode, W[0], W[1], W[2], stk_n, stk_b)
            if v < 0:
                break
            cand_remove(mode, S, tree, s, v)
            freed += item_tokens[v]
            m = count_eviction(v, s, e, m, item_tokens, in_wm, used, uses_seen, n_uses, evictions, false_ev,
                               mv_event, mv_item, mv_kind)  # fmt: skip
        if freed == 0:
            break
    return m


@numba.njit(cache=True, nogil=True, _nrt=False, inline="always")
def enter(mode, S, K, Q, tree, io, s, i, e, kind, m):
    """Item ``i`` enters WM (logged as ``kind``) and the policy inserts it."""
    item_tokens, in_wm, used = io[0], io[3], io[4]
    in_wm[i] = 1
    used[s] += item_tokens[i]
    io[8][m] = e
    io[9][m] = i
    io[10][m] = kind
    S[4][i] = e
    policy_insert(mode, S, K, Q, i, e, s)
    cand_add(mode, S, K, tree, s, i)
    return m + 1


@numba.njit(cache=True, nogil=True, _nrt=False, inline="always")
def _request(mode, S, K, Q, tree, W, io, A, s, x, e, budget, demand_fetch, g0, stk_n, stk_b, m):
    """A request: hits before any update, uses counted, ``observe``, then demand fetch."""
    needs_ptr, needs, alt_need, alt_ptr, alt_items, need_hit, ctx, pin_at = A
    item_tokens, uses_seen, in_wm = io[0], io[2], io[3]
    lo, hi = needs_ptr[x], needs_ptr[x + 1]
    ctx[x] = io[4][s]
    pin_at[x] = io[5][s]
    g0 = cursor_at(g0, alt_need, lo)
    count_needs(lo, hi, g0, needs, alt_need, alt_ptr, alt_items, in_wm, uses_seen, need_hit)
    observe(mode, S, K, Q, tree, x, e, s)
    if demand_fetch:
        g = g0
        for j in range(lo, hi):
            i, g = to_fetch(j, g, needs, alt_need, alt_ptr, alt_items, in_wm, item_tokens, budget)
            if i >= 0:
                m = enter(mode, S, K, Q, tree, io, s, i, e, MoveKind.FETCH, m)
                if io[4][s] > budget:
                    m = make_room(mode, S, K, Q, tree, W, io, s, e, budget, stk_n, stk_b, m)
    return g0, m


@numba.njit(cache=True, nogil=True, _nrt=False)
def replay_scan(
    mode, S, K, Q, tree, W, io, A, ev_kind, ev_stream, ev_ref, budget, demand_fetch, stk_n, stk_b
):
    """The whole replay in file order (streams interleaved, each with its own state)."""
    item_tokens, in_wm, used, pinned_tok = io[0], io[3], io[4], io[5]
    pinned = S[14]
    m = 0
    g0 = 0
    for e in range(ev_kind.shape[0]):
        k = ev_kind[e]
        s = ev_stream[e]
        x = ev_ref[e]
        grew = False
        if mode == MEMORYOS_HEAT and _heat_rebase_due(K, tree, s, e):
            _rebase(mode, S, K, tree, s, K[0][e])
            K[8][s] = e
        elif mode == MEMORYBANK and K[0][e] > K[3][s] + K[7][s]:
            _rebase(mode, S, K, tree, s, K[0][e])
        elif mode == MEMORYBANK_DAYS and math.floor(K[0][e] / K[2][0]) != K[3][s]:
            _rebase(mode, S, K, tree, s, float(math.floor(K[0][e] / K[2][0])))
        if k == EventKind.WRITE:
            if item_tokens[x] <= budget:
                m = enter(mode, S, K, Q, tree, io, s, x, e, MoveKind.ADMIT, m)
                grew = True
            else:
                io[8][m] = e
                io[9][m] = x
                io[10][m] = MoveKind.BYPASS
                m += 1
        elif k == EventKind.REQUEST:
            g0, m = _request(mode, S, K, Q, tree, W, io, A, s, x, e, budget, demand_fetch, g0,
                             stk_n, stk_b, m)  # fmt: skip
        elif k == EventKind.PIN:
            if pinned[x] == 0:
                if in_wm[x] == 0:
                    m = enter(mode, S, K, Q, tree, io, s, x, e, MoveKind.PIN, m)
                pinned[x] = 1
                pinned_tok[s] += item_tokens[x]
                cand_remove(mode, S, tree, s, x)
                grew = True
        elif k == EventKind.UNPIN:
            if pinned[x] == 1:
                pinned[x] = 0
                pinned_tok[s] -= item_tokens[x]
                if mode == GENERATIVE_AGENTS:
                    S[0][2, x] = _relevance(Q, x, K[4][s])
                cand_add(mode, S, K, tree, s, x)  # recency: its last write or use, a new sequence
                grew = True
        if grew and used[s] > budget:
            m = make_room(mode, S, K, Q, tree, W, io, s, e, budget, stk_n, stk_b, m)
    return m


# --------------------------------------------------------------------------- Python side
def _horizon(trace: Trace) -> np.ndarray:
    """Per stream the trace time of about 256 of its events (MemoryBank's envelope span)."""
    out = np.ones(trace.n_streams)
    for s, ev in enumerate(trace.stream_events):
        if len(ev) > 1:
            span = float(trace.ev_t[ev[-1]] - trace.ev_t[ev[0]])
            if span > 0:
                out[s] = span / (len(ev) - 1) * 256.0
    return out


def _empty_query():
    """The relevance arrays of a policy without relevance (never read)."""
    z64, zi, z = np.zeros(1, np.int64), np.zeros(0, np.int64), np.zeros(0)
    # int16 terms, like Generative Agents' usual arrays: one compiled replay for all three
    return (z64, np.zeros(0, np.int16), z, z64, zi, z, np.zeros(1, np.uint64), np.zeros(1),
            np.full(1, -1, np.int64), zi)  # fmt: skip


def scan_arguments(trace: Trace, budget: int, demand_fetch: bool, mode: int, pol, X, store,
                   strength=None, query=None, t0=None, inner=None):  # fmt: skip
    """The output buffers and the argument tuple of :func:`replay_scan`.

    ``pol`` the policy's constants, ``X`` its per-item components (3 x items, static ones
    filled), ``store`` the (component, sign) of every stored tree value, ``strength`` the
    MemoryBank strength per number of uses, ``query`` the relevance arrays, ``t0`` per stream
    the first event's time (Generative Agents' recency origin), ``inner`` the stored
    positions the bound reads at inner nodes (``new_tree``).  Generative Agents has no
    tree (:func:`no_tree`) but its candidates' components in slots (``S[15]``, ``S[16]``),
    the scratch of a re-scoring pass (``S[19]``: the slots' term masks, then the list of the
    slots that share a term) and per stream whether its relevances are stale (``K[9]``)."""
    out = outputs(trace, demand_fetch)
    (ev_kind, ev_stream, ev_ref, item_tokens, needs_ptr, needs, alt_need, alt_ptr, alt_items,
     n_uses) = trace_arrays(trace)  # fmt: skip
    n, n_streams = trace.n_items, trace.n_streams
    scan = mode == GENERATIVE_AGENTS
    Q = _empty_query() if query is None else query
    X = np.concatenate([X, np.zeros((5 - X.shape[0], n))]) if X.shape[0] < 5 else X
    ssrc = np.array([c for c, _ in store], np.int64)
    ssgn = np.array([g for _, g in store], np.float64)
    mbase = np.zeros(n_streams + 1, np.int64)  # ``stream_offsets``' bases, without its argsort
    np.cumsum(np.bincount(trace.item_stream, minlength=n_streams), out=mbase[1:])
    S = (X, ssrc, ssgn, np.zeros(len(store)), np.zeros(n, np.int64), np.zeros(n, np.int64),
         np.zeros(n, np.int64), np.zeros(n, np.uint8), np.zeros(n, np.uint8),
         np.zeros(1, np.int64), np.zeros(n, np.int32), mbase, np.zeros(n, np.int64),
         np.zeros(n_streams, np.int64), np.zeros(n, np.uint8), np.zeros((3, n if scan else 0)),
         np.zeros(n if scan else 0, np.int64), Q[0],
         np.zeros((2, n if scan else 0), np.int64), np.zeros(2 * n if scan else 0, np.int64))  # fmt: skip
    K = (trace.ev_t, np.zeros(1) if strength is None else strength,
         np.asarray(pol, np.float64), np.zeros(n_streams) if t0 is None else t0,
         np.full(n_streams, -1, np.int64), trace.request_items_ptr.astype(np.int64, copy=False),
         trace.group_items.astype(np.int32, copy=False), _horizon(trace),
         np.zeros(n_streams, np.int64), np.zeros(n_streams, np.int64))  # fmt: skip
    bidx = np.array([0, 1, 2], np.int64)
    bsgn = np.array(([g for _, g in store] + [1.0, 1.0, 1.0])[:3])
    W = (np.concatenate([np.asarray(pol, np.float64)[:4], np.zeros(8)])[:8],
         bidx, bsgn, np.zeros(3))  # fmt: skip
    io = (item_tokens, n_uses, np.zeros(n, np.int32), np.zeros(n, np.uint8),
         np.zeros(n_streams, np.int64), np.zeros(n_streams, np.int64), out.evictions,
         out.false_evictions, out.move_event, out.move_item, out.move_kind)  # fmt: skip
    A = (needs_ptr, needs, alt_need, alt_ptr, alt_items, out.need_hit, out.context_tokens,
         out.pinned_tokens)  # fmt: skip
    tree = no_tree() if scan else new_tree(trace, len(store), inner)
    args = (mode, S, K, Q, tree, W, io, A, ev_kind, ev_stream, ev_ref, int(budget),
            bool(demand_fetch), np.zeros(STACK, np.int64), np.zeros(STACK))  # fmt: skip
    return out, args
