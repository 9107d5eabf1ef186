"""Live equals replay: a session driven through the manager, and ``memlens simulate`` on its
record with the record's config, give the same hits, misses, evictions and moves, event for
event, for every registered policy that can run live, on the reference engine and on the
compiled kernel alike; and what ``context`` returns after each call is what the replay's move
log says is resident then.

The sessions are hypothesis-generated traces (``memlens.testing.traces``: every event kind,
two streams, clocks that stand still and jump), some turned into format 1.1 with alternatives,
played call by call into a manager; most are closed at a drawn point and reopened on the
record, which must rebuild the state exactly.
"""

from __future__ import annotations

import numpy as np
import pytest
from helpers import PartWay
from hydra.utils import get_class
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from memlens.config.store import policy_targets
from memlens.live import MemoryManager
from memlens.live.config import OFFLINE
from memlens.live.replay import replay_record
from memlens.policy import kernel_of
from memlens.simulator import MoveKind
from memlens.testing import traces, with_alternatives

LIVE = sorted(n for n, target in policy_targets().items() if target not in OFFLINE)
GROWING = [n for n in LIVE if get_class(policy_targets()[n]).grows]  # the incremental engine
REPLAYED = [n for n in LIVE if n not in GROWING]  # replayed from the session's events
FIELDS = (
    "need_hit",
    "context_tokens",
    "pinned_tokens",
    "evictions",
    "move_event",
    "move_item",
    "move_kind",
)  # fmt: skip (false evictions need the future: a replay's to count)
ENTER = {int(MoveKind.ADMIT), int(MoveKind.FETCH), int(MoveKind.PIN), int(MoveKind.PROMOTE)}


class Clock:
    """The session's clock, set to each generated event's time before the call."""

    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


def play(manager: MemoryManager, clock: Clock, ev: dict, ids: dict[str, str]) -> str:
    """One generated event as the manager call that records it; returns its stream."""
    clock.t = ev.get("t", clock.t)
    kind = ev["event"]
    if kind == "write":
        ids[ev["id"]] = manager.write(ev["stream"], ev.get("text", ""), ev["type"],
                                      tokens=ev["tokens"], cost=ev.get("cost", 0.0))  # fmt: skip
        return ev["stream"]
    if kind == "request":
        needs = [ids[n] if isinstance(n, str) else [ids[a] for a in n] for n in ev["needs"]]
        manager.used(ev["stream"], needs)
        return ev["stream"]
    target = ids[ev["target"]]
    if kind == "annotate":
        manager.annotate(target, value=ev.get("value"), note=ev.get("note"))
    else:
        getattr(manager, kind)(target)
    return ev["stream"]


def resident_after(result, stream_items: set[int], e: int) -> list[int]:
    """The items of a stream resident after event ``e``, from a replay's move log."""
    state: dict[int, bool] = {}
    for ev, item, kind in zip(result.move_event, result.move_item, result.move_kind):
        if ev > e:
            break
        if item in stream_items:
            state[int(item)] = (
                int(kind) in ENTER if kind != MoveKind.BYPASS else state.get(int(item), False)
            )
    return sorted(i for i, on in state.items() if on)


def run_session(name, events, budget, demand_fetch, split, path):
    """Play ``events`` into a manager on ``path`` (closed and reopened after ``split`` events);
    returns the final manager result and, per event, (stream, context ids)."""
    clock, ids, seen = Clock(), {}, []
    session = PartWay(MemoryManager(name, budget, path, demand_fetch=demand_fetch, clock=clock),
                      lambda: MemoryManager.reopen(path, clock=clock), split)  # fmt: skip
    for _, ev, manager in session.steps(events):
        stream = play(manager, clock, ev, ids)
        seen.append((stream, [item.id for item in manager.context(stream)]))
    live = session.manager.result()
    session.manager.close()
    return live, seen


def check_session(tmp_path_factory, name, events, budget, demand_fetch, alternatives, split,
                  seed) -> None:  # fmt: skip
    """The session equals its record's replays, and each context the replay's residency."""
    if alternatives:
        events = with_alternatives(events, np.random.default_rng(seed))
    path = tmp_path_factory.mktemp("rec") / "session.jsonl"
    live, seen = run_session(name, events, budget, demand_fetch, split, path)
    reference = replay_record(path, engine="reference")
    for field in FIELDS:
        assert np.array_equal(getattr(live, field), getattr(reference, field)), field
    manager = MemoryManager.reopen(path)
    try:
        if kernel_of(manager._config.build()) is not None:
            fast = replay_record(path, engine="fast")
            for field in FIELDS:
                assert np.array_equal(getattr(fast, field), getattr(reference, field)), field
        cols = manager._cols
    finally:
        manager.close()
    for e, (stream, context) in enumerate(seen):
        s = cols.ev_stream[e]
        mine = {i for i, st_ in enumerate(cols.item_stream) if st_ == s}
        assert context == [cols.item_id[i] for i in resident_after(reference, mine, e)], (e, stream)


