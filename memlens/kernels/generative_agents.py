"""The ``generative_agents`` kernel: Generative Agents' retrieval score, compiled.

The class (``policies/generative_agents.py``) evicts the lowest ``w_r * recency + w_i *
importance + w_v * relevance``, each component min-max normalised over the candidates, the
relevance being the TF-IDF cosine with the stream's latest request.  The bound tree of
``memlens.kernels.scantree`` keeps per node the minimum and the maximum of the three components,
so the roots give the normalisation ranges of a victim choice (the class's ``max - min``, the
same subtraction) and, with the weights of that choice fixed, the score at a node's minima
(maxima for a negative weight) bounds the items below it.  The TF-IDF vectors are the class's
own (``tfidf_rows``), laid out as CSR arrays in the class's dict order so every cosine is summed
in the same order.

Recency follows the leaf order but importance does not, so a node mixing an old unimportant
item with a new important one has a bound far below both; each stream therefore has
``N_GROUPS`` trees, one per sixteenth of the trace's importances (``importance_groups``),
searched together.  On the benchmark trace at budget 65536 (about 500 items held) that cut the
nodes a victim choice visits about fourfold (4 or 64 groups did less well).

Cost, said plainly: every request sets a new query, and the class re-scores the relevance of
every candidate.  The kernel skips that when the request's TF-IDF vector equals the previous
request's (``vector_ids``; most requests of the benchmark trace repeat the previous query), and
otherwise also passes over every candidate of the stream (reading only the terms of each item):
O(items held x terms per item), each changed relevance an O(log n) update of two tree
components (``scantree._restore_relevance``).  Only the items sharing a term with the request
can get a non-zero relevance, but on the benchmark trace about 40% of the items held share one,
and an inverted index over the candidates' terms, tried, was slower: its upkeep at every
insert and eviction cost more than the cosines it skipped.
"""

from __future__ import annotations

import numpy as np

from memlens.kernels.common import result, timed
from memlens.kernels.scantree import GENERATIVE_AGENTS, replay_scan, scan_arguments
from memlens.trace import Trace

#: every component stored twice in the tree: its minimum, and its maximum as a negated minimum
_CSR_KEY = "_memlens_tfidf_csr"
STORE = [(0, 1.0), (1, 1.0), (2, 1.0), (0, -1.0), (1, -1.0), (2, -1.0)]
#: the bound tree's importance groups per stream (``importance_groups``)
N_GROUPS = 16


def query_arrays(csr: tuple[np.ndarray, ...]) -> tuple[np.ndarray, ...]:
    """The relevance arrays of ``scantree._relevance``: items' and requests' CSR vectors
    (``tfidf_csr``), and the scratch of the loaded query (term marks, dense weights, which
    request is loaded)."""
    iptr, iterm, iw, qptr, qterm, qw = csr
    vocab = int(max(iterm.max(initial=-1), qterm.max(initial=-1))) + 1
    return (iptr, iterm, iw, qptr, qterm, qw, np.full(max(vocab, 1), -1, np.int64),
            np.zeros(max(vocab, 1)), np.full(1, -1, np.int64),
            vector_ids(qptr, qterm, qw))  # fmt: skip


def vector_ids(ptr: np.ndarray, term: np.ndarray, weight: np.ndarray) -> np.ndarray:
    """Per CSR row the id of its vector: equal ids exactly when the rows hold the same
    (term, weight) pairs (bit-equal weights), so one query's relevances hold for the other."""
    ids: dict[frozenset, int] = {}
    t, w, p = term.tolist(), weight.tolist(), ptr.tolist()
    return np.array([ids.setdefault(frozenset(zip(t[a:b], w[a:b])), len(ids))
                     for a, b in zip(p[:-1], p[1:])], np.int64)  # fmt: skip


def _trace_query_arrays(trace: Trace):
    """:func:`query_arrays` of the trace's TF-IDF vectors (the class's ``tfidf_rows`` as CSR
    arrays, ``tfidf_csr``), the CSR part cached on the trace; the scratch arrays are fresh for
    every replay."""
    from memlens.policies.generative_agents import tfidf_csr

    cached = trace.__dict__.get(_CSR_KEY)
    if cached is None:
        cached = trace.__dict__[_CSR_KEY] = query_arrays(tfidf_csr(trace))
    q = cached
    scratch = (np.full(q[6].shape[0], -1, np.int64), np.zeros(q[7].shape[0]),
               np.full(1, -1, np.int64))  # fmt: skip
    return q[:6] + scratch + (q[9],)


def importance_groups(importance: np.ndarray, n_groups: int) -> np.ndarray:
    """Every item's group in the bound tree: which of ``n_groups`` quantile ranges of the
    trace's importances its importance falls in (equal importances share a group).  Any
    grouping gives the same victims; this one only makes the bounds tight, so the quantiles
    are those of a regular sample of at most 65536 items (sorting a million importances took
    0.13 s, a tenth of a replay)."""
    if importance.shape[0] == 0 or n_groups == 1:
        return np.zeros(importance.shape[0], np.int64)
    sample = importance[:: max(1, importance.shape[0] // 65536)]
    cuts = np.quantile(sample, np.arange(1, n_groups) / n_groups)
    return np.searchsorted(cuts, importance, side="right").astype(np.int64)


def _arguments(policy, trace: Trace, budget: int, demand_fetch: bool):
    from memlens.policies.generative_agents import importance

    X = np.zeros((3, trace.n_items))
    X[1] = np.asarray(importance(trace, policy), np.float64)  # the class's own
    t0 = np.array([float(trace.ev_t[ev[0]]) if len(ev) else 0.0 for ev in trace.stream_events])
    pol = [policy.w_recency, policy.w_importance, policy.w_relevance, policy.log_decay_per_s,
           1.0 if policy.normalize else 0.0]  # fmt: skip
    return scan_arguments(trace, budget, demand_fetch, GENERATIVE_AGENTS, pol, X, STORE,
                          query=_trace_query_arrays(trace),
                          t0=t0, group=importance_groups(X[1], N_GROUPS),
                          n_groups=N_GROUPS)  # fmt: skip


def replay(policy, trace: Trace, budget: int, demand_fetch: bool, seed: int):
    """The ``generative_agents`` kernel (``memlens.policy.KERNELS``): the reference result."""
    if not replay_scan.signatures:  # compile (or load from the cache) outside the timed region
        from memlens.testing import trace as tiny
        from memlens.testing import w

        replay_scan(*_arguments(policy, tiny(w("a", 1)), 1, False)[1])
    out, args = _arguments(policy, trace, budget, demand_fetch)
    m, wall = timed(replay_scan, *args)
    return result(out, m, policy.name, budget, demand_fetch, wall)
