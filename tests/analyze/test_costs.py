"""What a miss costs and what a hit is worth: ``miss_cost_usd``, ``miss_latency_s``,
``total_cost_usd``, ``value_weighted_hit_rate`` and the per-request id lists, on hand-computed
traces (every number worked out in the comments), on both engines."""

from __future__ import annotations

import math

import numpy as np
import pytest
from helpers import annotate, pin, random_events, rq, trace, w
from memlens.policies.lru import LRU
from memlens.policies.window import SlidingWindow

from memlens.analyze.costs import CostsConfig
from memlens.analyze.metrics import annotated_values, compute_metrics, per_request_table
from memlens.analyze.registry import combine, declared, summary_columns
from memlens.simulator import simulate
from memlens.trace.model import ITEM_TYPES

ENGINES = ["reference", "fast"]
PRICE = 10.0  # USD per million tokens: re-reading a 2-token item costs 2 x 10 / 1e6 = 2e-5
COSTS = CostsConfig(
    miss_penalty_usd={"user_input": 0.5, "tool_result": 0.05, "llm_thought": 0.001},
    miss_latency_s={"user_input": 30.0, "tool_result": 2.0, "llm_thought": 1.0, "agent_state": 0.5},
)  # value_weight: the defaults, user_input 0.7, tool_result 0.6, agent_state 0.5, llm_thought 0.4

# window (FIFO) at budget 10; u is pinned, so the window evicts the oldest *unpinned* item
HAND_EVENTS = [
    w("u", 4, "user_input"), pin("u"),
    w("v", 2, "user_input"),
    w("t1", 2, "tool_result", cost=0.02),                     # costed: a miss re-gets it at $0.02
    w("t2", 2, "tool_result"),                                # uncosted: a miss re-reads 2 tokens
    annotate("t1", value=0.9),                                # WM {u, v, t1, t2} = 10
    rq("q1", "u", "v", "t1", "t2"),                           # 4 hits
    w("th", 2, "llm_thought"),                                # 12 > 10: evicts v
    rq("q2", "v", "t1", "th"),                                # v miss; t1, th hit
    annotate("t1", value=0.2), annotate("t1", note="stale?"),  # note-only: no value change
    w("s", 2, "agent_state"),                                 # evicts t1
    w("x", 2, "llm_thought"),                                 # evicts t2: WM {u, th, s, x}
    rq("q3", "t1", "t2", "th", "u"),                          # t1, t2 miss; th, u (pinned) hit
    w("y", 2, "llm_thought"),                                 # evicts th
    rq("q4", "th"),                                           # th miss
]  # fmt: skip
HAND = trace(*HAND_EVENTS)


def metrics(tr, policy, budget, engine, costs=COSTS, price=PRICE, demand_fetch=False):
    res = simulate(tr, policy, budget=budget, demand_fetch=demand_fetch, engine=engine)
    return res, compute_metrics(tr, res, price_per_mtok=price, costs=costs)


@pytest.mark.parametrize("engine", ENGINES)
def test_miss_costs_by_hand(engine):
    res, m = metrics(HAND, SlidingWindow(), 10, engine)
    o = m["overall"]
    assert res.need_hit.tolist() == [1, 1, 1, 1, 0, 1, 1, 0, 0, 1, 1, 0]
    assert o["hit_rate"] == 8 / 12 and o["request_success"] == 1 / 4  # unchanged definitions
    # misses:  q2 v  (user_input, no cost):  2e-5 (re-read) + 0.5   = 0.50002   latency 30
    #          q3 t1 (tool_result, $0.02):   0.02 (its cost) + 0.05 = 0.07      latency 2
    #          q3 t2 (tool_result, no cost): 2e-5 + 0.05            = 0.05002   latency 2
    #          q4 th (llm_thought, no cost): 2e-5 + 0.001           = 0.00102   latency 1
    assert o["miss_cost_usd"] == pytest.approx(0.50002 + 0.07 + 0.05002 + 0.00102)  # 0.62106
    assert o["miss_latency_s"] == 35.0
    # context: 10 tokens at each of 4 requests = 40 tokens x 10 / 1e6 = 0.0004
    assert o["cost_usd"] == pytest.approx(4e-4)
    assert o["total_cost_usd"] == pytest.approx(0.62106 + 4e-4)


