"""The ``generative_agents`` kernel: Generative Agents' retrieval score, compiled.

The class (``policies/generative_agents.py``) evicts the lowest ``w_r * recency + w_i *
importance + w_v * relevance``, each component min-max normalised over the candidates, the
relevance being the cosine with the stream's latest request.  The vectors are the class's
own (``relevance_csr``: TF-IDF rows, or with ``relevance=embeddings`` the run's embedding
vectors as rows of every non-zero dimension), laid out as CSR arrays in the class's dict
order so every cosine is summed in the same order; the items keep only the terms some
request has, numbered densely (``query_vocabulary``: no other term can be shared, and the
order of the rest is kept, so every sum is the same).  A dense query has more terms than
``simd.term_masks`` takes, so embeddings take ``_rescore``'s scalar path: the same sum.

The code variant's rank recency (``recency=rank``: the k-th least recently accessed
candidate gets ``decay ** (k + 1)``, :func:`rank_recencies`) changes every candidate's
recency whenever one is used, added or evicted; a victim choice sorts the candidates by
recency rank and writes each one's rank recency into its slot
(``scantree._rank_recency``), then normalises and scans as for the hours.

This kernel **scans**, with vectors; it keeps no bound tree (``scantree`` keeps one for
MemoryBank and MemoryOS heat).  Each stream's candidates keep their three components, recency
rank and span of terms in slots of their own, end to end (``scantree._copy_to_slot``).

* A victim choice is two passes over the slots: the three spreads (the normalisation), then
  the least (score, recency rank) with the reference's expression; both are loops over
  vectors of 8 doubles (``memlens/kernels/simd.py``, ``minmax3`` and ``argmin3``), from 32
  candidates on.
* A request with a new query vector marks the stream's relevances stale; the next victim
  choice re-scores every slot (``scantree._rescore``).  First, for all slots at once, which
  of each item's terms the query has (``simd.term_masks``: 16 terms to a vector, int16,
  compared with each query term); then, for the items that share one, the sum over the
  shared terms in the item's order.

Why no tree: every term of the score moves with the query, so an exact ranking cannot avoid
work in the number of items held.

* A request with a new TF-IDF vector changes every candidate's relevance, and with it the
  relevance spread that weights the whole ranking. The class re-scores every candidate, and
  so must an exact kernel; in a tree each re-score is an O(log n) update besides.  On the
  benchmark trace one request in four brings a new vector (``vector_ids``; a repeated vector
  re-scores nothing), and about 40% of the candidates share a term with it.
* The bound tree this kernel had (per-component minima, one tree per sixteenth of the
  importances) visited a fifth to a twentieth as many nodes as there were candidates at 500 to
  8,000 items held, but each visit cost more than a slot's score. It lost to the scalar scan by
  2x to 3x at every budget from 1K to 1M tokens (``benchmarks/results/ga_scan_vs_tree.md``).
* An index (recency lists per importance group walked under a monotone bound, relevance
  computed on demand, its maximum by MaxScore over per-term postings) read 80 candidates per
  choice instead of 318 at budget 65536, but lost to the scalar scan by 1.7x (64K) to 4.5x
  (1K): its upkeep cost as much as the scan, and about 56 candidates per choice rank below the
  victim on recency and importance and are kept by their relevance alone, which changes with
  every query (``benchmarks/ga_victim_profile.py``; ``docs/speed.md``; the patch is
  ``benchmarks/results/ga_index_attempt.patch``).

So the cost per victim choice grows with the items held, at a small constant: at budget 65536
(about 500 items held) the replay runs at about 2.4M events/s, at 262144 at about 0.8M
(``benchmarks/bench_scan_kernels.py``).
"""

from __future__ import annotations

import numpy as np

from memlens.kernels.common import one_write_trace, result, timed, warm_up
from memlens.kernels.scantree import GENERATIVE_AGENTS, replay_scan, scan_arguments
from memlens.kernels.simd import TERM_PAD
from memlens.trace.model import Trace

_CSR_KEY = "_memlens_ga_query_arrays"  # {(policy.relevance_key, wide): query_arrays}