SESSIONS = dict(events=traces(max_events=30), budget=st.sampled_from([20, 60, 150]),
                demand_fetch=st.booleans(), alternatives=st.booleans(), split=st.integers(0, 40),
                seed=st.integers(0, 2**16))  # fmt: skip
FIXTURE = [HealthCheck.function_scoped_fixture]


@pytest.mark.parametrize("name", GROWING)
@settings(max_examples=12, deadline=None, suppress_health_check=FIXTURE)
@given(**SESSIONS)
def test_live_equals_replay_for_policies_that_grow(tmp_path_factory, name, **session):
    check_session(tmp_path_factory, name, **session)


@pytest.mark.parametrize("name", REPLAYED)
@settings(max_examples=3, deadline=None, suppress_health_check=FIXTURE)
@given(**SESSIONS)
def test_live_equals_replay_for_policies_replayed_from_the_record(tmp_path_factory, name,
                                                                  **session):  # fmt: skip
    check_session(tmp_path_factory, name, **session)


@pytest.mark.slow
@pytest.mark.parametrize("name", LIVE)
@settings(max_examples=60, deadline=None, suppress_health_check=FIXTURE)
@given(**SESSIONS)
def test_live_equals_replay_many_sessions(tmp_path_factory, name, **session):
    check_session(tmp_path_factory, name, **session)


# ------------------------------------------------------------ with the lower tiers on
def retrieval_blocks(corpus) -> dict:
    """Small tiers so that items reach the short-term cache and the long-term store."""
    return dict(retrieval={"k": 3, "budget": 60}, tiers={"short_term_tokens": 40},
                embeddings={"corpus": str(corpus), "cache": False})  # fmt: skip


def run_retrieving_session(name, events, budget, split, path, corpus):
    """Like ``run_session``, each request preceded by ``context(stream, query=its text)``;
    returns per request (in record order) the retrieved (id, tier) pairs."""
    clock, ids, got = Clock(), {}, []
    session = PartWay(MemoryManager(name, budget, path, clock=clock, **retrieval_blocks(corpus)),
                      lambda: MemoryManager.reopen(path, clock=clock), split)  # fmt: skip
    for _, ev, manager in session.steps(events, clock):
        if ev["event"] == "request":
            ctx = manager.context(ev["stream"], query=ev.get("text", ""))
            working = [i.id for i in ctx if i.tier == "working"]
            assert working == [i.id for i in manager.context(ev["stream"])]
            got.append([(i.id, i.tier) for i in ctx if i.tier != "working"])
            needs = [ids[n] if isinstance(n, str) else [ids[a] for a in n] for n in ev["needs"]]
            manager.used(ev["stream"], needs, text=ev.get("text", ""))
        else:
            play(manager, clock, ev, ids)
    live = session.manager.result()
    session.manager.close()
    return live, got


# the retrieval driver is rebuilt per context call: a few seconds per policy, so the default run
# keeps lru and the slow run adds the rule scorer and lfu
@pytest.mark.parametrize("name", ["lru", pytest.param("rule", marks=pytest.mark.slow),
                                  pytest.param("lfu", marks=pytest.mark.slow)])  # fmt: skip
@settings(max_examples=6, deadline=None, suppress_health_check=FIXTURE)
@given(events=traces(max_events=30), budget=st.sampled_from([20, 60]),
       split=st.integers(0, 40))  # fmt: skip
def test_live_retrieval_equals_the_replays_retrieval(tmp_path_factory, name, events, budget,
                                                     split):  # fmt: skip
    from memlens.live.replay import replay_record_retrieval
    from memlens.retrieval.tiers import LTS, STC
    from memlens.testing import WORDS

    folder = tmp_path_factory.mktemp("rec")
    corpus = folder / "corpus.txt"
    corpus.write_text("\n".join(" ".join(WORDS[k : k + 3]) for k in range(len(WORDS))))
    path = folder / "session.jsonl"
    live, got = run_retrieving_session(name, events, budget, split, path, corpus)
    result, record = replay_record_retrieval(path, engine="reference")
    for field in FIELDS:
        assert np.array_equal(getattr(live, field), getattr(result, field)), field
    from memlens.trace.io import load_trace

    trace = load_trace(path)
    tier = {STC: "short_term", LTS: "long_term"}
    expected = [[(trace.item_id[i], tier[t]) for i, t in
                 zip(record.ret_item[a:b].tolist(), record.ret_tier[a:b].tolist())]
                for a, b in zip(record.ret_ptr[:-1].tolist(), record.ret_ptr[1:].tolist())]  # fmt: skip
    assert got == expected
