"""The simulated user: a perfect judge is right every time, the knobs do what they say
(rate, precision, recall, delay), the same seed gives the same rows, and bad knobs are
refused.  Truth is recomputed here the obvious way (scan the later requests)."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
from hydra.core.config_store import ConfigStore
from hypothesis import given, settings
from hypothesis import strategies as st

from memlens.learn.feedback import Feedback, FeedbackStore, with_feedback
from memlens.learn.simulated_user import SimulatedUserConfig, last_need_event, simulate_user
from memlens.simulator import simulate
from memlens.testing import random_events, rq, trace, traces, w
from memlens.trace.io import trace_from_events

PERFECT = SimulatedUserConfig(interventions_per_100_events=100.0, precision=1.0, recall=1.0)


def needed_after(tr, item_id: str, e: int) -> bool:
    """Does a request after event ``e`` need the item?  (A plain scan, no shortcuts.)"""
    i = tr.item_index[item_id]
    return any(int(tr.req_event[r]) > e and i in tr.needs_of(r).tolist()
               for r in range(tr.n_requests))  # fmt: skip


@pytest.fixture(scope="module")
def big():
    return trace_from_events(random_events(np.random.default_rng(7), n_events=20_000,
                                           n_streams=4))  # fmt: skip


@settings(max_examples=80, deadline=None, derandomize=True)
@given(events=traces(max_events=60), rate=st.sampled_from([100.0, 30.0]),
       delay=st.integers(0, 3), seed=st.integers(0, 3))  # fmt: skip
@pytest.mark.slow  # kept out of the default run (6-minute budget); make test-all runs it
def test_a_perfect_judge_keeps_only_what_is_needed_and_drops_only_what_is_not(
    events, rate, delay, seed
):
    tr = trace_from_events(events)
    cfg = replace(PERFECT, interventions_per_100_events=rate, delay_events=delay, seed=seed)
    rows = simulate_user(tr, cfg)
    for r in rows:
        assert r.source == "simulated" and r.trace_sha256 == tr.sha256
        assert r.action in ("keep", "drop") and r.value is None
        assert needed_after(tr, r.item_id, r.event_index) == (r.action == "keep"), r
    assert [r.event_index for r in rows] == sorted(r.event_index for r in rows)


@settings(max_examples=80, deadline=None, derandomize=True)
@given(events=traces(max_events=60), delay=st.integers(0, 6), seed=st.integers(0, 3),
       precision=st.sampled_from([1.0, 0.5]))  # fmt: skip
def test_no_feedback_before_the_write_plus_the_delay(events, delay, seed, precision):
    tr = trace_from_events(events)
    cfg = replace(PERFECT, delay_events=delay, seed=seed, precision=precision)
    position = np.empty(tr.n_events, dtype=np.int64)
    for ev in tr.stream_events:
        position[ev] = np.arange(len(ev))
    for r in simulate_user(tr, cfg):
        write = int(tr.item_event[tr.item_index[r.item_id]])
        assert r.event_index >= write + delay
        assert position[r.event_index] - position[write] >= delay  # in the item's own stream
        assert tr.stream_names[int(tr.ev_stream[r.event_index])] == r.stream
        assert r.t == float(tr.ev_t[r.event_index])


def test_a_delay_beyond_the_stream_means_no_feedback():
    tr = trace(w("a", 5, stream="s"), rq("q", "a", stream="s"), rq("q2", "a", stream="s"))
    assert simulate_user(tr, replace(PERFECT, delay_events=3)) == []
    rows = simulate_user(tr, replace(PERFECT, delay_events=1))
    assert [(r.event_index, r.item_id, r.action) for r in rows] == [(1, "a", "keep")]


def test_a_kept_item_is_let_go_after_its_last_need():
    # a is needed at events 1 and 3; a perfect, always attentive user pins it at its write,
    # then demotes it right after the last request that needs it
    tr = trace(w("a", 5, stream="s"), rq("q1", "a", stream="s"), w("b", 5, stream="s"),
               rq("q2", "a", stream="s"), w("c", 5, stream="s"))  # fmt: skip
    got = [(r.event_index, r.item_id, r.action) for r in simulate_user(tr, PERFECT)]
    assert got == [(0, "a", "keep"), (2, "b", "drop"), (3, "a", "drop"), (4, "c", "drop")]


@pytest.mark.parametrize("rate", [1.0, 5.0, 20.0])
@pytest.mark.slow  # kept out of the default run (6-minute budget); make test-all runs it
def test_the_rate_knob_is_respected(big, rate):
    cfg = SimulatedUserConfig(interventions_per_100_events=rate, recall=1.0, seed=3)
    n = len(simulate_user(big, cfg))
    mean = rate / 100 * big.n_events
    sd = (big.n_events * rate / 100 * (1 - rate / 100)) ** 0.5
    assert abs(n - mean) <= 4 * sd + 4, (n, mean, sd)
    assert simulate_user(big, replace(cfg, interventions_per_100_events=0.0)) == []


@pytest.mark.parametrize("precision", [0.6, 0.9])
def test_the_precision_knob_is_the_share_of_right_judgements(big, precision):
    cfg = SimulatedUserConfig(interventions_per_100_events=20.0, precision=precision,
                              recall=1.0, seed=1)  # fmt: skip
    last = last_need_event(big)
    rows = simulate_user(big, cfg)
    right = [(last[big.item_index[r.item_id]] > r.event_index) == (r.action == "keep")
             for r in rows]  # fmt: skip
    sd = (precision * (1 - precision) / len(rows)) ** 0.5
    assert abs(np.mean(right) - precision) <= 4 * sd, (np.mean(right), len(rows))


@pytest.mark.parametrize("recall", [0.2, 0.7])
def test_the_recall_knob_is_the_share_of_items_noticed(big, recall):
    # attentive enough (one chance per event, at most one write per event) that every noticed
    # item is judged: the share of items ever judged is the share noticed
    cfg = SimulatedUserConfig(interventions_per_100_events=100.0, recall=recall, seed=2)
    judged = {r.item_id for r in simulate_user(big, cfg)}
    share = len(judged) / big.n_items
    sd = (recall * (1 - recall) / big.n_items) ** 0.5
    assert abs(share - recall) <= 4 * sd + 0.002, share


def test_last_need_event_by_hand():
    tr = trace(w("a", 1, stream="s"), w("b", 1, stream="t"), rq("q", "a", stream="s"),
               w("c", 1, stream="s"), rq("q2", "a", "c", stream="s"))  # fmt: skip
    assert last_need_event(tr).tolist() == [4, -1, 4]


def test_same_config_same_rows_bit_for_bit(big):
    cfg = SimulatedUserConfig(interventions_per_100_events=5.0, precision=0.8, recall=0.6,
                              delay_events=2, seed=11)  # fmt: skip
    a, b = simulate_user(big, cfg), simulate_user(big, replace(cfg))
    assert a == b and len(a) > 100
    assert all(r.author == cfg.config_hash() for r in a)
    other = simulate_user(big, replace(cfg, seed=12))
    assert other != a
    assert replace(cfg, seed=12).config_hash() != cfg.config_hash()


def test_rows_go_to_the_store_and_back_into_a_replayable_trace(tmp_path, big):
    from memlens.policies.lru import LRU

    rows = simulate_user(big, SimulatedUserConfig(interventions_per_100_events=3.0, seed=5))
    store = FeedbackStore(tmp_path / "fb.db")
    store.add(rows)
    back = store.rows(source="simulated")
    assert sorted(back, key=_key) == sorted(rows, key=_key)
    replayed = with_feedback(big, back)
    assert replayed.n_events == big.n_events + len(rows)
    res = simulate(replayed, LRU(), 200, engine="reference", progress=False)
    assert res.need_hit.shape[0] == big.n_references
    assert any(r.action == "keep" for r in rows) and res.pinned_tokens.max() > 0


def _key(r: Feedback):
    return (r.event_index, r.item_id, r.action)


@pytest.mark.parametrize(
    ("knob", "value"),
    [("interventions_per_100_events", -1.0), ("interventions_per_100_events", 101.0),
     ("precision", 1.5), ("recall", -0.1), ("delay_events", -1), ("seed", -2),
     ("delay_events", 1.5), ("precision", True)],
)  # fmt: skip
def test_bad_knobs_are_refused_naming_the_knob(knob, value):
    with pytest.raises(ValueError, match=f"simulated_user.{knob}"):
        SimulatedUserConfig(**{knob: value})


def test_registered_in_hydras_config_store():
    node = ConfigStore.instance().load("simulated_user/default.yaml").node
    assert node.recall == SimulatedUserConfig.recall
    assert set(node) == {"interventions_per_100_events", "precision", "recall", "delay_events",
                         "seed"}  # fmt: skip