@pytest.mark.parametrize("engine", ENGINES)
def test_value_weighted_hit_rate_by_hand(engine):
    _, m = metrics(HAND, SlidingWindow(), 10, engine)
    # value of (request, item): t1's latest valued annotation before the request, else the type
    # weight (user_input 0.7, tool_result 0.6, llm_thought 0.4, agent_state 0.5)
    # q1: u 0.7 hit, v 0.7 hit, t1 0.9 hit (annotated before q1), t2 0.6 hit -> 2.9 of 2.9
    # q2: v 0.7 miss, t1 0.9 hit (the 0.2 comes after q2), th 0.4 hit        -> 1.3 of 2.0
    # q3: t1 0.2 miss (the note-only annotation changes nothing), t2 0.6 miss,
    #     th 0.4 hit, u 0.7 hit (pinned)                                       -> 1.1 of 1.9
    # q4: th 0.4 miss                                                          -> 0   of 0.4
    assert m["overall"]["value_weighted_hit_rate"] == pytest.approx(5.3 / 7.2)
    assert annotated_values(HAND)[[2, 5, 7]].tolist() == [0.9, 0.9, 0.2]


@pytest.mark.parametrize("engine", ENGINES)
def test_per_request_ids_and_miss_cost(engine):
    res = simulate(HAND, SlidingWindow(), budget=10, engine=engine)
    table = per_request_table(HAND, res, price_per_mtok=PRICE, costs=COSTS)
    assert table["needed_ids"] == [["u", "v", "t1", "t2"], ["v", "t1", "th"],
                                   ["t1", "t2", "th", "u"], ["th"]]  # fmt: skip
    assert table["hit_ids"] == [["u", "v", "t1", "t2"], ["t1", "th"], ["th", "u"], []]
    assert table["missed_ids"] == [[], ["v"], ["t1", "t2"], ["th"]]
    assert table["miss_cost_usd"] == pytest.approx([0, 0.50002, 0.12002, 0.00102])
    assert table["miss_latency_s"].tolist() == [0, 30, 4, 1]
    assert table["misses"].tolist() == [len(x) for x in table["missed_ids"]]


def test_defaults_price_a_miss_at_its_cost_or_its_re_reading():
    # default costs: no penalties, no latency; value weights = DEFAULT_TYPE_BASE
    _, m = metrics(HAND, SlidingWindow(), 10, "reference", costs=CostsConfig(), price=3.0)
    # v, t2, th: 2 tokens x 3 / 1e6 each; t1: its cost 0.02
    assert m["overall"]["miss_cost_usd"] == pytest.approx(0.02 + 3 * 6e-6)
    assert m["overall"]["miss_latency_s"] == 0.0
    default = compute_metrics(HAND, simulate(HAND, SlidingWindow(), budget=10), price_per_mtok=3.0)
    assert default["overall"]["miss_cost_usd"] == m["overall"]["miss_cost_usd"]


@pytest.mark.parametrize("engine", ENGINES)
def test_demand_fetch_does_not_make_a_miss_free(engine):
    res, m = metrics(HAND, SlidingWindow(), 10, engine, demand_fetch=True)
    # q1: 4 hits.  w th evicts v: WM u t1 t2 th
    # q2: v miss, t1 th hit; fetch v (evicts t1), then t1, now absent (evicts t2): u th v t1
    # w s evicts th, w x evicts v: u t1 s x
    # q3: t1 hit, t2 th miss, u hit; fetch t2 (evicts s), th (evicts t1): u x t2 th
    # w y evicts x;  q4: th hit
    assert res.need_hit.tolist() == [1, 1, 1, 1, 0, 1, 1, 1, 0, 0, 1, 1]
    # the fetch brings each miss back after its request, which still paid for it:
    # v 0.50002 (30 s) + t2 0.05002 (2 s) + th 0.00102 (1 s)
    assert m["overall"]["miss_cost_usd"] == pytest.approx(0.55106)
    assert m["overall"]["miss_latency_s"] == 33.0
    # values: q1 2.9 of 2.9; q2 1.3 of 2.0; q3 t1 0.2 + u 0.7 of 1.9; q4 th 0.4 of 0.4
    assert m["overall"]["value_weighted_hit_rate"] == pytest.approx(5.5 / 7.2)


