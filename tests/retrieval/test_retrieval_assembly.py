"""Context assembly on hand-made traces: known answers, pre-filter, rerank, budget, promotion,
prefetch.

Most traces carry their own 2-d vectors (``meta.embedding``), so every similarity is known by
hand; the WM budget is tiny and the short-term cache has no room, so what leaves working memory
is in the long-term store (hnswlib; ``exact_below=0`` forces the graph search).
"""

from __future__ import annotations

import numpy as np
import pytest
from helpers import rq, trace, w
from hypothesis import given, settings
from hypothesis import strategies as st
from memlens.policies.lru import LRU
from memlens.policies.window import SlidingWindow

from memlens.analyze.metrics import compute_metrics
from memlens.retrieval.config import (
    FilterConfig,
    HnswConfig,
    QueryConfig,
    RerankConfig,
    RetrievalConfig,
)
from memlens.retrieval.embeddings import EmbeddingsConfig, embed_trace
from memlens.retrieval.setup import make_retriever, replay_with_retrieval
from memlens.retrieval.tiers import TiersConfig
from memlens.trace.model import ITEM_TYPES

E1, E2, E12 = [1.0, 0.0], [0.0, 1.0], [0.6, 0.8]


def iw(ident, vec, tokens=4, type_="llm_thought", **kw):
    return w(ident, tokens, type_=type_, meta={"embedding": vec, **kw.pop("meta", {})}, **kw)


def ir(ident, vec, *needs, **kw):
    return rq(ident, *needs, meta={"embedding": vec, **kw.pop("meta", {})}, **kw)


NO_STC = TiersConfig(short_term_tokens=0)  # what leaves working memory is in the LTS
GRAPH = HnswConfig(exact_below=0)  # always the hnswlib graph search
TRACE_VECTORS = EmbeddingsConfig(kind="trace", cache=False)


def rerank(**w):
    """Rerank weights: similarity only unless told otherwise."""
    return RerankConfig(**{"value": 0.0, "freshness": 0.0, **w})


def run(tr, wm=4, policy=None, ccfg=None, live=None, **rc):
    """Replay at WM budget ``wm`` with retrieval settings ``rc`` (``RetrievalConfig`` fields;
    by default no short-term cache, graph search and similarity-only rerank)."""
    cfg = RetrievalConfig(enabled=True, **{"hnsw": GRAPH, "rerank": rerank(), **rc})
    ret = make_retriever(tr, cfg, embed_trace(tr, TRACE_VECTORS), ccfg, tiers=NO_STC)
    return replay_with_retrieval(tr, policy or SlidingWindow(), wm, ret, live=live)


def got(tr, rec, r=0):
    lo, hi = rec.ret_ptr[r], rec.ret_ptr[r + 1]
    return [tr.item_id[i] for i in rec.ret_item[lo:hi].tolist()]


def test_known_answer_with_tfidf_embeddings():
    """The default embedder finds the one item that shares the request's words."""
    facts = [
        "the flight to Lisbon departs at nine from gate twelve",
        "database migration failed with a lock timeout on orders",
        "invoice refund approved for the damaged blender",
        "user prefers vegetarian meals and aisle seats",
        "the quarterly revenue chart is in the shared drive",
    ]
    filler = [f"thinking about step {k} of the plan and what to do next" for k in range(12)]
    events = [w(f"f{n}", 40, text=t) for n, t in enumerate(facts)]
    events += [w(f"x{k}", 40, text=t) for k, t in enumerate(filler)]
    events += [rq("q", "f0", text="when does my flight to Lisbon depart")]
    events += [rq("q2", "f3", text="which seats and meals does the user prefer")]
    tr = trace(*events)
    cfg = RetrievalConfig(enabled=True, budget=40, k=3, hnsw=GRAPH)
    emb = embed_trace(tr, EmbeddingsConfig(cache=False, dim=8))
    ret = make_retriever(tr, cfg, emb, tiers=NO_STC)
    res, rec = replay_with_retrieval(tr, SlidingWindow(), 80, ret)
    assert res.need_hit.tolist() == [0, 0]  # long gone from working memory
    assert got(tr, rec, 0) == ["f0"] and got(tr, rec, 1) == ["f3"]
    m = compute_metrics(tr, res, retrieval=rec)["overall"]
    assert m["hit_rate"] == 0.0 and m["context_recall"] == 1.0
    assert m["retrieval_precision"] == 1.0
    assert m["mean_context_tokens_total"] == m["mean_context_tokens"] + 40


