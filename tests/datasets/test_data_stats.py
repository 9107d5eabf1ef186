"""``memlens data stats``: counts and evidence age in tokens; ``--compare``: two traces side
by side, a distance per row."""

from __future__ import annotations

import json

import numpy as np
import pytest
from memlens.datasets.archetypes import generate
from memlens.datasets.stats import (
    compare_stats,
    evidence_age_tokens,
    ks_statistic,
    reuse_distance_tokens,
    reuse_profile,
    trace_stats,
)
from scipy.stats import ks_2samp

from memlens.cli.data import main as data_main
from memlens.trace.io import trace_from_events, write_trace


def _w(i, tokens, stream="a", ty="user_input"):
    return {"event": "write", "id": i, "tokens": tokens, "type": ty, "stream": stream}


def _r(i, needs, stream="a"):
    return {"event": "request", "id": i, "needs": needs, "stream": stream}


HAND = [
    _w("w1", 10), _w("x1", 1000, "b"), _w("w2", 20, ty="tool_result"), _r("r1", ["w1"]),
    _w("w3", 5), _w("x2", 7, "b"), _r("r2", ["w1", "w3"]), _r("q1", ["x1"], "b"),
    {"event": "pin", "target": "w2"},
]  # fmt: skip


def test_evidence_age_hand_computed():
    trace = trace_from_events(HAND)
    # r1 needs w1: w2 (20) written since; r2: w1 -> 20 + 5, w3 -> 0; q1: x1 -> x2 (7) only
    assert evidence_age_tokens(trace).tolist() == [20, 25, 0, 7]
    s = trace_stats(trace)
    assert (s["events"], s["streams"], s["writes"], s["requests"], s["pins"]) == (9, 2, 5, 3, 1)
    assert s["references"] == 4 and s["tokens_total"] == 1042
    assert s["tokens_by_type"]["tool_result"] == {"items": 1, "tokens": 20, "mean": 20.0}
    assert s["evidence_age_tokens"]["max"] == 25 and s["evidence_age_tokens"]["p50"] == 13.5


def test_evidence_age_matches_brute_force():
    trace = trace_from_events(
        generate("coding", seed=5, streams=15, events_per_stream=200, concurrency=3)
    )
    fast = evidence_age_tokens(trace)
    slow = []
    for r in range(trace.n_requests):
        e_req = trace.req_event[r]
        for i in trace.needs_of(r):
            tot = 0
            for e in range(trace.item_event[i] + 1, e_req):
                if trace.ev_kind[e] == 0 and trace.ev_stream[e] == trace.req_stream[r]:
                    tot += trace.item_tokens[trace.ev_ref[e]]
            slow.append(tot)
    assert np.array_equal(fast, np.array(slow))


def test_stats_cli(tmp_path, capsys):
    path = tmp_path / "t.jsonl"
    write_trace(path, HAND, header={"generator": "hand"})
    assert data_main(["stats", f"trace={path}"]) == 0
    out = capsys.readouterr().out
    assert "streams    2" in out and "p50=14" in out and "generator=hand" in out
    assert data_main(["stats", f"trace={path}", "json=true"]) == 0
    s = json.loads(capsys.readouterr().out)
    assert s["requests"] == 3 and s["share_older_than_budget"]["512"] == 0.0
    assert data_main(["stats", str(path), "json=true"]) == 0  # a bare path is trace=PATH
    assert json.loads(capsys.readouterr().out) == s


def test_stats_bad_trace_exit_2(tmp_path, capsys):
    path = tmp_path / "bad.jsonl"
    path.write_text('{"event": "write", "id": "a", "type": "user_input"}\n')
    assert data_main(["stats", f"trace={path}"]) == 2
    err = capsys.readouterr().err
    assert "bad.jsonl:1" in err and "tokens" in err


# ------------------------------------------------------------------ --compare
OTHER = [
    _w("a1", 30), _w("a2", 50, ty="tool_result"), _w("a3", 70, ty="tool_result"),
    _r("s1", ["a2"]), _w("a4", 10, ty="llm_thought"), _r("s2", ["a1", "a2", "a3"]),
]  # fmt: skip


def test_ks_statistic_matches_scipy():
    rng = np.random.default_rng(0)
    for _ in range(50):
        a = rng.integers(0, 20, size=int(rng.integers(1, 40)))
        b = rng.integers(0, 20, size=int(rng.integers(1, 40))) + int(rng.integers(0, 5))
        assert ks_statistic(a, b) == pytest.approx(ks_2samp(a, b).statistic, abs=1e-12)
    assert ks_statistic(np.array([]), np.array([])) == 0.0
    assert ks_statistic(np.array([1]), np.array([])) == 1.0


