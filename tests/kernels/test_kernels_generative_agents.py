"""The ``generative_agents`` kernel replays Generative Agents exactly like the reference."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from memlens.policies.generative_agents import GenerativeAgents, tfidf_csr

from memlens import testing
from memlens.kernels.generative_agents import query_arrays, query_vocabulary, vector_ids
from memlens.kernels.scantree import _relevance
from memlens.policy import kernel_of
from memlens.simulator import MoveKind, simulate
from memlens.testing import random_events
from memlens.trace.io import trace_from_events

# gaps between events: clocks that stand still (ties), tick, and jump by minutes and hours
GAPS = [0.0, 0.0, 1.0, 7.0, 600.0, 3600.0 * 5]


def timed_events(rng: np.random.Generator, n_events: int, n_streams: int, alternatives: bool):
    return testing.timed_events(rng, n_events, n_streams, alternatives, GAPS)


assert_same = testing.assert_kernel_matches


#: request texts of ``repeated_queries``: the first two have the same TF-IDF vector (the same
#: words in another order), so the kernel's "same query, nothing to re-score" path is taken
QUERY_POOL = ["refund flight", "flight refund", "error answer", ""]


def repeated_queries(events: list[dict], rng: np.random.Generator) -> list[dict]:
    """``events`` with every request's text drawn from ``QUERY_POOL`` (mostly its first two)."""
    for ev in events:
        if ev["event"] == "request":
            ev["text"] = QUERY_POOL[int(rng.choice(4, p=[0.4, 0.4, 0.15, 0.05]))]
    return events


#: The drawn trace shape and run of every differential test here.
STREAM_CASE = dict(
    seed=st.integers(0, 2**32 - 1),
    n_events=st.integers(1, 160),
    n_streams=st.integers(1, 3),
    budget=st.sampled_from([1, 5, 20, 45, 90, 200, 1000]),
    demand_fetch=st.booleans(),
)


@pytest.mark.parametrize("recency", ["hours", "rank"])
@settings(max_examples=100, deadline=None)
@given(
    **STREAM_CASE,
    alternatives=st.booleans(),
    weights=st.sampled_from(
        [
            (1.0, 1.0, 1.0),
            (0.5, 2.0, 3.0),
            (-1.0, 1.0, 2.0),
            (1.0, 0.0, -1.0),
            (0.0, 0.0, 1.0),
            (1.0, 0.0, 0.0),
        ]
    ),  # fmt: skip
    decay=st.sampled_from([0.995, 0.99, 0.5, 1.0]),
    normalize=st.booleans(),
    repeat=st.booleans(),
    variant=st.sampled_from(["paper", "code"]),
)
def test_kernel_equals_reference(recency, seed, n_events, n_streams, budget, demand_fetch,
                                 alternatives, weights, decay, normalize, repeat, variant):  # fmt: skip
    """Recency by hours (the paper's) and by rank (the released code's), recency alone among
    the weights too."""
    rng = np.random.default_rng(seed)
    events = timed_events(rng, n_events, n_streams, alternatives)
    trace = trace_from_events(repeated_queries(events, rng) if repeat else events)
    wr, wi, wv = weights

    def make():
        return GenerativeAgents(variant=variant, w_recency=wr, w_importance=wi, w_relevance=wv,
                                recency_decay=decay, recency=recency,
                                normalize=normalize)  # fmt: skip

    assert_same(trace, make, budget, demand_fetch)


def wordy(events: list[dict], rng: np.random.Generator) -> list[dict]:
    """``events`` with long texts over a wide vocabulary: items of 1 to 45 words (so masks of
    one and two vectors, and items too long for a mask), requests of 1 to 40 (queries too long
    for ``simd.term_masks`` too)."""
    vocab = [f"w{k}" for k in range(150)]
    for ev in events:
        if ev["event"] in ("write", "request"):
            size = int(rng.choice([1, 4, 9, 20, 45] if ev["event"] == "write" else [1, 3, 9, 40]))
            ev["text"] = " ".join(rng.choice(vocab, size=size).tolist())
    return events


