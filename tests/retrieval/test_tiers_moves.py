"""Every tier move on hand-made traces, post hoc and live, and the two drivers agreeing.

Moves are written as (item, from, to).  Working memory (WM) budget 10, every small item 4
tokens, short-term cache (STC) 8 tokens (two items), window policy unless said otherwise.
"""

from __future__ import annotations

import numpy as np
import pytest
from helpers import pin, rq, trace, w
from memlens.policies.lru import LRU
from memlens.policies.window import SlidingWindow

from memlens.retrieval.config import HnswConfig, RetrievalConfig
from memlens.retrieval.embeddings import Embeddings
from memlens.retrieval.setup import make_retriever, replay_with_retrieval
from memlens.retrieval.tiers import TIER_NAMES, TiersConfig, replay_tiers
from memlens.simulator import simulate
from memlens.trace.generate import generate_simple
from memlens.trace.io import trace_from_events


def moves(tr, log) -> list[tuple[str, str, str]]:
    return [
        (tr.item_id[i], TIER_NAMES[a], TIER_NAMES[b])
        for i, a, b in zip(log.item.tolist(), log.src.tolist(), log.dst.tolist())
    ]


def zero_emb(tr, dim: int = 2) -> Embeddings:
    return Embeddings(
        np.zeros((tr.n_items, dim), np.float32), np.zeros((tr.n_requests, dim), np.float32), "test"
    )


def post_hoc(tr, policy, budget=10, stc=8, ttl=None, demand_fetch=False):
    res = simulate(tr, policy, budget, demand_fetch=demand_fetch, engine="reference")
    return res, replay_tiers(tr, res, stc, ttl)


def live(tr, policy, budget=10, stc=8, ttl=None, demand_fetch=False, **rcfg):
    """The live driver with a retriever that brings nothing back (k=0) unless told otherwise."""
    cfg = RetrievalConfig(enabled=True, **{"k": 0, **rcfg})
    ret = make_retriever(tr, cfg, zero_emb(tr), tiers=TiersConfig(short_term_tokens=stc, ttl_s=ttl))
    res, rec = replay_with_retrieval(tr, policy, budget, ret, demand_fetch=demand_fetch, live=True)
    return res, rec.tiers


CASCADE = trace(
    w("a", 4), w("b", 4),
    w("c", 4),  # WM 12 > 10: a -> STC
    w("d", 4),  # b -> STC (STC a,b = 8)
    w("e", 4),  # c -> STC: 12 > 8, the oldest (a) -> LTS
    rq("r", "e"),
)  # fmt: skip
CASCADE_MOVES = [
    ("a", "new", "wm"), ("b", "new", "wm"),
    ("c", "new", "wm"), ("a", "wm", "stc"),
    ("d", "new", "wm"), ("b", "wm", "stc"),
    ("e", "new", "wm"), ("c", "wm", "stc"), ("a", "stc", "lts"),
]  # fmt: skip


@pytest.mark.parametrize("driver", [post_hoc, live])
def test_wm_to_stc_to_lts_cascade(driver):
    _, log = driver(CASCADE, SlidingWindow())
    assert moves(CASCADE, log) == CASCADE_MOVES
    assert [TIER_NAMES[t] for t in log.final_tier.tolist()] == ["lts", "stc", "stc", "wm", "wm"]


@pytest.mark.parametrize("driver", [post_hoc, live])
def test_oversized_writes_bypass(driver):
    # 11 > WM budget: bypass to the STC; 9 > STC capacity too: straight to the LTS
    tr = trace(w("small", 4), w("mid", 11, type_="tool_result"), w("huge", 12), rq("r", "small"))
    _, log = driver(tr, SlidingWindow(), stc=11)
    assert moves(tr, log) == [("small", "new", "wm"), ("mid", "new", "stc"), ("huge", "new", "lts")]


@pytest.mark.parametrize("driver", [post_hoc, live])
def test_demand_fetch_from_stc_and_lts(driver):
    tr = trace(
        w("a", 4), w("b", 4), w("c", 4), w("d", 4), w("e", 4),  # as CASCADE: a in LTS, b in STC
        rq("r1", "b", "a"),  # both missed; demand fetch brings b (STC) then a (LTS) back
    )  # fmt: skip
    _, log = driver(tr, SlidingWindow(), demand_fetch=True)
    got = moves(tr, log)[len(CASCADE_MOVES) :]
    # b back (WM d,e,b = 12 > 10: d out; STC c,d = 8), a back (e out; STC c,d,e: c to LTS)
    assert got == [
        ("b", "stc", "wm"), ("d", "wm", "stc"),
        ("a", "lts", "wm"), ("e", "wm", "stc"), ("c", "stc", "lts"),
    ]  # fmt: skip