def test_retrieval_off_metrics_equal_working_memory_figures():
    tr = trace(iw("a", E1), iw("b", E2), iw("c", E1), ir("r", E1, "a", "c"))
    from memlens.simulator import simulate

    res = simulate(tr, LRU(), 8)
    m = compute_metrics(tr, res)["overall"]
    assert m["context_recall"] == m["hit_rate"] == 0.5
    assert m["mean_context_tokens_total"] == m["mean_context_tokens"] == 8
    assert m["cost_usd_total"] == m["cost_usd"]


def test_stream_is_always_a_prefilter():
    tr = trace(
        iw("mine", E12, stream="s"), iw("other", E1, stream="t"),
        iw("fill_s", E2, stream="s"), iw("fill_t", E2, stream="t"),
        ir("r", E1, "mine", stream="s"),
    )  # fmt: skip
    _, rec = run(tr, k=5, budget=4)  # "other" is more similar, but in another stream
    assert got(tr, rec) == ["mine"]


@pytest.mark.parametrize(
    "flt, expected",
    [
        (FilterConfig(), "best"),  # no optional filter: the most similar
        (FilterConfig(same_task=True), "task_b"),  # the request's task is B (meta.task)
        (FilterConfig(types=["user_input"]), "user"),
        (FilterConfig(max_age_s=15.0), "recent"),  # request at t=100: written at t >= 85
    ],
)
def test_optional_prefilters(flt, expected):
    tr = trace(
        iw("best", [1.0, 0.0], task="A", t=0),
        iw("task_b", [0.9, 0.436], task="B", t=1),
        iw("user", [0.8, 0.6], type_="user_input", task="A", t=2),
        iw("recent", [0.7, 0.714], task="A", t=90),
        iw("fill", E2, task="A", t=95),
        ir("r", E1, "best", t=100, meta={"task": "B"}),
    )  # fmt: skip
    _, rec = run(tr, k=1, filter=flt)
    assert got(tr, rec) == [expected]


def test_prefilter_runs_before_the_vector_search():
    """Top-k then filter would return nothing here (the 3 nearest are all the wrong type);
    filtering first returns k eligible items, through the hnswlib filter callable."""
    rng = np.random.default_rng(0)
    events = []
    for n in range(60):  # near the query: llm_thought; far from it: tool_result
        near = n < 30
        v = [1.0, float(rng.uniform(0, 0.2))] if near else [float(rng.uniform(0, 0.3)), 1.0]
        events.append(iw(f"i{n}", v, type_="llm_thought" if near else "tool_result"))
    events.append(iw("fill", E2))
    events.append(ir("r", E1, "i40"))
    tr = trace(*events)
    _, plain = run(tr, k=3)
    thought, tool = ITEM_TYPES.index("llm_thought"), ITEM_TYPES.index("tool_result")
    assert all(tr.item_type[i] == thought for i in plain.ret_item)
    _, rec = run(tr, k=3, filter=FilterConfig(types=["tool_result"]))
    items = rec.ret_item.tolist()
    assert len(items) == 3 and all(tr.item_type[i] == tool for i in items)
    assert rec.index_queries == 1 and rec.exact_queries == 0  # hnswlib with the filter callable
    # the same three an exact filtered search finds
    vecs = np.asarray([e["meta"]["embedding"] for e in events[:60]])
    sims = vecs[30:] @ np.asarray(E1) / np.linalg.norm(vecs[30:], axis=1)
    assert sorted(items) == sorted((30 + np.argsort(-sims)[:3]).tolist())


def test_rerank_value_and_freshness():
    tr = trace(
        iw("thought", E1, t=0), iw("said", E1, type_="user_input", t=0),
        iw("new_thought", E1, t=3600), iw("fill", E2, t=3600),
        ir("r", E1, "said", t=3600),
    )  # fmt: skip
    _, tie = run(tr, k=3, budget=4)  # equal similarity: lower index first
    assert got(tr, tie) == ["thought"]
    _, by_value = run(tr, k=3, budget=4, rerank=rerank(value=1.0))  # user_input 0.7 > thought 0.4
    assert got(tr, by_value) == ["said"]
    fresh = rerank(freshness=1.0, freshness_half_life_s=600.0)
    _, by_fresh = run(tr, k=3, budget=4, rerank=fresh)
    assert got(tr, by_fresh) == ["new_thought"]


def test_budget_caps_retrieved_tokens_skipping_what_does_not_fit():
    tr = trace(
        iw("big", E1, tokens=300), iw("mid", [0.9, 0.436], tokens=200),
        iw("small", [0.8, 0.6], tokens=60), iw("fill", E2, tokens=4),
        ir("r", E1, "small"),
    )  # fmt: skip
    _, rec = run(tr, k=3, budget=250)
    assert got(tr, rec) == ["mid"]  # big does not fit; mid does; small no longer does
    assert rec.retrieved_tokens.tolist() == [200]
    _, rec = run(tr, k=3, budget=260)
    assert got(tr, rec) == ["mid", "small"] and rec.retrieved_tokens.tolist() == [260]