@settings(max_examples=40, deadline=None)
@given(
    seed=st.integers(0, 2**32 - 1),
    budget=st.sampled_from([700, 1500, 4000]),
    demand_fetch=st.booleans(),
    weights=st.sampled_from([(1.0, 1.0, 1.0), (0.5, 2.0, 3.0), (-1.0, 1.0, 2.0)]),
    decay=st.sampled_from([0.995, 1.0]),
    normalize=st.booleans(),
)
def test_kernel_equals_reference_with_many_candidates_and_long_texts(
    seed, budget, demand_fetch, weights, decay, normalize
):
    """Enough candidates per stream (budgets of 700-4000 tokens, items of 1-40) that the
    victim search and the re-scoring take ``simd``'s vector paths, and texts long enough for
    each of their fallbacks."""
    rng = np.random.default_rng(seed)
    trace = trace_from_events(wordy(timed_events(rng, 400, 1, False), rng))
    wr, wi, wv = weights

    def make():
        return GenerativeAgents(w_recency=wr, w_importance=wi, w_relevance=wv,
                                recency_decay=decay, normalize=normalize)  # fmt: skip

    assert_same(trace, make, budget, demand_fetch)


def test_relevance_is_the_class_cosine_in_its_summation_order():
    events = random_events(np.random.default_rng(4), 80, 2)
    trace = trace_from_events(events)
    policy = GenerativeAgents()
    policy.prepare(trace)
    q = query_arrays(tfidf_csr(trace))
    shared = 0
    for r, query in enumerate(policy._req_vec):
        policy._query = query
        for i in range(trace.n_items):
            assert _relevance(q, i, r) == policy.relevance(i)
            shared += policy.relevance(i) > 0
    assert shared > 100  # the texts share words: the sums are really compared
    assert _relevance(q, 0, -1) == 0.0  # before a stream's first request


def test_query_vocabulary_keeps_the_requests_terms_in_the_items_order():
    """Hand-computed: the requests have terms 9, 5 and 11, numbered 1, 0, 2 (their order);
    item 0 (terms 5, 9, 2) keeps 5 and 9 with their weights, item 2 (9, 7, 5) keeps 9, 5."""
    iptr, iterm, iw = np.array([0, 3, 3, 6]), np.array([5, 9, 2, 9, 7, 5]), np.arange(6.0)
    ptr, term, weight, qterm, size = query_vocabulary(iptr, iterm, iw, np.array([9, 5, 11]))
    assert ptr.tolist() == [0, 2, 2, 4] and term.tolist() == [0, 1, 1, 0]
    assert weight.tolist() == [0.0, 1.0, 3.0, 5.0]
    assert qterm.tolist() == [1, 0, 2] and size == 3


def test_kernel_is_registered_for_every_configuration():
    for policy in (GenerativeAgents(), GenerativeAgents(variant="code"),
                   GenerativeAgents(variant="code", recency="hours")):  # fmt: skip
        assert kernel_of(policy) == "memlens.kernels.generative_agents:replay"


@settings(max_examples=20, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), budget=st.sampled_from([700, 1500, 4000]),
       normalize=st.booleans())  # fmt: skip
def test_rank_recency_kernel_equals_reference_with_many_candidates(seed, budget, normalize):
    """Enough candidates (budgets of 700-4000 tokens) for the vector scans and a deep sort."""
    rng = np.random.default_rng(seed)
    trace = trace_from_events(wordy(timed_events(rng, 400, 1, False), rng))
    assert_same(trace, lambda: GenerativeAgents(variant="code", normalize=normalize), budget,
                demand_fetch=False)  # fmt: skip


def test_rank_recency_with_recency_alone_evicts_the_most_recent_as_the_code_does():
    """Hand-computed: weights (1, 0, 0) and the rank recency, least recent first 0.99, 0.99**2,
    ...: the most recently written or used candidate has the lowest score (the inversion)."""
    trace = trace_from_events([testing.w("a", 10, stream="s", t=0.0),
                               testing.w("b", 10, stream="s", t=1.0),
                               testing.w("c", 10, stream="s", t=2.0),
                               testing.rq("r", "a", stream="s", t=3.0),
                               testing.w("d", 10, stream="s", t=4.0)])  # fmt: skip
    policy = GenerativeAgents(variant="code", w_recency=1.0, w_importance=0.0, w_relevance=0.0)
    res = simulate(trace, policy, 30, engine="fast", progress=False)
    assert res.engine == "fast"
    names = {v: k for k, v in trace.item_index.items()}
    # at d's write the order is b, c, a, d: d, the newest, has 0.99**4, the lowest
    assert [names[i] for i in res.move_item[res.move_kind == MoveKind.EVICT].tolist()] == ["d"]
    assert (
        kernel_of(GenerativeAgents(normalize=False, w_recency=-1.0))
        == "memlens.kernels.generative_agents:replay"
    )