def test_compare_hand_computed():
    c = compare_stats(trace_from_events(HAND), trace_from_events(OTHER))
    row = {r["metric"]: r for r in c["rows"]}
    # HAND: user inputs w1 (needed), x1 (needed), w3 (needed), x2 (not): 3/4; OTHER: a1 1/1
    assert row["reuse p user_input"]["real"] == 0.75 and row["reuse p user_input"]["generated"] == 1
    assert row["reuse p user_input"]["distance"] == 0.25
    # tool results: HAND w2 never needed (0/1); OTHER a2, a3 both needed (2/2)
    assert row["reuse p tool_result"]["distance"] == 1.0
    # needs per request: HAND [1, 2, 1], OTHER [1, 3]: CDFs at 1: 2/3 vs 1/2, at 2: 1 vs 1/2
    assert row["needs per request (mean)"]["distance"] == 0.5
    assert row["needs per request (mean)"]["real"] == 1.33
    # items by type: HAND 4 user inputs of 5 items, OTHER 1 of 4
    assert row["items user_input"]["distance"] == round(0.8 - 0.25, 4)
    # reuse distance: HAND [20, 25, 0, 7]; OTHER s1: a2 -> 70, s2: a1 -> 130, a2 -> 80, a3 -> 10
    dist = row["reuse distance (tokens)"]
    assert dist["distance"] == pytest.approx(ks_2samp([20, 25, 0, 7], [70, 130, 80, 10]).statistic)
    assert c["mean_distance"] == round(np.mean([r["distance"] for r in c["rows"]]), 4)


def test_compare_with_itself_is_zero():
    trace = trace_from_events(generate("agent", seed=1, streams=40))
    c = compare_stats(trace, trace)
    assert c["mean_distance"] == 0.0 and all(r["distance"] == 0.0 for r in c["rows"])
    assert {r["metric"] for r in c["rows"]} >= {
        "reuse p tool_result", "tokens agent_state (mean)", "needs per request (mean)",
        "reuse distance (tokens)"}  # fmt: skip


def test_a_need_group_counts_once_at_its_youngest_alternative():
    events = [{"event": "header", "version": "1.1"}, _w("a", 10), _w("b", 20, ty="tool_result"),
              _w("c", 5, ty="llm_thought"), _r("r", [["a", "c"], "b"])]  # fmt: skip
    trace = trace_from_events(events)
    assert reuse_distance_tokens(trace).tolist() == [0, 5]  # a-or-c: c is the youngest
    prof = reuse_profile(trace)
    assert prof["needs"].tolist() == [2]  # two needs, not three items
    assert prof["reuse_p"]["llm_thought"] == 1.0  # an alternative counts as reused


def test_stats_compare_cli(tmp_path, capsys):
    real, gen = tmp_path / "real.jsonl", tmp_path / "gen.jsonl"
    write_trace(real, HAND)
    write_trace(gen, OTHER)
    assert data_main(["stats", "--compare", str(real), str(gen)]) == 0
    out = capsys.readouterr().out
    assert "reuse p tool_result" in out and "1.000 abs diff" in out and "mean distance" in out
    assert "  p50" in out and "KS" in out
    assert data_main(["stats", "--compare", str(real), str(gen), "json=true"]) == 0
    c = json.loads(capsys.readouterr().out)
    assert c["rows"][0]["metric"] == "reuse p user_input"
    assert data_main(["stats", f"trace={real}", f"compare={gen}"]) == 0  # the override form
    assert "mean distance" in capsys.readouterr().out


def test_stats_compare_bad_input_exit_2(tmp_path, capsys):
    real = tmp_path / "real.jsonl"
    write_trace(real, HAND)
    assert data_main(["stats", "--compare", str(real)]) == 2
    assert "error: stats --compare needs two trace files" in capsys.readouterr().err
    assert data_main(["stats", "--compare", str(real), str(tmp_path / "nope.jsonl")]) == 2
    assert "nope.jsonl: no such file" in capsys.readouterr().err
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"event": "write", "id": "a", "type": "user_input"}\n')
    assert data_main(["stats", "--compare", str(real), str(bad)]) == 2
    err = capsys.readouterr().err
    assert "bad.jsonl:1" in err and "tokens" in err