def test_annotated_value_zero_counts_and_other_items_do_not_leak():
    tr = trace(
        w("a", 1, "tool_result"), w("b", 1, "tool_result"),
        annotate("a", value=0.0),      # a person says a is worthless
        rq("q1", "a", "b"),            # a: 0.0 (annotated), b: 0.6 (type weight)
        annotate("b", value=1.0),
        rq("q2", "b", "a"),            # b: 1.0, a: 0.0
    )  # fmt: skip
    assert annotated_values(tr).tolist()[:1] == [0.0]
    assert math.isnan(annotated_values(tr)[1])
    res = simulate(tr, LRU(), budget=1, engine="reference")
    # budget 1: only b is resident at q1 (b hit, a miss); q2: b hit, a miss
    assert res.need_hit.tolist() == [0, 1, 1, 0]
    m = compute_metrics(tr, res)["overall"]
    assert m["value_weighted_hit_rate"] == pytest.approx((0.6 + 1.0) / (0.0 + 0.6 + 1.0 + 0.0))


def test_no_value_at_all_gives_none():
    tr = trace(w("a", 1, "tool_result"), rq("q1", "a"))
    zero = CostsConfig(value_weight=dict.fromkeys(ITEM_TYPES, 0.0))
    _, m = metrics(tr, LRU(), 5, "reference", costs=zero)
    assert m["overall"]["value_weighted_hit_rate"] is None
    assert m["overall"]["hit_rate"] == 1.0


def brute_force_values(events: list[dict], costs: CostsConfig) -> list[float]:
    """Per reference, walking the events in order: the latest valued annotation, else the weight."""
    latest, kinds, out = {}, {}, []
    for ev in events:
        if ev["event"] == "write":
            kinds[ev["id"]] = ev["type"]
        elif ev["event"] == "annotate" and "value" in ev:
            latest[ev["target"]] = ev["value"]
        elif ev["event"] == "request":
            for need in dict.fromkeys(ev["needs"]):  # a repeated id counts once
                out.append(latest.get(need, costs.value_weight[kinds[need]]))
    return out


@pytest.mark.parametrize("seed", range(5))
def test_values_and_costs_match_a_brute_force_walk(seed):
    from memlens.analyze.metrics import needed_references

    events = random_events(np.random.default_rng(seed), n_events=300, n_streams=3)
    tr = trace(*events)
    res = simulate(tr, LRU(), budget=40, engine="reference")
    refs = needed_references(tr, res, PRICE, COSTS)
    assert refs.value.tolist() == pytest.approx(brute_force_values(events, COSTS))
    item, cost = tr.needs, tr.item_cost[tr.needs]
    reget = np.where(cost > 0, cost, tr.item_tokens[item] * PRICE / 1e6)
    pen = np.asarray([COSTS.miss_penalty_usd[t] for t in ITEM_TYPES])
    assert refs.miss_usd == pytest.approx(reget + pen[tr.item_type[item]])


@pytest.mark.parametrize("seed", range(3))
def test_streams_add_up_and_parts_recombine(seed):
    tr = trace(*random_events(np.random.default_rng(seed), n_events=300, n_streams=3))
    m = compute_metrics(tr, simulate(tr, LRU(), budget=40), price_per_mtok=PRICE, costs=COSTS)
    for key in ("miss_cost_usd", "miss_latency_s", "total_cost_usd"):
        total = sum(s[key] for s in m["streams"].values())
        assert m["overall"][key] == pytest.approx(total), key
    for key in ("miss_cost_usd", "miss_latency_s", "total_cost_usd", "value_weighted_hit_rate"):
        assert combine(*m["stream_parts"][key]) == pytest.approx(m["overall"][key]), key


