"""``memlens data stats``: counts and evidence age in tokens."""

from __future__ import annotations

import json

import numpy as np
from memlens.datasets.archetypes import generate
from memlens.datasets.stats import evidence_age_tokens, trace_stats

from memlens.datacli import main as data_main
from memlens.trace_io import trace_from_events, write_trace


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


def test_stats_bad_trace_exit_2(tmp_path, capsys):
    path = tmp_path / "bad.jsonl"
    path.write_text('{"event": "write", "id": "a", "type": "user_input"}\n')
    assert data_main(["stats", f"trace={path}"]) == 2
    err = capsys.readouterr().err
    assert "bad.jsonl:1" in err and "tokens" in err