@pytest.mark.parametrize("driver", [post_hoc, live])
def test_pin_pulls_from_lts(driver):
    tr = trace(w("a", 4), w("b", 4), w("c", 4), w("d", 4), w("e", 4), pin("a"), rq("r", "a"))
    res, log = driver(tr, LRU())
    assert moves(tr, log)[len(CASCADE_MOVES)] == ("a", "lts", "wm")
    assert res.need_hit.tolist() == [1]


@pytest.mark.parametrize("driver", [post_hoc, live])
def test_ttl_expires_at_the_next_request(driver):
    tr = trace(
        w("a", 4, t=0), w("b", 4, t=1), w("c", 4, t=2),  # a -> STC at t=2
        rq("r1", "c", t=5),  # a has been in the STC 3 s: stays (ttl 4)
        rq("r2", "c", t=7),  # 5 s > 4: a -> LTS, stamped with r2's event
    )  # fmt: skip
    _, log = driver(tr, SlidingWindow(), ttl=4.0)
    assert moves(tr, log)[-1] == ("a", "stc", "lts")
    assert log.event[-1] == 4  # r2 is event 4


def test_retrieval_refreshes_stc_lru_order():
    """An STC item that retrieval used is the newest: the other one overflows first."""
    tr = trace(
        w("a", 4, meta={"embedding": [1, 0]}), w("b", 4, meta={"embedding": [0, 1]}),
        w("c", 4, meta={"embedding": [0, 1]}),  # a -> STC
        w("d", 4, meta={"embedding": [0, 1]}),  # b -> STC (a, b)
        rq("r", "d", meta={"embedding": [1, 0]}),  # retrieves a (sim 1 > 0.5): STC order b, a
        w("e", 4, meta={"embedding": [0, 1]}),  # c -> STC: overflow evicts the oldest
    )  # fmt: skip
    from memlens.retrieval.embeddings import EmbeddingsConfig, embed_trace

    emb = embed_trace(tr, EmbeddingsConfig(kind="trace", cache=False))
    out = {}
    for policy in ("lru", "fifo"):
        cfg = RetrievalConfig(enabled=True, budget=4, k=1)
        tiers = TiersConfig(short_term_tokens=8, short_term_policy=policy)
        ret = make_retriever(tr, cfg, emb, tiers=tiers)
        _, rec = replay_with_retrieval(tr, SlidingWindow(), 10, ret)
        assert [tr.item_id[i] for i in rec.ret_item] == ["a"]
        out[policy] = moves(tr, rec.tiers)[-1]
    assert out == {"lru": ("b", "stc", "lts"), "fifo": ("a", "stc", "lts")}


def _random_trace(seed: int):
    events = list(
        generate_simple(seed=seed, streams=3, events_per_stream=120, pin_rate=0.03, max_pins=2)
    )
    return trace_from_events(events)


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("ttl", [None, 60.0])
def test_live_and_post_hoc_drivers_agree(seed, ttl):
    """Without promotion, retrieval inside the replay == retrieval over the finished move log,
    and the tier log equals the plain post-hoc tier replay (retrieval off: nothing refreshed)."""
    tr = _random_trace(seed)
    rng = np.random.default_rng(seed)
    emb = Embeddings(
        rng.standard_normal((tr.n_items, 8)).astype(np.float32),
        rng.standard_normal((tr.n_requests, 8)).astype(np.float32),
        "random",
    )
    emb.items /= np.linalg.norm(emb.items, axis=1, keepdims=True)
    emb.requests /= np.linalg.norm(emb.requests, axis=1, keepdims=True)
    for demand_fetch in (False, True):
        recs = []
        for is_live in (False, True):
            cfg = RetrievalConfig(enabled=True, budget=300, k=4, hnsw=HnswConfig(exact_below=8))
            tiers = TiersConfig(short_term_tokens=400, ttl_s=ttl, short_term_policy="fifo")
            ret = make_retriever(tr, cfg, emb, tiers=tiers)
            res, rec = replay_with_retrieval(tr, LRU(), 600, ret, demand_fetch=demand_fetch,
                                             live=is_live)  # fmt: skip
            recs.append((res, rec))
        (r0, a), (r1, b) = recs
        assert np.array_equal(r0.need_hit, r1.need_hit)
        for field in ("ret_ptr", "ret_item", "ret_form", "ret_tokens", "need_ctx", "modeled_ms"):
            assert np.array_equal(getattr(a, field), getattr(b, field)), field
        for field in ("event", "item", "src", "dst", "final_tier"):
            assert np.array_equal(getattr(a.tiers, field), getattr(b.tiers, field)), field
        plain = replay_tiers(tr, r0, 400, ttl)
        assert np.array_equal(plain.item, a.tiers.item) and np.array_equal(plain.dst, a.tiers.dst)
        assert a.index_queries > 0  # the hnswlib path was exercised, not only exact scoring
