"""``memlens.kernels.simd``'s vector loops give what a plain loop gives, value for value.

Each intrinsic is checked against a second, obvious implementation (numpy or Python) on
random inputs: sub-ranges that start and end anywhere (so the unrolled loop, the one-vector
loop and the overlapping last vector all run), ties, infinities, NaN, items and queries of
every length the masks take and longer."""

from __future__ import annotations

import numba
import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from memlens.kernels.simd import (
    LAST_TERM_BIT,
    LONG_ITEM,
    MASK_TERMS,
    NAN_SCORE,
    QUERY_TERMS,
    TERM_PAD,
    argmin3,
    argmin3_unit,
    lowest_bit,
    minmax3,
    term_masks,
)


@numba.njit(_nrt=False)
def _minmax(x, lo, hi):
    return minmax3(x[0], x[1], x[2], lo, hi)


@numba.njit(_nrt=False)
def _argmin(x, rank, lo, hi, p):
    return argmin3(x[0], x[1], x[2], rank, lo, hi, p[0], p[1], p[2], p[3])


@numba.njit(_nrt=False)
def _argmin_unit(x, rank, lo, hi, p):
    return argmin3_unit(x[0], x[1], x[2], rank, lo, hi, p[0], p[1], p[2], 5.0)


@numba.njit(_nrt=False)
def _masks(terms, starts, ends, lo, hi, qterms, qs, qe, out, shared):
    return term_masks(terms, starts, ends, lo, hi, qterms, qs, qe, out, shared)


@numba.njit(_nrt=False)
def _lowest(m):
    return lowest_bit(m)


#: components with many ties (a few levels), and now and then an infinity
LEVELS = [0.0, 0.25, 0.5, 1.0, 3.0, np.inf, -np.inf]


def components(rng: np.random.Generator, n: int, special: bool) -> np.ndarray:
    x = rng.random((3, n))
    x[1] = rng.choice(LEVELS[:5], size=n)  # ties
    if special:
        x[2, rng.integers(n)] = rng.choice(LEVELS[5:])
    return x


def span(rng: np.random.Generator, n: int) -> tuple[int, int]:
    lo = int(rng.integers(0, n - 7))
    return lo, int(rng.integers(lo + 8, n + 1))


@settings(max_examples=300, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), n=st.integers(8, 300), special=st.booleans())
def test_minmax3_gives_each_row_s_least_and_greatest(seed, n, special):
    rng = np.random.default_rng(seed)
    x = components(rng, n, special)
    lo, hi = span(rng, n)
    want = [f(x[r, lo:hi]) for r in range(3) for f in (np.min, np.max)]
    assert list(_minmax(x, lo, hi)) == want


def scalar_argmin(x, rank, lo, hi, p) -> int:
    """The least (score, rank) by the reference's expression, one item after another."""
    with np.errstate(invalid="ignore"):
        score = p[0] * (p[3] * x[0]) + p[1] * x[1] + p[2] * x[2]
    return min(range(lo, hi), key=lambda k: (score[k], rank[k]))


@settings(max_examples=300, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), n=st.integers(8, 300), special=st.booleans(),
       weights=st.sampled_from([(1.0, 1.0, 1.0, 1.0), (0.5, -2.0, 3.0, 1.0),
                                (1.0, 0.0, 0.0, 1.0), (2.0, 1.0, 1.0, 0.3)]))  # fmt: skip
def test_argmin3_is_the_least_score_then_the_least_rank(seed, n, special, weights):
    rng = np.random.default_rng(seed)
    x = components(rng, n, special)
    x[0] = rng.choice([0.1, 0.2, 0.7], size=n)  # whole scores tie too
    rank = rng.permutation(4 * n)[:n].astype(np.int64)
    p = np.array(weights)
    lo, hi = span(rng, n)
    with np.errstate(invalid="ignore"):  # 0 * inf
        score = p[0] * (p[3] * x[0]) + p[1] * x[1] + p[2] * x[2]
    if np.isnan(score[lo:hi]).any():  # inf - inf: the caller scans instead
        assert _argmin(x, rank, lo, hi, p) == NAN_SCORE
        return
    assert _argmin(x, rank, lo, hi, p) == scalar_argmin(x, rank, lo, hi, p)
    if p[3] == 1.0:  # the variant without the product by p3 (its value is not read)
        assert _argmin_unit(x, rank, lo, hi, p) == scalar_argmin(x, rank, lo, hi, p)


def test_argmin3_reports_a_nan_score_where_the_scalar_loop_would_differ():
    x = np.ones((3, 40))
    rank = np.arange(40, dtype=np.int64)
    x[1, 17] = np.nan
    p = np.ones(4)
    assert _argmin(x, rank, 0, 40, p) == NAN_SCORE
    assert _argmin(x, rank, 18, 40, p) == 18  # the NaN outside the range is not read


def item_terms(rng: np.random.Generator, n_items: int, vocab: int, dtype=np.int32):
    """CSR terms of items of every length a mask takes and longer, padded as the kernel's."""
    lengths = rng.choice([0, 1, 5, 8, 15, 16, 17, 31, 32, 33, 40], size=n_items)
    ptr = np.zeros(n_items + 1, np.int64)
    np.cumsum(lengths, out=ptr[1:])
    terms = rng.integers(0, vocab, int(ptr[-1]))
    return ptr, np.concatenate([terms, np.full(TERM_PAD, -1)]).astype(dtype), lengths


@settings(max_examples=300, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), n_items=st.integers(1, 60),
       n_query=st.integers(0, QUERY_TERMS), vocab=st.sampled_from([5, 60, 30_000, 100_000]),
       narrow=st.booleans())  # fmt: skip
def test_term_masks_marks_the_terms_an_item_shares_with_the_query(seed, n_items, n_query, vocab,
                                                                  narrow):  # fmt: skip
    """int32 terms, and int16 (the kernel's when the requests' vocabulary fits)."""
    rng = np.random.default_rng(seed)
    dtype = np.int16 if narrow and vocab < 2**15 else np.int32
    ptr, terms, lengths = item_terms(rng, n_items, vocab, dtype)
    qterms = rng.integers(0, vocab, n_query + 3).astype(np.int64)
    qs = int(rng.integers(0, 4))
    lo = int(rng.integers(0, n_items))
    hi = int(rng.integers(lo, n_items + 1))
    out = np.full(n_items, 77, np.int64)
    shared = np.full(n_items, -5, np.int64)
    count = _masks(terms, ptr[:-1].copy(), ptr[1:].copy(), lo, hi, qterms, qs, qs + n_query,
                   out, shared)  # fmt: skip
    query = set(qterms[qs : qs + n_query].tolist())
    listed = []
    for k in range(n_items):
        if not lo <= k < hi:
            assert out[k] == 77  # outside the range: untouched
            continue
        if lengths[k] > MASK_TERMS:
            want = LONG_ITEM
        else:
            want = sum(1 << j for j in range(lengths[k]) if int(terms[ptr[k] + j]) in query)
        assert out[k] == want
        if want:
            listed.append(k)
    assert count == len(listed) and shared[:count].tolist() == listed


def test_lowest_bit_and_the_padding_bit():
    for b in range(63):
        assert _lowest(np.int64(1 << b) | np.int64(1 << 62)) == b
    assert _lowest(np.int64(0) | LAST_TERM_BIT) == MASK_TERMS - 1 < TERM_PAD
