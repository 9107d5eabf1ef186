"""Cutting a long stream's LP into segments: a proven upper bound from small, fast LPs.

HiGHS's time on the stream LP (``memlens.oracle.bounds.lp_upper``) grows much faster than the
stream: about 0.06 s at 5k references but 7.6 s at 53k on this machine.  So a long stream is
cut at check points ``P_1 < P_2 < ...`` into segments, and each segment gets its own LP over

* the gaps that *end* in it (each gap, hence each hit, belongs to exactly one segment), and
* the capacity rows of its own check points.

A gap that started before the segment is *clipped*: it starts at the segment's first check
point, free (no nesting to a gap of an earlier segment).  Every schedule of the whole stream,
restricted to a segment (its gaps clipped), is feasible for the segment's LP, with the same
hits; so the sum of the segments' optima bounds the stream's hits from above, and rounding
each segment's optimum down to an integer keeps it a bound.  This is the decomposition idea of
PFOO-L (Berger et al., SIGMETRICS 2018) kept exact inside each segment: what it gives away is
only at the cuts, where the LP may fill the cache for free with items whose gaps cross the
cut.  Cuts are therefore put where the fewest gaps cross (none: the segments are independent
and the bound is the stream's LP bound exactly), in a window around every
``segment_references`` references.  The gap between this bound and the replayed lower bound
is reported as before, so a loose cut shows.
"""

from __future__ import annotations

import numpy as np

from memlens.oracle.model import GapModel


def crossing(model: GapModel) -> np.ndarray:
    """Per check point ``p``: how many gaps a cut at ``p`` would clip (``k_start < p < k_end``)."""
    K = model.points.shape[0]
    diff = np.zeros(K + 1, dtype=np.int64)
    np.add.at(diff, np.minimum(model.k_start + 1, K), 1)
    np.add.at(diff, model.k_end, -1)
    return np.cumsum(diff)[:K]


def cut_points(model: GapModel, segment_references: int) -> np.ndarray:
    """Check-point indices where segments start (the first is 0), about
    ``segment_references`` gap ends apart, each at the fewest crossing gaps of its window."""
    K = model.points.shape[0]
    if model.n_gaps <= segment_references or K < 2:
        return np.zeros(1, dtype=np.int64)
    ends = np.cumsum(np.bincount(model.k_end - 1, minlength=K))  # gaps ending at points <= p
    cross = crossing(model)
    cuts = [0]
    half = segment_references // 4
    done = 0  # gaps ending before the last cut
    while ends[-1] - done > segment_references + half:
        lo = int(np.searchsorted(ends, done + segment_references - half)) + 1
        hi = int(np.searchsorted(ends, done + segment_references + half)) + 1
        lo, hi = max(lo, cuts[-1] + 1), min(max(hi, lo + 1), K)
        if lo >= K:
            break
        cut = lo + int(np.argmin(cross[lo:hi]))
        cuts.append(cut)
        done = int(ends[cut - 1])
    return np.asarray(cuts, dtype=np.int64)


def segment(model: GapModel, lo: int, hi: int) -> tuple[GapModel, np.ndarray, np.ndarray]:
    """The segment of check points ``lo .. hi-1``: its model (gaps clipped, forced hits left to
    the caller), the indices of its gaps in ``model`` and the share of each gap's check points
    that lies inside the segment (below 1 for a clipped gap)."""
    gaps = np.flatnonzero((model.k_end > lo) & (model.k_end <= hi))
    new_index = np.full(model.n_gaps, -1, dtype=np.int64)
    new_index[gaps] = np.arange(gaps.size)
    prev = model.prev[gaps]
    prev = np.where(prev >= 0, new_index[np.maximum(prev, 0)], -1)
    clipped = model.k_start[gaps] < lo
    prev[clipped] = -1
    start = np.where(clipped, model.points[lo], model.start[gaps])
    links = np.zeros(0, dtype=np.int64)
    if model.has_groups:
        links = np.flatnonzero(new_index[model.link_gap] >= 0)
    sub = GapModel(
        stream=model.stream, budget=model.budget, demand_fetch=model.demand_fetch,
        n_references=int(gaps.size), forced_hits=0,
        item=model.item[gaps], start=start, end=model.end[gaps], size=model.size[gaps],
        prev=prev, ref=model.ref[gaps], points=model.points[lo:hi],
        capacity=model.capacity[lo:hi],
        k_start=np.maximum(model.k_start[gaps], lo) - lo, k_end=model.k_end[gaps] - lo,
        length=model.length[gaps], total_capacity=0,
        link_gap=new_index[model.link_gap[links]], link_ref=model.link_ref[links],
        has_groups=model.has_groups,
    )  # fmt: skip
    k_start, k_end = model.k_start[gaps], model.k_end[gaps]
    return sub, gaps, (k_end - np.maximum(k_start, lo)) / (k_end - k_start)


def segmented_lp_upper(model: GapModel, segment_references: int, lp_upper, n_jobs: int = 1):
    """Upper bound of ``model`` from its segments' LPs (``lp_upper(sub) -> (bound, y)``, ``y``
    one row of gap values or several, e.g. ``bounds.lp_candidates``'; solved on ``n_jobs``
    processes; the result does not depend on it), candidate priorities for the rounding, and
    the number of segments.

    Two candidates per row of ``y``: the LP values made monotone along chains, and the same
    with a clipped gap's scaled by the share of it inside its segment (its segment kept it
    without paying for the room it took before the cut). Neither wins everywhere: on a
    200k-reference stream of the ``simple`` generator (long reuse distances) the plain
    values rounded to 90,714 hits and the scaled ones to 153,709; on the generated agent
    trace at budget 512 the scaled ones lost about 5% of references. The caller keeps the
    best rounding."""
    if model.n_gaps == 0:
        return model.forced_hits, [np.zeros(0), np.zeros(0)], 1
    cuts = cut_points(model, segment_references)
    ends = np.append(cuts, model.points.shape[0]).tolist()
    parts = [segment(model, lo, hi) for lo, hi in zip(ends[:-1], ends[1:])]
    if n_jobs != 1 and len(parts) > 1:
        from joblib import Parallel, delayed

        solved = Parallel(n_jobs=n_jobs, backend="loky")(
            delayed(lp_upper)(sub) for sub, _, _ in parts
        )
    else:
        solved = [lp_upper(sub) for sub, _, _ in parts]
    n_rows = np.atleast_2d(solved[0][1]).shape[0]
    y = np.zeros((n_rows, model.n_gaps))
    total = model.forced_hits
    share = np.ones(model.n_gaps)
    for (_, gaps, part_share), (bound, y_sub) in zip(parts, solved):
        total += bound
        y[:, gaps] = np.atleast_2d(y_sub)
        share[gaps] = part_share
    monotone = [chain_monotone(row, model.prev) for row in y]
    return total, [p for row in monotone for p in (row, row * share)], len(cuts)


def chain_monotone(y: np.ndarray, prev: np.ndarray) -> np.ndarray:
    """``y`` lowered so that no gap is kept more than its predecessor in the chain (what the
    whole stream's LP guarantees and the rounding relies on; a clipped gap's segment did not
    see its predecessor)."""
    out = y.tolist()
    for g, p in enumerate(prev.tolist()):  # a gap's predecessor always comes first
        if p >= 0 and out[g] > out[p]:
            out[g] = out[p]
    return np.asarray(out, dtype=np.float64)
