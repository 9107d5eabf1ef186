"""The bootstrap's replicate sums, every metric in one pass over the resample counts.

``memlens.analyze.stats`` evaluates each decomposable metric on every bootstrap replicate as
``counts @ num`` (and ``counts @ den``): a ``(resamples x streams)`` count matrix times a column
per stream.  Done one metric at a time, each product reads the whole count matrix (93 MB for
2,000 resamples of 5,800 streams); a compare job's 16 metrics read it 30 times, which was 9 of
a 98 s one-process compare on that shape (issue 34).  :func:`replicate_sums` reads it once for
all the columns.

Each sum is taken in stream order, one product at a time, whatever other columns are summed
with it: a metric's replicates (and so its interval) never depend on which other metrics share
the pass (a BLAS matrix product blocks its columns, and a column's last bit would).
"""

from __future__ import annotations

import numpy as np
from numba import njit


@njit(cache=True, nogil=True)
def replicate_sums(counts: np.ndarray, columns: np.ndarray) -> np.ndarray:
    """``(resamples, k)``: ``out[b, j] = sum_i counts[b, i] * columns[i, j]``, summed over the
    streams ``i`` in order."""
    resamples, streams = counts.shape
    k = columns.shape[1]
    out = np.zeros((resamples, k))
    for b in range(resamples):
        row = out[b]
        for i in range(streams):
            c = counts[b, i]
            for j in range(k):
                row[j] += c * columns[i, j]
    return out