def test_declared_in_the_registry_and_summary_worthy():
    reg = declared()
    assert reg["miss_cost_usd"].higher_is_better is False
    assert reg["miss_latency_s"].higher_is_better is False
    assert reg["total_cost_usd"].higher_is_better is False
    assert reg["value_weighted_hit_rate"].higher_is_better is True
    cols = summary_columns()
    assert "total_cost_usd" in cols and "value_weighted_hit_rate" in cols
    assert "miss_cost_usd" not in cols and "miss_latency_s" not in cols


# ------------------------------------------------------------------- settings
def test_costs_settings_fill_missing_types_and_refuse_bad_values():
    c = CostsConfig(miss_penalty_usd={"tool_result": 1})
    assert c.miss_penalty_usd == {"user_input": 0.0, "llm_thought": 0.0, "tool_result": 1.0,
                                  "agent_state": 0.0}  # fmt: skip
    assert c.value_weight == {"user_input": 0.7, "llm_thought": 0.4, "tool_result": 0.6,
                              "agent_state": 0.5}  # fmt: skip
    for kwargs, message in [
        ({"miss_penalty_usd": {"memo": 1.0}}, "unknown item type 'memo'"),
        ({"miss_latency_s": {"user_input": -1.0}}, "costs.miss_latency_s.user_input must be"),
        ({"miss_latency_s": {"user_input": math.inf}}, "must be a finite number >= 0"),
        ({"miss_penalty_usd": {"tool_result": math.nan}}, "must be a finite number >= 0"),
        ({"value_weight": {"tool_result": 1.5}}, r"must be a number in \[0, 1\]"),
        ({"value_weight": {"tool_result": "high"}}, "must be a number"),
    ]:
        with pytest.raises(ValueError, match=message):
            CostsConfig(**kwargs)


def test_costs_settings_through_hydra():
    from memlens.config.compose import run_settings

    s = run_settings(["costs.miss_latency_s.user_input=30", "costs.value_weight.tool_result=1"])
    assert s.costs.miss_latency_s["user_input"] == 30.0 and s.costs.value_weight["tool_result"] == 1
    for bad, message in [
        ("costs.value_weight.tool_result=2", r"costs.value_weight.tool_result must be"),
        ("+costs.miss_penalty_usd.memo=1", "unknown item type 'memo'"),
        ("costs.miss_penalty_usd.tool_result=-0.5", "must be a finite number >= 0"),
    ]:
        with pytest.raises(ValueError, match=message):
            run_settings([bad])


def test_pipeline_uses_the_costs_settings_and_writes_the_id_lists(tmp_path):
    import pyarrow.parquet as pq

    from memlens.config.compose import run_settings
    from memlens.runs.pipeline import run
    from memlens.runs.writers import write_run
    from memlens.trace.io import write_trace

    path = tmp_path / "hand.jsonl"
    write_trace(path, HAND_EVENTS)
    over = [f"trace={path}", "policy=window", "budget=10", f"price_per_mtok={PRICE}",
            "oracle.enabled=false", "mlflow.enabled=false", "engine=reference",
            "costs.miss_penalty_usd.user_input=0.5", "costs.miss_penalty_usd.tool_result=0.05",
            "costs.miss_penalty_usd.llm_thought=0.001"]  # fmt: skip
    done, report = run(run_settings(over))
    assert report.overall["miss_cost_usd"] == pytest.approx(0.62106)
    write_run(tmp_path / "out", done, report, "")
    table = pq.read_table(tmp_path / "out" / "per_request.parquet").to_pydict()
    assert table["missed_ids"] == [[], ["v"], ["t1", "t2"], ["th"]]
    assert table["hit_ids"][1] == ["t1", "th"]
    assert table["needed_ids"][3] == ["th"]
    assert table["miss_cost_usd"] == pytest.approx([0, 0.50002, 0.12002, 0.00102])
