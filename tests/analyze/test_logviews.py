"""report.html's views from the event log in memory (memlens.analyze.logviews) against the same
views asked of the written events.parquet through DuckDB (memlens.analyze.queries): the same
page, byte for byte, on generated runs of scoring and non-scoring policies, with pins,
retrieval and demand fetch."""

from __future__ import annotations

import pytest
from memlens.datasets.archetypes import generate

from memlens.analyze.eventlog import build_event_log, write_event_log
from memlens.analyze.logviews import EventLog, heatmap, requests_page, timeline
from memlens.config.compose import compose_config
from memlens.config.schema import resolve
from memlens.present import static_report
from memlens.runs.pipeline import run
from memlens.trace.io import load_trace, write_trace

CASES = [
    ("agent", "lru", 300, []),
    ("agent", "rule", 300, []),
    ("agent", "memorybank", 500, ["demand_fetch=false"]),
    ("support", "window", 200, []),
    ("agent", "rule", 40, ["retrieval.enabled=true", "tiers.short_term_tokens=64"]),
    ("agent", "generative_agents", 800, []),
]


@pytest.fixture(scope="module")
def traces(tmp_path_factory):
    out = {}
    for archetype in {c[0] for c in CASES}:
        path = tmp_path_factory.mktemp("t") / f"{archetype}.jsonl"
        write_trace(path, generate(archetype, streams=7, events_per_stream=45, seed=5),
                    header={"generator": archetype})  # fmt: skip
        out[archetype] = load_trace(str(path))
    return out


@pytest.mark.parametrize(("archetype", "policy", "budget", "extra"), CASES)
def test_page_from_memory_equals_page_from_duckdb(traces, tmp_path, archetype, policy, budget,
                                                   extra):  # fmt: skip
    settings = resolve(compose_config("simulate", ["mlflow.enabled=false", "progress=false",
                                                   f"policy={policy}", f"budget={budget}",
                                                   *extra]))  # fmt: skip
    done, _ = run(settings, traces[archetype], record_values=True)
    cols = build_event_log(done)
    events = write_event_log(tmp_path / "events.parquet", done, cols)
    metrics = {"policy": policy, "budget": budget, "overall": {"hit_rate": 0.5}}
    from_duckdb = static_report.render(events, metrics)
    from_memory = static_report.render_log(EventLog(cols, done.trace), metrics)
    assert from_memory == from_duckdb
    assert from_memory.count('class="seg"') > 0


def test_hand_made_log():
    """Three items, one request: the views counted by hand."""
    import numpy as np

    class Trace:
        item_id = ["a", "b", "c"]
        req_id = ["r0"]
        item_stream = np.array([0, 0, 0])
        req_stream = np.array([0])
        stream_names = ["s"]

    k = {"write": 0, "admit": 1, "evict": 5, "hit": 8, "miss": 9, "rescore": 13}
    nan = float("nan")
    rows = [  # kind, item, request, event, tier_after (TIERS: 1 new, 2 wm), value_after
        ("write", 0, -1, 0, 0, nan), ("admit", 0, -1, 0, 2, 1.0),
        ("write", 1, -1, 1, 0, nan), ("admit", 1, -1, 1, 2, 2.0),
        ("write", 2, -1, 2, 0, nan), ("evict", 0, -1, 2, 1, 0.5), ("admit", 2, -1, 2, 2, 3.0),
        ("hit", 1, 0, 3, 0, nan), ("miss", 0, 0, 3, 0, nan),
    ]  # fmt: skip
    cols = {name: np.array([r[i] for r in rows])
            for i, name in enumerate(("kind", "item", "request", "event", "tier_after",
                                      "value_after"))}  # fmt: skip
    cols["kind"] = np.array([k[r[0]] for r in rows])
    cols["value_after"] = cols["value_after"].astype(float)
    log = EventLog(cols, Trace())
    tl = timeline(log, limit=40)
    assert tl["total_items"] == 3 and tl["last_event"] == 3
    assert [(s["item_id"], s["start"], s["end"], s["tier"]) for s in tl["segments"]] == [
        ("a", 0, 2, "wm"),
        ("a", 2, 3, "new"),
        ("b", 1, 3, "wm"),
        ("c", 2, 3, "wm"),
    ]
    hm = heatmap(log, limit=2, bins=4)  # events 0..3: one bin each
    assert hm["total_items"] == 3 and hm["items"] == ["a", "b"]
    assert hm["z"] == [[1.0, 1.0, 0.5, 0.5], [None, 2.0, 2.0, 2.0]]
    worst = requests_page(log, limit=5)
    assert worst["total"] == 1
    assert worst["rows"] == [{"request": 0, "request_id": "r0", "stream": "s", "event": 3,
                              "needs": 2, "misses": 1}]  # fmt: skip
