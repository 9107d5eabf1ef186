"""The ``generative_agents`` kernel: Generative Agents' retrieval score, compiled.

The class (``policies/generative_agents.py``) evicts the lowest ``w_r * recency + w_i *
importance + w_v * relevance``, each component min-max normalised over the candidates, the
relevance being the TF-IDF cosine with the stream's latest request.  The bound tree of
``memlens.kernels.scantree`` keeps per node the minimum and the maximum of the three components,
so the root gives the normalisation ranges of a victim choice (the class's ``max - min``, the
same subtraction) and, with the weights of that choice fixed, the score at a node's minima
(maxima for a negative weight) bounds the items below it.  The TF-IDF vectors are the class's
own (``tfidf_rows``), laid out as CSR arrays in the class's dict order so every cosine is summed
in the same order.

Cost, said plainly: every request sets a new query, and the class re-scores the relevance of
every candidate; so does this kernel (a compiled pass over the stream's candidates, reading
only the terms of each item), so a request costs O(items held x terms per item), and every
relevance that changes is an O(log n) tree update.  A victim choice then visits the items
whose bound does not exceed the victim's score.
"""

from __future__ import annotations

import numpy as np

from memlens.kernels.common import result, timed
from memlens.kernels.scantree import GENERATIVE_AGENTS, replay_scan, scan_arguments
from memlens.trace import Trace

#: every component stored twice in the tree: its minimum, and its maximum as a negated minimum
_CSR_KEY = "_memlens_tfidf_csr"
STORE = [(0, 1.0), (1, 1.0), (2, 1.0), (0, -1.0), (1, -1.0), (2, -1.0)]


def _csr(rows: list[dict[int, float]]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``rows`` as CSR arrays (pointer, term, weight), each row in its dict's order."""
    ptr = np.zeros(len(rows) + 1, np.int64)
    np.cumsum([len(r) for r in rows], out=ptr[1:])
    term = np.fromiter((k for r in rows for k in r), np.int64, int(ptr[-1]))
    weight = np.fromiter((v for r in rows for v in r.values()), np.float64, int(ptr[-1]))
    return ptr, term, weight


def query_arrays(item_vec: list[dict], req_vec: list[dict]) -> tuple[np.ndarray, ...]:
    """The relevance arrays of ``scantree._relevance``: items' and requests' CSR vectors, and
    the scratch of the loaded query (term marks, dense weights, which request is loaded)."""
    iptr, iterm, iw = _csr(item_vec)
    qptr, qterm, qw = _csr(req_vec)
    vocab = int(max(iterm.max(initial=-1), qterm.max(initial=-1))) + 1
    return (iptr, iterm, iw, qptr, qterm, qw, np.full(max(vocab, 1), -1, np.int64),
            np.zeros(max(vocab, 1)), np.full(1, -1, np.int64))  # fmt: skip


def _trace_query_arrays(trace: Trace, item_vec: list[dict], req_vec: list[dict]):
    """:func:`query_arrays` of the trace's TF-IDF vectors, the CSR part cached on the trace
    next to the vectors themselves (building it walks every dict: seconds on a large trace);
    the scratch arrays are fresh for every replay."""
    cached = trace.__dict__.get(_CSR_KEY)
    if cached is None or cached[0] is not item_vec:
        cached = (item_vec, query_arrays(item_vec, req_vec))
        trace.__dict__[_CSR_KEY] = cached
    q = cached[1]
    return q[:6] + (np.full(q[6].shape[0], -1, np.int64), np.zeros(q[7].shape[0]),
                    np.full(1, -1, np.int64))  # fmt: skip


def _arguments(policy, trace: Trace, budget: int, demand_fetch: bool):
    policy.prepare(trace)  # the class's importance and TF-IDF vectors (cached on the trace)
    X = np.zeros((3, trace.n_items))
    X[1] = np.asarray(policy._importance, np.float64)
    t0 = np.array([float(trace.ev_t[ev[0]]) if len(ev) else 0.0 for ev in trace.stream_events])
    pol = [policy.w_recency, policy.w_importance, policy.w_relevance, policy.log_decay_per_s,
           1.0 if policy.normalize else 0.0]  # fmt: skip
    return scan_arguments(trace, budget, demand_fetch, GENERATIVE_AGENTS, pol, X, STORE,
                          query=_trace_query_arrays(trace, policy._item_vec, policy._req_vec),
                          t0=t0)  # fmt: skip


def replay(policy, trace: Trace, budget: int, demand_fetch: bool, seed: int):
    """The ``generative_agents`` kernel (``memlens.policy.KERNELS``): the reference result."""
    if not replay_scan.signatures:  # compile (or load from the cache) outside the timed region
        from memlens.testing import trace as tiny
        from memlens.testing import w

        replay_scan(*_arguments(policy, tiny(w("a", 1)), 1, False)[1])
    out, args = _arguments(policy, trace, budget, demand_fetch)
    m, wall = timed(replay_scan, *args)
    return result(out, m, policy.name, budget, demand_fetch, wall)