def csr_of(rows: list[dict]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Dict rows as CSR arrays, each row in its dict's order."""
    ptr = np.cumsum([0] + [len(r) for r in rows])
    term = np.array([k for r in rows for k in r], np.int64)
    return ptr, term, np.array([v for r in rows for v in r.values()], np.float64)


def prepared(seed: int, n_events: int):
    """A trace with repeated queries and a GenerativeAgents prepared on it (its dicts)."""
    events = repeated_queries(random_events(np.random.default_rng(seed), n_events, 2),
                              np.random.default_rng(seed + 1))  # fmt: skip
    trace = trace_from_events(events)
    policy = GenerativeAgents()
    policy.prepare(trace)
    return trace, policy


def test_tfidf_csr_holds_the_class_s_dicts_in_their_order():
    trace, policy = prepared(3, 120)
    csr = tfidf_csr(trace)
    for (ptr, term, weight), rows in ((csr[:3], policy._item_vec), (csr[3:], policy._req_vec)):
        want = csr_of(rows)
        assert np.array_equal(ptr, want[0]) and np.array_equal(term, want[1])
        assert np.array_equal(weight, want[2])


def test_vector_ids_are_equal_exactly_for_equal_vectors():
    rows = [
        {1: 0.5, 2: 0.25},
        {2: 0.25, 1: 0.5},
        {1: 0.5},
        {},
        {1: 0.5, 2: 0.25000000000000006},
        {},
    ]
    assert vector_ids(*csr_of(rows)).tolist() == [0, 0, 1, 2, 3, 2]


def test_repeated_queries_share_a_vector_id():
    trace, _ = prepared(1, 200)
    ids = vector_ids(*tfidf_csr(trace)[3:])
    by_text = {}
    for text, v in zip(trace.req_text, ids.tolist()):
        by_text.setdefault(text, v)
    # "refund flight" and "flight refund": other texts, one vector; the others differ
    assert by_text["refund flight"] == by_text["flight refund"]
    assert len({by_text["refund flight"], by_text["error answer"], by_text[""]}) == 3


# ------------------------------------------------------- relevance from the run's embeddings
#: ``meta.embedding`` vectors of ``embedded``: unit, skewed, opposite and zero ones, a few
#: repeated (so two requests share a vector and the kernel takes its "same query" path)
VECTOR_POOL = [[1.0, 0.0, 0.0, 0.0], [0.6, 0.8, 0.0, 0.0], [-1.0, 0.0, 0.0, 0.0],
               [0.1, -0.2, 0.3, -0.9], [0.5, 0.5, 0.5, 0.5], [0.0, 0.0, 0.0, 0.0],
               [3.0, 1.0, -2.0, 0.5]]  # fmt: skip


def embedded(events: list[dict], rng: np.random.Generator) -> list[dict]:
    """``events`` with a ``meta.embedding`` from ``VECTOR_POOL`` on every write and request
    (``embeddings.kind=trace``: the trace carries its own vectors)."""
    for ev in events:
        if ev["event"] in ("write", "request"):
            vector = VECTOR_POOL[int(rng.integers(len(VECTOR_POOL)))]
            ev["meta"] = {**ev.get("meta", {}), "embedding": vector}
    return events


def embedding_policy(kind: str, **kw):
    """A factory of GenerativeAgents with ``relevance=embeddings`` from the embedder ``kind``
    (as a run hands its ``embeddings:`` block over; no disk cache in tests)."""
    from memlens.retrieval.embeddings import EmbeddingsConfig

    def make():
        policy = GenerativeAgents(relevance="embeddings", **kw)
        policy.use_embeddings_settings(EmbeddingsConfig(kind=kind, dim=8, cache=False), seed=3)
        return policy

    return make


@pytest.mark.parametrize("kind", ["trace", "tfidf"])
@settings(max_examples=40, deadline=None)
@given(
    **STREAM_CASE,
    weights=st.sampled_from([(1.0, 1.0, 1.0), (0.5, 2.0, 3.0), (0.0, 0.0, 1.0), (1.0, 0.0, -1.0)]),
    normalize=st.booleans(),
    variant=st.sampled_from(["paper", "code"]),
)
def test_kernel_equals_reference_with_embedding_relevance(kind, seed, n_events, n_streams,
                                                          budget, demand_fetch, weights,
                                                          normalize, variant):  # fmt: skip
    """``relevance=embeddings``: the trace's own vectors (negative and zero ones among them)
    and the TF-IDF + SVD embedder's dense ones, event for event on both engines."""
    rng = np.random.default_rng(seed)
    events = timed_events(rng, n_events, n_streams, False)
    trace = trace_from_events(embedded(events, rng) if kind == "trace" else events)
    wr, wi, wv = weights
    make = embedding_policy(kind, variant=variant, w_recency=wr, w_importance=wi,
                            w_relevance=wv, normalize=normalize)  # fmt: skip
    assert_same(trace, make, budget, demand_fetch)


@pytest.mark.slow  # ~5 s: 15 traces of 400 events with many candidates, on both engines
@settings(max_examples=15, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), budget=st.sampled_from([700, 1500, 4000]))
def test_embedding_relevance_kernel_equals_reference_with_many_candidates(seed, budget):
    """Enough candidates for the vector scans, with dense 8-dimensional query vectors."""
    rng = np.random.default_rng(seed)
    trace = trace_from_events(wordy(timed_events(rng, 400, 1, False), rng))
    assert_same(trace, embedding_policy("tfidf"), budget, demand_fetch=False)


