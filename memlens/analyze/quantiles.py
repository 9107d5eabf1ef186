"""Percentiles of many groups at once, equal bit for bit to ``np.percentile`` of each group.

A run's per-stream metrics take the 95th percentile of every stream's context tokens; on a
trace of thousands of short streams one ``np.percentile`` call per stream (two, with the
retrieval summary's copy) was most of the metrics' time (issue 34).  :func:`grouped_percentile`
sorts every group once, by (group, value), and then does numpy's own arithmetic (the ``linear``
method: virtual index ``(n - 1) * q / 100``, neighbours at its floor and the next index, or the
last value at or above ``n - 1``, and numpy's two-sided ``_lerp``) on whole arrays, so each
group's value is the one ``np.percentile`` gives (tests/analyze/test_quantiles.py).
"""

from __future__ import annotations

import numpy as np


def grouped_percentile(values: np.ndarray, rows: list[np.ndarray], q: float) -> list[float | None]:
    """``float(np.percentile(values[r], q))`` for every index array ``r`` of ``rows`` (None for
    an empty one), computed together."""
    counts = np.asarray([r.shape[0] for r in rows], dtype=np.int64)
    out: list[float | None] = [None] * len(rows)
    full = np.flatnonzero(counts)
    if full.size == 0:
        return out
    taken = np.concatenate([values[rows[g]] for g in full])
    owner = np.repeat(np.arange(full.size), counts[full])
    order = np.lexsort((taken, owner))  # by group, then value: each group sorted in place
    ordered = taken[order]
    n = counts[full]
    start = np.concatenate([[0], np.cumsum(n)[:-1]])
    virtual = (n - 1) * np.true_divide(q, 100)  # numpy's linear method, as float64
    prev = np.floor(virtual)
    above = virtual >= n - 1
    prev_i = prev.astype(np.intp)
    next_i = prev_i + 1
    prev_i[above] = n[above] - 1  # numpy takes the last value (index -1) for both
    next_i[above] = n[above] - 1
    prev[above] = -1.0  # and its gamma is measured from that -1
    gamma = virtual - prev
    a = ordered[start + prev_i]
    b = ordered[start + next_i]
    diff = b - a
    lerp = np.add(a, diff * gamma)
    np.subtract(b, diff * (1 - gamma), out=lerp, where=gamma >= 0.5)
    for k, g in enumerate(full.tolist()):
        out[g] = float(lerp[k])
    return out
