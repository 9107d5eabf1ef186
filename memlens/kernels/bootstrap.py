"""The bootstrap's replicate sums, every metric in one pass over the resample counts.

``memlens.analyze.stats`` evaluates each decomposable metric on every bootstrap replicate as
``counts @ num`` (and ``counts @ den``): a ``(resamples x streams)`` count matrix times a column
per stream.  Done one metric at a time, each product reads the whole count matrix (93 MB as
floats for 2,000 resamples of 5,800 streams; 12 MB as the ``uint8`` it is now); a compare job's
16 metrics read it 30 times, which was 9 of a 98 s one-process compare on that shape (issue
34).  :func:`replicate_sums` reads it once for all the columns, widening each count to a float.

Each sum is taken in stream order, one product at a time, whatever other columns are summed
with it: a metric's replicates (and so its interval) never depend on which other metrics share
the pass (a BLAS matrix product blocks its columns, and a column's last bit would).

A stream whose value in a column is zero is passed over: its products are zeros, and adding
a zero (of either sign) to a sum that began at +0.0 leaves its bits as they are, so the sums
are those of the full loop.  On 5,800 tau-bench conversations 31% of a compare's per-stream
values are zero (hits at small budgets, evictions of streams that fit; issue 34).
"""

from __future__ import annotations

import numpy as np
from numba import njit


@njit(cache=True, nogil=True)
def replicate_sums(counts_by_stream: np.ndarray, columns: np.ndarray) -> np.ndarray:
    """``(resamples, k)``: ``out[b, j] = sum_i counts[b, i] * columns[i, j]``, summed over the
    streams ``i`` in order; ``counts_by_stream`` is the count matrix transposed,
    ``(streams, resamples)``, so that each stream's counts are one contiguous row and every
    replicate's sum advances at once (in vector registers: the replicates are independent)."""
    streams, resamples = counts_by_stream.shape
    k = columns.shape[1]
    acc = np.zeros((k, resamples))
    for i in range(streams):
        counts = counts_by_stream[i]
        for j in range(k):
            weight = columns[i, j]
            if weight == 0.0:  # (never a NaN: NaN == 0.0 is false)
                continue
            sums = acc[j]
            for b in range(resamples):
                sums[b] += counts[b] * weight
    return np.ascontiguousarray(acc.T)