def test_min_similarity_drops_weak_candidates():
    tr = trace(iw("a", E12), iw("fill", E2), ir("r", E1, "a"))
    _, rec = run(tr, k=3, min_similarity=0.7)
    assert got(tr, rec) == []  # cos(a, q) = 0.6, fill 0.0
    _, rec = run(tr, k=3, min_similarity=0.5)
    assert got(tr, rec) == ["a"]


def test_promotion_brings_items_into_working_memory():
    tr = trace(iw("a", E1), iw("b", E2), ir("r1", E1, "a"), ir("r2", E2, "a"))
    res, rec = run(tr, k=1, promote=True)
    assert res.need_hit.tolist() == [0, 1]  # r1 retrieved and promoted a; r2 hits it in WM
    assert rec.need_ctx.tolist() == [1, 1] and rec.promoted >= 1
    assert res.extra.get("outside_oracle_class") is True
    res0, _ = run(tr, k=1, promote=False)
    assert res0.need_hit.tolist() == [0, 0] and not res0.extra.get("outside_oracle_class")


def test_prefetch_serves_from_the_previous_request():
    tr = trace(
        iw("a", E1), iw("b", E2), iw("fill", [0.7, -0.714]),
        ir("r1", E1, "a"),  # nothing prefetched yet: not served
        ir("r2", E2, "a"),  # gets r1's set {a}: served
        ir("r3", E1, "a"),  # gets r2's set {b}: not served
    )  # fmt: skip
    _, rec = run(tr, k=1, prefetch=True)
    assert [got(tr, rec, r) for r in range(3)] == [[], ["a"], ["b"]]
    assert rec.prefetch_served.tolist() == [0, 1, 0]
    assert rec.modeled_ms.tolist() == [0.0, 0.0, 0.0]  # latency hidden
    from memlens.simulator import simulate

    m = compute_metrics(tr, simulate(tr, SlidingWindow(), 4), retrieval=rec)["overall"]
    assert m["prefetch_served_share"] == pytest.approx(1 / 3)
    assert m["context_recall"] == pytest.approx(1 / 3)


def test_modeled_latency_counts_tiers_searched():
    tr = trace(iw("a", E1), iw("b", E2), ir("r", E1, "a"))
    _, rec = run(tr, k=1)
    assert rec.modeled_ms.tolist() == [21.0]  # STC 1 ms + LTS 20 ms


def test_same_config_same_numbers(tmp_path):
    from memlens.trace.generate import generate_simple
    from memlens.trace.io import trace_from_events

    tr = trace_from_events(generate_simple(seed=3, streams=2, events_per_stream=300))
    outs = []
    for _ in range(2):
        cfg = RetrievalConfig(enabled=True, budget=256, k=6, hnsw=GRAPH)
        emb = embed_trace(tr, EmbeddingsConfig(cache=True, cache_dir=str(tmp_path), dim=16))
        ret = make_retriever(tr, cfg, emb, tiers=TiersConfig(short_term_tokens=512))
        res, rec = replay_with_retrieval(tr, LRU(), 512, ret)
        m = compute_metrics(tr, res, retrieval=rec)
        outs.append((m["overall"], rec.ret_item.tolist()))
    assert outs[0] == outs[1]
    assert len(list(tmp_path.glob("*.npz"))) == 1  # second run read the cache


