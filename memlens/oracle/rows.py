"""Sparse constraint rows as raw CSR arrays, stacked and sliced with numpy (issue 34).

On thousands of short streams the oracle's LPs are tiny (tens of rows) and many (one per
stream, a cut round each, batched 64 at a time), and scipy.sparse's construction, its
``vstack``, ``block_diag`` and fancy row indexing cost more per call than the arithmetic: index
dtype checks, format checks and COO round trips, each a few tens of microseconds per matrix.
:class:`Rows` holds the same CSR arrays without any of that; one ``scipy.sparse.csr_array``
is made per LP handed to HiGHS (:meth:`Rows.to_scipy`).

The arrays are canonical as scipy's COO-to-CSR conversion leaves them: rows in order, column
indices ascending within a row, no duplicate entries (:func:`from_coo` refuses duplicates
rather than summing them; none of the oracle's matrices has any), explicit zeros kept.  So a
matrix made here is entry for entry, in the same order, the one ``scipy.sparse.csr_matrix((
data, (row, col)))`` makes, and HiGHS gets the same model and returns the same solution
(tests/oracle/test_oracle_rows.py).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass
class Rows:
    """``n_rows`` sparse rows over ``n_cols`` columns: CSR ``indptr``, ``indices`` (int64)
    and ``data`` (float64)."""

    indptr: np.ndarray
    indices: np.ndarray
    data: np.ndarray
    n_cols: int

    @property
    def n_rows(self) -> int:
        return int(self.indptr.shape[0]) - 1

    @property
    def shape(self) -> tuple[int, int]:
        return self.n_rows, self.n_cols

    def row_of_entry(self) -> np.ndarray:
        """The row each stored entry is in."""
        return np.repeat(np.arange(self.n_rows, dtype=np.int64), np.diff(self.indptr))

    def matvec(self, x: np.ndarray) -> np.ndarray:
        """``A @ x``, summed entry by entry in storage order from 0.0 as scipy's CSR product
        does, so the float results are the same to the last bit."""
        return np.bincount(self.row_of_entry(), weights=self.data * x[self.indices],
                           minlength=self.n_rows)  # fmt: skip

    def take(self, rows: np.ndarray) -> Rows:
        """The rows ``rows`` (indices, in that order): ``A[rows]``."""
        rows = np.asarray(rows, dtype=np.int64)
        starts = self.indptr[rows]
        lengths = self.indptr[rows + 1] - starts
        indptr = np.zeros(rows.shape[0] + 1, dtype=np.int64)
        np.cumsum(lengths, out=indptr[1:])
        at = np.repeat(starts - indptr[:-1], lengths) + np.arange(indptr[-1], dtype=np.int64)
        return Rows(indptr, self.indices[at], self.data[at], self.n_cols)

    def to_scipy(self):
        """The rows as one ``scipy.sparse.csr_array``."""
        import scipy.sparse as sp

        return sp.csr_array((self.data, self.indices, self.indptr), shape=self.shape)


def empty(n_cols: int) -> Rows:
    """No rows over ``n_cols`` columns."""
    return Rows(np.zeros(1, np.int64), np.zeros(0, np.int64), np.zeros(0), int(n_cols))


def from_coo(row: np.ndarray, col: np.ndarray, data: np.ndarray, shape: tuple[int, int]) -> Rows:
    """Rows from (row, column, value) triples in any order (no two at one position)."""
    n_rows, n_cols = int(shape[0]), int(shape[1])
    row = np.asarray(row, dtype=np.int64)
    col = np.asarray(col, dtype=np.int64)
    order = np.lexsort((col, row))
    row, col = row[order], col[order]
    if row.size > 1 and np.any((row[1:] == row[:-1]) & (col[1:] == col[:-1])):
        raise ValueError("duplicate entries (scipy would sum them)")
    indptr = np.zeros(n_rows + 1, dtype=np.int64)
    np.cumsum(np.bincount(row, minlength=n_rows), out=indptr[1:])
    return Rows(indptr, col, np.asarray(data, dtype=np.float64)[order], n_cols)


def vstack(parts: list[Rows]) -> Rows:
    """Rows of equal width, one part under the other."""
    n_cols = parts[0].n_cols
    if any(p.n_cols != n_cols for p in parts):
        raise ValueError("rows of different widths")
    return _joined(parts, np.zeros(len(parts), np.int64), n_cols)


def block_diag(parts: list[Rows]) -> Rows:
    """The parts as diagonal blocks: each one's columns shifted past the previous parts'."""
    widths = np.array([p.n_cols for p in parts], dtype=np.int64)
    shift = np.concatenate([[0], np.cumsum(widths)[:-1]])
    return _joined(parts, shift, int(widths.sum()))


def _joined(parts: list[Rows], col_shift: np.ndarray, n_cols: int) -> Rows:
    nnz = np.array([p.indices.shape[0] for p in parts], dtype=np.int64)
    entry_shift = np.concatenate([[0], np.cumsum(nnz)[:-1]])
    indptr = np.concatenate([[0]] + [p.indptr[1:] + s for p, s in zip(parts, entry_shift)])
    indices = np.concatenate([np.zeros(0, np.int64)] + [p.indices + c for p, c in
                                                          zip(parts, col_shift)])  # fmt: skip
    data = np.concatenate([np.zeros(0)] + [p.data for p in parts])
    return Rows(indptr.astype(np.int64), indices, data, n_cols)