def query_arrays(csr: tuple[np.ndarray, ...], wide: bool = False) -> tuple[np.ndarray, ...]:
    """The relevance arrays of ``scantree._relevance``: items' and requests' CSR vectors
    (``relevance_csr``), and the scratch of the loaded query (its terms as bits, its weights
    dense, which request is loaded).

    Only the terms some request has can ever be shared, so the items keep only those, in
    their order (every cosine is then the same sum, in the same order), numbered densely
    (:func:`query_vocabulary`): on the benchmark trace half of the items' terms go, and the
    query's bits and weights fit in the first-level cache.  The items' terms are int16 when
    the numbers fit (``simd.term_masks`` then compares them at twice the rate), and padded
    so it may read a whole mask's worth of terms from any item's first (``wide``: int32
    whatever the vocabulary, which is how the warm-up compiles that variant too)."""
    iptr, iterm, iw, qptr, qterm, qw = csr
    iptr, iterm, iw, qterm, vocab = query_vocabulary(iptr, iterm, iw, qterm)
    dtype = np.int16 if vocab < np.iinfo(np.int16).max and not wide else np.int32
    iterm = np.concatenate([iterm.astype(dtype), np.full(TERM_PAD, -1, dtype)])
    iw = np.concatenate([iw, np.zeros(TERM_PAD)])
    return (iptr, iterm, iw, qptr, qterm, qw, np.zeros(vocab // 64 + 1, np.uint64),
            np.zeros(max(vocab, 1)), np.full(1, -1, np.int64),
            vector_ids(qptr, qterm, qw))  # fmt: skip


def query_vocabulary(iptr, iterm, iw, qterm):
    """The items' CSR terms without those no request has (order kept), every term renumbered
    by its rank among the requests' terms; returns ``(iptr, iterm, iw, qterm, vocabulary
    size)``."""
    vocab = np.unique(qterm)
    top = int(max(iterm.max(initial=-1), qterm.max(initial=-1))) + 1
    rank = np.full(top, -1, np.int64)
    rank[vocab] = np.arange(len(vocab))
    new = rank[iterm]
    keep = new >= 0
    row = np.repeat(np.arange(len(iptr) - 1), np.diff(iptr))
    ptr = np.zeros_like(iptr)
    np.cumsum(np.bincount(row[keep], minlength=len(iptr) - 1), out=ptr[1:])
    return ptr, new[keep], iw[keep], rank[qterm], len(vocab)


def vector_ids(ptr: np.ndarray, term: np.ndarray, weight: np.ndarray) -> np.ndarray:
    """Per CSR row the id of its vector: equal ids exactly when the rows hold the same
    (term, weight) pairs (as sets), so one query's relevances hold for the other; ids in the
    order the vectors first appear.

    Rows whose terms are distinct and whose weights are neither NaN nor -0.0 (TF-IDF's and
    the embeddings': every row, as far as seen) are put in term order, and two such rows hold
    the same set exactly when they are then the same sequence, bit for bit
    (:func:`first_of_equal_rows`).  Any other input takes a set of pairs per row (a set per
    row was 0.66 s of Generative Agents' preparation on the 5,800-stream benchmark trace)."""
    length = np.diff(ptr)
    row = np.repeat(np.arange(len(length)), length)
    order = np.argsort(row * (int(term.max(initial=0)) + 1) + term, kind="stable")
    ordered = term[order]
    repeats = np.any((ordered[1:] == ordered[:-1]) & (row[1:] == row[:-1]))
    odd = np.isnan(weight) | ((weight == 0) & np.signbit(weight))
    if len(term) and (repeats or odd.any() or term.min() < 0):
        return _ids_of_sets(ptr, term, weight)
    first = first_of_equal_rows(ptr, ordered, weight[order])
    own = first == np.arange(len(first))
    ids = np.cumsum(own) - 1  # a first row's id: how many first rows come before it
    return ids[first]


def _ids_of_sets(ptr: np.ndarray, term: np.ndarray, weight: np.ndarray) -> np.ndarray:
    """:func:`vector_ids` by a frozenset of (term, weight) pairs per row."""
    ids: dict[frozenset, int] = {}
    t, w, p = term.tolist(), weight.tolist(), ptr.tolist()
    return np.array([ids.setdefault(frozenset(zip(t[a:b], w[a:b])), len(ids))
                     for a, b in zip(p[:-1], p[1:])], np.int64)  # fmt: skip


def _mixed(x: np.ndarray) -> np.ndarray:
    """splitmix64's finaliser, elementwise on uint64 (wrapping)."""
    x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return x ^ (x >> np.uint64(31))


def first_of_equal_rows(ptr: np.ndarray, term: np.ndarray, weight: np.ndarray) -> np.ndarray:
    """Per CSR row, the first row holding the same (term, weight) sequence, bit for bit (a
    row with a NaN weight: itself, as no NaN equals another).  Rows are grouped by a hash of
    their sequence, then each is compared with its group's first row element by element: a
    row a hash collision put in a wrong group is its own first row."""
    n = len(ptr) - 1
    length = np.diff(ptr)
    row = np.repeat(np.arange(n), length)
    pos = np.arange(len(term)) - ptr[row]
    bits = np.ascontiguousarray(weight, np.float64).view(np.uint64)
    with np.errstate(over="ignore"):
        h = _mixed(term.astype(np.uint64) ^ _mixed(bits ^ _mixed(pos.astype(np.uint64) + 1)))
        sums = np.concatenate([np.zeros(1, np.uint64), np.cumsum(h, dtype=np.uint64)])
        key = (sums[ptr[1:]] - sums[ptr[:-1]]) ^ _mixed(length.astype(np.uint64))
    _, first_at, group = np.unique(key, return_index=True, return_inverse=True)
    first = first_at[group.ravel()]
    same_length = length == length[first]
    other = np.minimum(ptr[first[row]] + pos, max(len(term) - 1, 0))  # (in range when not)
    differs = (term != term[other]) | (bits != bits[other]) | np.isnan(weight)
    bad = ~same_length | (np.bincount(row, weights=differs, minlength=n) > 0)
    first[bad] = np.flatnonzero(bad)
    return first


def _trace_query_arrays(policy, trace: Trace, source: str | None = None, wide: bool = False):
    """:func:`query_arrays` of the policy's relevance vectors (``policy.relevance_csr``: the
    TF-IDF rows, or the run's embeddings as CSR rows of every non-zero dimension), the CSR
    part cached on the trace under ``policy.relevance_key`` (the source and the embedder
    settings, so TF-IDF and embeddings never share an entry); the scratch arrays are fresh for
    every replay.  ``source="tfidf"``: the TF-IDF rows whatever the policy's (the warm-up's
    one-write trace carries no embedding)."""
    key = (policy.relevance_key(trace, source), wide)
    cache = trace.__dict__.setdefault(_CSR_KEY, {})
    if key not in cache:
        if key[0] == ("tfidf",):  # the trace's texts alone: kept beside its cache entry
            cache[key] = kept_query_arrays(trace, lambda: policy.relevance_csr(trace, source),
                                           wide)  # fmt: skip
        else:
            cache[key] = query_arrays(policy.relevance_csr(trace, source), wide)
    q = cache[key]
    scratch = (np.zeros(q[6].shape[0], np.uint64), np.zeros(q[7].shape[0]),
               np.full(1, -1, np.int64))  # fmt: skip
    return q[:6] + scratch + (q[9],)


#: The arrays of :func:`query_arrays` a kept entry holds (the scratch is sized by ``vocab``).
KEPT = ("iptr", "iterm", "iw", "qptr", "qterm", "qw", "ids")


def kept_query_arrays(trace: Trace, csr, wide: bool) -> tuple[np.ndarray, ...]:
    """:func:`query_arrays` of the trace's TF-IDF rows (``csr()``, called only when they are
    not kept), kept beside the trace's parsed-cache entry (``memlens.trace.derived``): they
    depend on its texts alone, and making them was 1.1 s of every Generative Agents batch on
    5,800 tau-bench conversations and 2.6 s on the generated benchmark trace (issue 34)."""
    from memlens.trace.derived import kept_arrays

    def build() -> dict[str, np.ndarray]:
        q = query_arrays(csr(), wide)
        return dict(zip(KEPT, q[:6] + (q[9],), strict=True)) | {
            "vocab": np.array([q[7].shape[0]], np.int64)
        }

    def check(a: dict[str, np.ndarray]) -> None:
        check_query_arrays(a, trace.n_items, trace.n_requests, wide)

    a = kept_arrays(trace, f"ga-tfidf-query-{'wide' if wide else 'narrow'}", build, check)
    vocab = int(a["vocab"][0])
    return (a["iptr"], a["iterm"], a["iw"], a["qptr"], a["qterm"], a["qw"],
            np.zeros(vocab // 64 + 1, np.uint64), np.zeros(vocab), np.full(1, -1, np.int64),
            a["ids"])  # fmt: skip


def check_query_arrays(a: dict[str, np.ndarray], n_items: int, n_requests: int,
                       wide: bool) -> None:  # fmt: skip
    """Raise unless ``a`` can be :func:`query_arrays`' arrays for a trace of ``n_items`` items
    and ``n_requests`` requests: the compiled scan indexes them without bounds checks."""
    from memlens.trace.derived import check_lengths, check_pointers

    vocab = int(a["vocab"][0]) if a["vocab"].shape == (1,) else 0
    if vocab < 1:
        raise ValueError("no vocabulary size")
    check_lengths(a, {"iptr": n_items + 1, "qptr": n_requests + 1, "ids": n_requests}, np.int64)
    narrow = vocab < np.iinfo(np.int16).max and not wide
    if a["iterm"].dtype != (np.int16 if narrow else np.int32) or a["qterm"].dtype != np.int64:
        raise ValueError("terms of another type")
    for ptr, term, weight, pad in (("iptr", "iterm", "iw", TERM_PAD), ("qptr", "qterm", "qw", 0)):
        p, terms, weights = a[ptr], a[term], a[weight]
        if terms.ndim != 1 or weights.dtype != np.float64 or weights.shape != terms.shape:
            raise ValueError(f"{term} and {weight} of other types or shapes")
        check_pointers(p, len(terms) - pad, ptr)
        body = terms[: p[-1]]
        if body.size and (body.min() < 0 or body.max() >= vocab):
            raise ValueError(f"{term}: a term outside the vocabulary")
        if np.any(terms[p[-1] :] != -1):
            raise ValueError(f"{term}: padding that is not -1")
    ids = a["ids"]
    if ids.size and (ids.min() < 0 or ids.max() >= n_requests):
        raise ValueError("a vector id out of range")


def _arguments(policy, trace: Trace, budget: int, demand_fetch: bool,
               source: str | None = None, wide: bool = False):  # fmt: skip
    X = np.zeros((3, trace.n_items))
    X[1] = policy.importance_of(trace)  # the class's own
    t0 = np.array([float(trace.ev_t[ev[0]]) if len(ev) else 0.0 for ev in trace.stream_events])
    pol = [policy.w_recency, policy.w_importance, policy.w_relevance, policy.log_decay_per_s,
           1.0 if policy.normalize else 0.0,
           1.0 if policy.rank_recency else 0.0]  # fmt: skip
    return scan_arguments(trace, budget, demand_fetch, GENERATIVE_AGENTS, pol, X, [],
                          strength=rank_recencies(policy, trace),
                          query=_trace_query_arrays(policy, trace, source, wide), t0=t0)  # fmt: skip


def rank_recencies(policy, trace: Trace) -> np.ndarray | None:
    """The rank recency of the k-th least recent candidate, ``decay ** (k + 1)`` for every
    ``k`` below the most items a stream has (``recency=rank``; None otherwise), each
    computed by Python's ``**`` as the class's ``scores`` does."""
    if not policy.rank_recency:
        return None
    most = int(np.bincount(trace.item_stream).max()) if trace.n_items else 0
    d = policy.recency_decay
    return np.array([d ** (k + 1) for k in range(max(most, 1))], np.float64)


def warm_variants(policy) -> None:
    """Compile the replay for int32 item terms too (``memlens.kernels.warm``): a log whose
    requests use 32,767 terms or more takes that variant, and the warm-up's tiny trace alone
    would leave it to compile inside the first such replay (three minutes here, unannounced)."""
    replay_scan(*_arguments(policy, one_write_trace(), 1, False, "tfidf", wide=True)[1])


def replay(policy, trace: Trace, budget: int, demand_fetch: bool, seed: int):
    """The ``generative_agents`` kernel: the reference result."""
    warm_up(replay_scan, lambda tiny: _arguments(policy, tiny, 1, False, "tfidf")[1])
    out, args = _arguments(policy, trace, budget, demand_fetch)
    m, wall = timed(replay_scan, *args)
    return result(out, m, policy.name, budget, demand_fetch, wall)