@settings(max_examples=25)
@given(
    seed=st.integers(0, 10_000),
    wm=st.sampled_from([200, 600, 1500]),
    budget=st.sampled_from([0, 50, 300, 900]),
    stc=st.sampled_from([0, 300, 2000]),
    promote=st.booleans(),
    prefetch=st.booleans(),
    types=st.sampled_from([None, ["user_input", "tool_result"]]),
    strategy=st.sampled_from(["none", "summary", "entities", "pointer"]),
)
def test_invariants_on_random_traces(seed, wm, budget, stc, promote, prefetch, types, strategy):
    """Whatever the settings: retrieved tokens fit the budget, retrieved items come from the
    request's stream, pass the pre-filter and were not in WM, and the assembled context holds
    at least what WM held."""
    from memlens.retrieval.compression import CompressionConfig
    from memlens.retrieval.embeddings import Embeddings
    from memlens.trace.generate import generate_simple
    from memlens.trace.io import trace_from_events

    tr = trace_from_events(generate_simple(seed=seed, streams=2, events_per_stream=80))
    rng = np.random.default_rng(seed)
    vi = rng.standard_normal((tr.n_items, 4)).astype(np.float32)
    vr = rng.standard_normal((tr.n_requests, 4)).astype(np.float32)
    emb = Embeddings(vi / np.linalg.norm(vi, axis=1, keepdims=True),
                     vr / np.linalg.norm(vr, axis=1, keepdims=True), "random")  # fmt: skip
    cfg = RetrievalConfig(enabled=True, budget=budget, k=5, promote=promote, prefetch=prefetch,
                          filter=FilterConfig(types=types), hnsw=HnswConfig(exact_below=3))  # fmt: skip
    tiers = TiersConfig(short_term_tokens=stc)
    ret = make_retriever(tr, cfg, emb, CompressionConfig(default=strategy), tiers=tiers)
    res, rec = replay_with_retrieval(tr, LRU(), wm, ret)
    assert (rec.retrieved_tokens <= budget).all()
    ptr = rec.ret_ptr.tolist()
    for r in range(tr.n_requests):
        assert rec.retrieved_tokens[r] == rec.ret_tokens[ptr[r] : ptr[r + 1]].sum()
        # a retrieved item the request needed was not a WM hit (retrieval never duplicates WM)
        lo, hi = int(tr.needs_ptr[r]), int(tr.needs_ptr[r + 1])
        hit_items = {int(tr.needs[j]) for j in range(lo, hi) if res.need_hit[j]}
        assert not hit_items & set(rec.ret_item[ptr[r] : ptr[r + 1]].tolist())
    req_of = np.repeat(np.arange(tr.n_requests), np.diff(rec.ret_ptr))
    assert (tr.item_stream[rec.ret_item] == tr.req_stream[req_of]).all()
    if types:
        codes = [ITEM_TYPES.index(t) for t in types]
        assert np.isin(tr.item_type[rec.ret_item], codes).all()
    assert (rec.need_ctx >= res.need_hit).all()  # WM hits are in the context
    assert not (rec.need_ctx.astype(bool) & rec.need_lost.astype(bool)).any()
    if strategy in ("none", "pointer"):
        assert rec.need_lost.sum() == 0
    assert bool(res.extra.get("outside_oracle_class")) == promote


def test_query_enrichment_with_goal_and_last_action():
    from memlens.retrieval.query import plan_requests

    tr = trace(
        iw("goal", [0.0, 1.0], type_="user_input", task="T"),  # the task's first user input
        iw("target", [0.6, 0.8], task="T"),
        iw("other", [1.0, 0.0], task="T"),
        iw("fill", [-1.0, 0.0], task="T"),  # the last write before the request
        ir("r", [1.0, 0.0], "target"),
    )  # fmt: skip
    plan = plan_requests(tr)
    assert plan.task == ["T"] and plan.goal_item.tolist() == [0] and plan.last_item.tolist() == [3]
    _, plain = run(tr, k=1, budget=4)
    assert got(tr, plain) == ["other"]  # the request text alone points at "other"
    # query (1, 1)/sqrt(2): target wins
    _, enriched = run(tr, k=1, budget=4, query=QueryConfig(goal_weight=1.0))
    assert got(tr, enriched) == ["target"]


@pytest.mark.parametrize(
    "make, key",
    [
        (lambda: RetrievalConfig(k=-1), "retrieval.k"),
        (lambda: RetrievalConfig(budget=-5), "retrieval.budget"),
        (lambda: FilterConfig(types=["thought"]), "retrieval.filter.types"),
        (lambda: FilterConfig(max_age_s=-1.0), "retrieval.filter.max_age_s"),
        (lambda: RerankConfig(freshness_half_life_s=0.0), "retrieval.rerank.freshness_half_life_s"),
        (lambda: HnswConfig(M=1), "retrieval.hnsw.M"),
        (lambda: HnswConfig(ef_construction=0), "retrieval.hnsw.ef_construction"),
        (lambda: HnswConfig(ef_search=0), "retrieval.hnsw.ef_search"),
        (lambda: TiersConfig(ttl_s=-1.0), "tiers.ttl_s"),
        (lambda: TiersConfig(short_term_tokens=-1), "tiers.short_term_tokens"),
        (lambda: TiersConfig(short_term_policy="lfu"), "tiers.short_term_policy"),
        (lambda: TiersConfig(long_term_latency_ms=-1.0), "tiers.long_term_latency_ms"),
    ],
)
def test_bad_settings_are_rejected_naming_the_key(make, key):
    with pytest.raises(ValueError, match=key.replace(".", r"\.")):
        make()