def test_embedding_relevance_is_the_dot_product_of_the_unit_vectors():
    """The kernel's relevance of every item to every request is the class's, and both are the
    dot product of the L2-normalised vectors (a second, numpy, computation)."""
    from memlens.retrieval.embeddings import embed_trace

    rng = np.random.default_rng(5)
    trace = trace_from_events(embedded(random_events(rng, 80, 2), rng))
    policy = embedding_policy("trace")()
    policy.prepare(trace)
    q = query_arrays(policy.relevance_csr(trace))
    emb = embed_trace(trace, policy.embeddings, policy.embeddings_seed)
    want = emb.items.astype(np.float64) @ emb.requests.astype(np.float64).T
    for r, query in enumerate(policy._req_vec):
        policy._query = query
        for i in range(trace.n_items):
            assert _relevance(q, i, r) == policy.relevance(i)
            assert policy.relevance(i) == pytest.approx(want[i, r], abs=1e-12)
    assert (want < -0.5).any() and (want > 0.5).any()  # negative cosines are compared too


def test_query_arrays_are_cached_per_relevance_source_and_embedder():
    """One trace, three sources: TF-IDF, the trace's vectors, the SVD embedder at two widths.
    Each has its own entry, and each entry holds that source's vectors."""
    from memlens.retrieval.embeddings import EmbeddingsConfig

    rng = np.random.default_rng(2)
    trace = trace_from_events(embedded(random_events(rng, 60, 1), rng))
    policies = [GenerativeAgents(), embedding_policy("trace")(), embedding_policy("tfidf")()]
    wide = GenerativeAgents(relevance="embeddings")
    wide.use_embeddings_settings(EmbeddingsConfig(kind="tfidf", dim=16, cache=False), seed=3)
    policies.append(wide)
    for p in policies:
        simulate(trace, p, 40, engine="fast", progress=False)
    cached = trace.__dict__["_memlens_ga_query_arrays"]
    keys = [(p.relevance_key(trace), False) for p in policies]  # False: int16 terms fit
    assert len(set(keys)) == 4 and set(cached) == set(keys)
    for p, key in zip(policies, keys):
        want = query_arrays(p.relevance_csr(trace))
        assert all(np.array_equal(a, b) for a, b in zip(cached[key], want))
    # the trace's vectors have 4 dimensions: no item row is longer
    assert np.diff(cached[keys[1]][0]).max() <= 4


