"""``context(stream, query)`` from the live session's incremental retrieval engine equals the
rebuild per call it replaced (``memlens.live.retrieval.retrieve``: the replay's own retrieval
driver over the whole session so far plus a probe request), call for call.

Sessions are hypothesis-generated (``memlens.testing.traces``: every event kind, two streams,
clocks that stand still and jump an hour), played into a manager with retrieval on under
several settings (prefetch, a TTL, a FIFO cache, a type filter and a time window, compression,
query enrichment), closed and reopened part way; before every request and at drawn points in
between, ``context`` with a query is compared with ``retrieve`` over the record so far.
Without a TTL, the rebuild must never be asked by the manager (the incremental engine answers
every call); with one, only when an expiry is due at the call.
"""

from __future__ import annotations

import orjson
import pytest
from helpers import PartWay
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import memlens.live.retrieval as live_retrieval
from memlens.live import MemoryManager
from memlens.live.retrieval import settings_from
from memlens.testing import WORDS, traces

REBUILD = live_retrieval.retrieve  # the reference: a rebuild per call
SETTINGS = [
    {},
    {"retrieval": {"prefetch": True}},
    {"tiers": {"ttl_s": 30.0}},
    {"tiers": {"short_term_policy": "fifo", "short_term_tokens": 15}},
    {"retrieval": {"filter": {"types": ["tool_result", "user_input"], "max_age_s": 3000.0}}},
    {"compression": {"default": "summary", "by_type": {"user_input": "entities"}},
     "retrieval": {"query": {"goal_weight": 0.5, "last_action_weight": 0.3}}},
]  # fmt: skip


def blocks(corpus, extra: dict) -> dict:
    base = {"retrieval": {"k": 3, "budget": 60}, "tiers": {"short_term_tokens": 40},
            "embeddings": {"corpus": str(corpus), "cache": False}}  # fmt: skip
    for name, block in extra.items():
        base[name] = {**base.get(name, {}), **block}
    return base


class Clock:
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


def record_events(path) -> list[dict]:
    lines = path.read_bytes().splitlines()
    return [orjson.loads(line) for line in lines[1:] if line.strip()]


def check_context(manager, path, clock, stream: str, query: str) -> None:
    """``context`` with a query equals the rebuild over the record so far."""
    events = record_events(path)
    if not any(ev["stream"] == stream for ev in events):
        return
    t = max([clock.t] + [ev["t"] for ev in events if ev["stream"] == stream])
    cfg = manager.config
    typed = settings_from(cfg["retrieval"], "test")
    expected = REBUILD(typed, events, manager.result(), stream, query, t, cfg["seed"])
    ids = [ev["id"] for ev in events if ev["event"] == "write"]
    expected = [(ids[i], live_retrieval.TIER_NAMES[tier], tokens) for i, tier, tokens in expected]
    got = [(i.id, i.tier, i.tokens) for i in manager.context(stream, query=query)
           if i.tier != "working"]  # fmt: skip
    assert got == expected, (stream, query, t)


def play(manager, clock, ev, ids) -> None:
    kind = ev["event"]
    if kind == "write":
        ids[ev["id"]] = manager.write(ev["stream"], ev.get("text", ""), ev["type"],
                                      tokens=ev["tokens"], cost=ev.get("cost", 0.0))  # fmt: skip
    elif kind == "request":
        needs = [ids[n] if isinstance(n, str) else [ids[a] for a in n] for n in ev["needs"]]
        manager.used(ev["stream"], needs, text=ev.get("text", ""))
    elif kind == "annotate":
        manager.annotate(ids[ev["target"]], value=ev.get("value"), note=ev.get("note"))
    else:
        getattr(manager, kind)(ids[ev["target"]])


def rebuild_refused(*args, **kwargs):
    raise AssertionError("the manager rebuilt retrieval: the incremental engine should answer")


# each example replays a few dozen rebuilds (the reference): about 1 s per example
@pytest.mark.slow
@pytest.mark.parametrize("extra", SETTINGS)
@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])  # fmt: skip
@given(events=traces(max_events=30), policy=st.sampled_from(["lru", "rule"]),
       budget=st.sampled_from([20, 60]),
       split=st.integers(0, 40), probes=st.lists(st.integers(0, 30), max_size=8),
       words=st.lists(st.sampled_from(WORDS), min_size=1, max_size=3))  # fmt: skip
def test_incremental_context_equals_a_rebuild_per_call(tmp_path_factory, monkeypatch, events,
                                                       policy, budget, extra, split, probes,
                                                       words):  # fmt: skip
    folder = tmp_path_factory.mktemp("inc")
    corpus = folder / "corpus.txt"
    corpus.write_text("\n".join(" ".join(WORDS[k : k + 3]) for k in range(len(WORDS))))
    path = folder / "session.jsonl"
    if "ttl_s" not in extra.get("tiers", {}):
        monkeypatch.setattr(live_retrieval, "retrieve", rebuild_refused)
    clock, ids = Clock(), {}
    session = PartWay(MemoryManager(policy, budget, path, clock=clock, **blocks(corpus, extra)),
                      lambda: MemoryManager.reopen(path, clock=clock), split)  # fmt: skip
    try:
        for k, ev, manager in session.steps(events, clock):
            if ev["event"] == "request":
                check_context(manager, path, clock, ev["stream"], ev.get("text", ""))
            play(manager, clock, ev, ids)
            if k in probes:
                check_context(manager, path, clock, ev["stream"], " ".join(words))
    finally:
        session.manager.close()


def test_the_incremental_engine_answers_the_hand_computed_session(tmp_path, monkeypatch):
    """The session of ``test_live_retrieval`` (m0 to long term, m1 and m2 in the cache),
    answered without a rebuild, then the same after more writes move m1 out."""
    monkeypatch.setattr(live_retrieval, "retrieve", rebuild_refused)
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("the weather in paris\nflight booking to rome\nhotel price in paris\n"
                      "user likes tea\n")  # fmt: skip
    clock = Clock()
    with MemoryManager("lru", 30, tmp_path / "r.jsonl", clock=clock,
                       retrieval={"k": 4, "budget": 100}, tiers={"short_term_tokens": 20},
                       embeddings={"corpus": str(corpus), "cache": False}) as m:  # fmt: skip
        for text in ["the weather in paris is sunny", "flight booking to rome done",
                     "hotel price in paris 200", "user likes tea", "more about rome flight",
                     "x y z"]:  # fmt: skip
            clock.t += 1
            m.write("s", text, "tool_result", tokens=10)
        ctx = [(i.id, i.tier) for i in m.context("s", query="paris weather") if i.tier != "working"]
        assert ctx == [("m0", "long_term"), ("m2", "short_term"), ("m1", "short_term")]
        clock.t += 1
        m.write("s", "nothing in common", "tool_result", tokens=10)  # evicts m3: m1 overflows
        ctx = [(i.id, i.tier) for i in m.context("s", query="paris weather") if i.tier != "working"]
        # m3 and m1 share no word with the query: the fresher one (m3) ranks first
        assert ctx == [("m0", "long_term"), ("m2", "short_term"), ("m3", "short_term"),
                       ("m1", "long_term")]  # fmt: skip