def test_wide_terms_replay_the_same_and_the_warm_stage_compiles_them():
    """A vocabulary of 32,767 request terms or more makes the items' terms int32 instead of
    int16: the same replay (the terms are only compared), and a variant the kernel warm-up
    must compile too, or the first such replay compiles it unannounced."""
    from memlens.kernels import generative_agents as ga
    from memlens.kernels.warm import kernel_stage

    rng = np.random.default_rng(4)
    trace = trace_from_events(random_events(rng, 120, 3))
    policy = GenerativeAgents()
    # first, before this test replays anything wide itself
    kernel_stage(policy, False, 0).run()
    term_types = {str(sig[3][1]) for sig in ga.replay_scan.signatures}
    assert {"array(int16, 1d, C)", "array(int32, 1d, C)"} <= term_types
    out16, args16 = ga._arguments(policy, trace, 60, False)
    out32, args32 = ga._arguments(policy, trace, 60, False, wide=True)
    assert args16[3][1].dtype == np.int16 and args32[3][1].dtype == np.int32  # the items' terms
    moves = ga.replay_scan(*args16)
    assert moves == ga.replay_scan(*args32)
    for name in ("need_hit", "context_tokens", "pinned_tokens", "evictions", "false_evictions"):
        assert np.array_equal(getattr(out16, name), getattr(out32, name)), name
    for name in ("move_event", "move_item", "move_kind"):  # buffers: the first ``moves`` written
        assert np.array_equal(getattr(out16, name)[:moves], getattr(out32, name)[:moves]), name
    assert out16.evictions.sum() > 0 and out16.need_hit.any()  # a replay with decisions to compare


def _ids_by_sets(ptr, term, weight) -> list[int]:
    """The definition: a frozenset of (term, weight) pairs per row, ids by first appearance."""
    ids: dict[frozenset, int] = {}
    t, w, p = term.tolist(), weight.tolist(), ptr.tolist()
    return [ids.setdefault(frozenset(zip(t[a:b], w[a:b])), len(ids)) for a, b in zip(p[:-1], p[1:])]


@given(rows=st.lists(st.lists(st.tuples(st.integers(0, 3),
                                        st.sampled_from([0.5, 0.25, -0.0, 0.0, math.nan])),
                              max_size=4), max_size=12))  # fmt: skip
def test_vector_ids_equal_one_set_per_row(rows):
    """Against the definition, on rows that repeat, reorder, repeat a pair, hold -0.0 and 0.0
    (equal numbers, other bits) or NaN (equal to nothing)."""
    ptr = np.concatenate([[0], np.cumsum([len(r) for r in rows])]).astype(np.int64)
    term = np.array([t for r in rows for t, _ in r], np.int64)
    weight = np.array([w for r in rows for _, w in r], np.float64)
    assert vector_ids(ptr, term, weight).tolist() == _ids_by_sets(ptr, term, weight)


@given(rows=st.lists(st.dictionaries(st.integers(0, 5), st.sampled_from([0.5, 0.25, 0.125, 0.0]),
                                     max_size=4), max_size=12))  # fmt: skip
def test_vector_ids_of_distinct_terms_need_no_sets(rows):
    """Rows of distinct terms (TF-IDF's shape) are told apart by their pairs in term order,
    with the same ids as one set per row, and no set is made."""
    import memlens.kernels.generative_agents as ga

    ptr, term, weight = csr_of(rows)
    want = _ids_by_sets(ptr, term, weight)
    made = ga._ids_of_sets
    ga._ids_of_sets = None  # (a call would fail)
    try:
        assert vector_ids(ptr, term, weight).tolist() == want
    finally:
        ga._ids_of_sets = made


def test_a_hash_collision_only_costs_a_set(monkeypatch):
    """Rows a colliding hash groups together are told apart by the element check."""
    import memlens.kernels.generative_agents as ga

    monkeypatch.setattr(ga, "_mixed", lambda x: np.zeros_like(x))  # every row one hash
    ptr = np.array([0, 2, 4, 6, 6], np.int64)
    term = np.array([1, 2, 2, 1, 1, 3], np.int64)
    weight = np.array([0.5, 0.25, 0.25, 0.5, 0.5, 0.25])
    assert vector_ids(ptr, term, weight).tolist() == _ids_by_sets(ptr, term, weight) == [0, 0, 1, 2]
