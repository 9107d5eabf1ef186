"""The live manager's contract: hand-computed sessions, the record as a write-ahead log,
reopening, the one-writer lock, bad input (nothing recorded), configs from files."""

from __future__ import annotations

import gzip
import subprocess
import sys
import textwrap

import orjson
import pytest

from memlens.live import MemoryManager, RecordLocked
from memlens.trace.io import load_trace


class Tick:
    """A clock that advances one second per reading (deterministic trace times)."""

    def __init__(self) -> None:
        self.t = -1.0

    def __call__(self) -> float:
        self.t += 1.0
        return self.t


def lines(path) -> list[dict]:
    opener = gzip.open if str(path).endswith(".gz") else open
    with opener(path, "rb") as fh:
        return [orjson.loads(raw) for raw in fh if raw.strip()]


def test_window_keeps_the_latest_writes_that_fit(tmp_path):
    # budget 100, three items of 40: the third write evicts the first (FIFO)
    with MemoryManager("window", 100, tmp_path / "r.jsonl", clock=Tick()) as m:
        a = m.write("s", "first", "user_input", tokens=40)
        b = m.write("s", "second", "llm_thought", tokens=40)
        c = m.write("s", "third", "tool_result", tokens=40)
        ctx = m.context("s")
        assert [(i.id, i.text, i.type, i.tokens, i.tier) for i in ctx] == [
            (b, "second", "llm_thought", 40, "working"),
            (c, "third", "tool_result", 40, "working"),
        ]
        assert [i.value for i in ctx] == [None, None]  # window has no values
        m.used("s", [a, b])  # a was evicted: one hit, one miss
        assert m.counts() == {"hits": 1, "misses": 1, "evictions": 1}


def test_lru_keeps_what_was_used_and_demand_fetch_brings_back_a_miss(tmp_path):
    with MemoryManager("lru", 100, None, demand_fetch=True, clock=Tick()) as m:
        a = m.write("s", "a", "user_input", tokens=40)
        b = m.write("s", "b", "user_input", tokens=40)
        m.used("s", [a])  # a is now the most recent: the next write evicts b
        c = m.write("s", "c", "user_input", tokens=40)
        assert [i.id for i in m.context("s")] == [a, c]
        m.used("s", [b])  # a miss, fetched back: evicts a (least recent)
        assert [i.id for i in m.context("s")] == [b, c]
        assert m.counts() == {"hits": 1, "misses": 1, "evictions": 2}


def test_rule_values_and_a_pin(tmp_path):
    with MemoryManager("rule", 100, None, clock=Tick()) as m:
        a = m.write("s", "thinking aloud", "llm_thought", tokens=60)
        m.pin(a)
        b = m.write("s", "the user said: refund order 42", "user_input", tokens=60)
        ctx = m.context("s")
        assert [i.id for i in ctx] == [a]  # b does not fit beside the pinned a: bypassed
        assert 0 < ctx[0].value <= 1
        m.unpin(a)
        m.used("s", [b])
        assert m.counts()["misses"] == 1


def test_every_event_is_in_the_record_before_the_call_returns(tmp_path):
    path = tmp_path / "r.jsonl"
    m = MemoryManager("lru", 500, path, clock=Tick())
    header = lines(path)[0]
    assert header["event"] == "header" and header["version"] == "1.1"
    assert header["live"]["policy"] == {"_target_": "memlens.policies.lru.LRU"}
    assert header["live"]["budget"] == 500
    a = m.write("s", "hello", "user_input", tokens=3, cost=0.5, meta={"k": 1})
    assert lines(path)[-1] == {"event": "write", "id": a, "stream": "s", "t": 0.0,
                               "type": "user_input", "tokens": 3, "text": "hello", "cost": 0.5,
                               "meta": {"k": 1}}  # fmt: skip
    r = m.used("s", [a, [a]], request_id="step-1")
    assert r == "step-1" and lines(path)[-1]["needs"] == [a, [a]]
    m.annotate(a, value=0.9, note="key fact")
    assert lines(path)[-1] == {"event": "annotate", "target": a, "stream": "s", "t": 2.0,
                               "value": 0.9, "note": "key fact"}  # fmt: skip
    m.close()
    trace = load_trace(path)  # the record is a valid trace
    assert (trace.n_items, trace.n_requests, trace.n_events) == (1, 1, 3)


def test_tokens_are_counted_when_not_given(tmp_path):
    from memlens.trace.tokenizer import get_tokenizer

    with MemoryManager("window", 500, None) as m:
        m.write("s", "one two three four", "user_input")
        assert m.context("s")[0].tokens == get_tokenizer(None).count("one two three four")


def test_reopen_rebuilds_the_state_and_goes_on_appending(tmp_path):
    path = tmp_path / "r.jsonl"
    clock = Tick()
    m = MemoryManager("rule", 120, path, clock=clock)
    ids = [m.write("s", f"item {k} error" * (k % 3), "tool_result", tokens=30) for k in range(6)]
    m.used("s", ids[:2])
    before = [tuple(i) for i in m.context("s")]
    m.close()
    clock.t -= 1.0  # read at the same time again: the same values too
    m = MemoryManager("rule", 120, path, clock=clock)  # same config: reopens
    assert [tuple(i) for i in m.context("s")] == before
    new = m.write("s", "after reopening", "user_input", tokens=30)
    assert new == "m6"  # ids go on
    after = [i.id for i in m.context("s")]
    m.close()
    with MemoryManager.reopen(path, clock=clock) as m:
        assert [i.id for i in m.context("s")] == after
    assert load_trace(path).item_id[-1] == new


def test_reopen_with_another_config_is_refused(tmp_path):
    path = tmp_path / "r.jsonl"
    MemoryManager("lru", 100, path).close()
    with pytest.raises(ValueError, match="MemoryManager.reopen"):
        MemoryManager("window", 100, path)


def test_a_second_manager_on_the_record_is_refused(tmp_path):
    path = tmp_path / "r.jsonl"
    with MemoryManager("lru", 100, path):
        with pytest.raises(RecordLocked, match="another MemoryManager"):
            MemoryManager.reopen(path)
        code = textwrap.dedent(f"""
            from memlens.live import MemoryManager, RecordLocked
            try:
                MemoryManager.reopen({str(path)!r})
            except RecordLocked as exc:
                print("refused:", exc)
        """)
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
        assert out.stdout.startswith("refused: record "), out.stderr
    MemoryManager.reopen(path).close()  # closed: free again


@pytest.mark.parametrize("call, field", [
    (lambda m: m.write("s", "x", "user_input", tokens=-3), "tokens"),
    (lambda m: m.write("s", "x", "user_input", tokens=True), "tokens"),
    (lambda m: m.write("s", "x", "memo"), "type"),
    (lambda m: m.write("s", 7, "user_input"), "text"),
    (lambda m: m.write("", "x", "user_input"), "stream"),
    (lambda m: m.write("s", "x", "user_input", cost=float("nan")), "cost"),
    (lambda m: m.write("s", "x", "user_input", meta=[1]), "meta"),
    (lambda m: m.used("s", ["m1"]), "item_ids[0]"),  # m1 is stream t's
    (lambda m: m.used("s", ["m0", ["m0", "nope"]]), "item_ids[1][1]"),
    (lambda m: m.used("s", "m0"), "item_ids"),
    (lambda m: m.used("s", [["m0", "m0"]]), "item_ids[0][1]"),
    (lambda m: m.used("s", [], request_id="m0"), "request_id"),
    (lambda m: m.pin("nope"), "item_id"),
    (lambda m: m.annotate("m0", value=1.5), "value"),
    (lambda m: m.annotate("m0"), "value"),
])  # fmt: skip
def test_bad_input_names_the_field_and_records_nothing(tmp_path, call, field):
    path = tmp_path / "r.jsonl"
    with MemoryManager("lru", 100, path) as m:
        m.write("s", "x", "user_input", tokens=3)
        m.write("t", "y", "user_input", tokens=3)
        before = path.read_bytes()
        with pytest.raises((ValueError, KeyError)) as err:
            call(m)
        assert f"{field}:" in str(err.value)
        assert path.read_bytes() == before
        assert [i.id for i in m.context("s")] == ["m0"]


def test_a_closed_manager_refuses_every_call(tmp_path):
    m = MemoryManager("lru", 100, tmp_path / "r.jsonl")
    a = m.write("s", "x", "user_input", tokens=3)
    m.close()
    for call in (lambda: m.write("s", "x", "user_input"), lambda: m.context("s"),
                 lambda: m.used("s", [a]), lambda: m.pin(a)):  # fmt: skip
        with pytest.raises(ValueError, match="the manager is closed"):
            call()


def test_bad_settings_are_refused_before_a_record_exists(tmp_path):
    path = tmp_path / "r.jsonl"
    for kwargs, field in [({"policy": "nope"}, "policy"), ({"budget": 0}, "budget"),
                          ({"policy": "oracle"}, "policy"),
                          ({"policy": "rule", "admit_threshold": "high"}, "admit_threshold"),
                          ({"policy": "rule", "no_such": 1}, "no_such")]:  # fmt: skip
        with pytest.raises(ValueError, match=field):
            MemoryManager(record=path, **kwargs)
        assert not path.exists()
    with pytest.raises(ValueError, match="fsync"):
        MemoryManager("lru", 100, path, fsync="sometimes")


def test_from_config_a_tuned_file_and_a_run_config(tmp_path):
    tuned = tmp_path / "rule_tuned.yaml"
    tuned.write_text("defaults:\n  - rule_schema\n  - _self_\n"
                     "_target_: memlens.policies.rule.RuleScorer\nadmit_threshold: 0.3\n")  # fmt: skip
    with pytest.raises(ValueError, match="budget"):
        MemoryManager.from_config(tuned)
    with MemoryManager.from_config(tuned, budget=300) as m:
        assert m.config["policy"]["admit_threshold"] == 0.3 and m.config["budget"] == 300
    run = tmp_path / "resolved_config.yaml"
    run.write_text("budget: 700\ndemand_fetch: true\nseed: 4\npolicy:\n"
                   "  _target_: memlens.policies.lfu.LFU\n")  # fmt: skip
    with MemoryManager.from_config(run, tmp_path / "r.jsonl") as m:
        assert (m.config["budget"], m.config["demand_fetch"], m.config["seed"]) == (700, True, 4)
    evil = tmp_path / "evil.yaml"
    evil.write_text("_target_: subprocess.Popen\nargs: touch pwned\n")
    with pytest.raises(ValueError, match="not a registered policy"):
        MemoryManager.from_config(evil, budget=100)
    with pytest.raises(ValueError, match="no such config file"):
        MemoryManager.from_config(tmp_path / "missing.yaml", budget=100)


def test_a_gzip_record_reopens_and_appends_a_member(tmp_path):
    path = tmp_path / "r.jsonl.gz"
    with MemoryManager("window", 100, path) as m:
        a = m.write("s", "x", "user_input", tokens=30)
    with MemoryManager.reopen(path) as m:
        b = m.write("s", "y", "user_input", tokens=30)
        assert [i.id for i in m.context("s")] == [a, b]
    assert load_trace(path).item_id == [a, b]


def test_a_torn_last_line_is_cut_on_reopen(tmp_path):
    path = tmp_path / "r.jsonl"
    with MemoryManager("window", 100, path) as m:
        a = m.write("s", "x", "user_input", tokens=30)
    with open(path, "ab") as fh:
        fh.write(b'{"event":"write","id":"m1","str')  # a crash in the middle of a write
    with MemoryManager.reopen(path) as m:
        assert [i.id for i in m.context("s")] == [a]
        m.write("s", "y", "user_input", tokens=30)
    assert len(load_trace(path).item_id) == 2


def test_a_document_store_gets_every_item_and_is_refilled_after_a_restart(tmp_path):
    from memlens.retrieval.storage import InProcessDocuments, SQLiteDocuments

    path, db = tmp_path / "r.jsonl", tmp_path / "docs.db"
    with MemoryManager("lru", 100, path, documents=SQLiteDocuments(db)) as m:
        a = m.write("s", "kept on disk", "tool_result", tokens=5, meta={"tool": "lookup"})
        assert m.document(a) == {"text": "kept on disk", "type": "tool_result", "tokens": 5,
                                 "stream": "s", "meta": {"tool": "lookup"}}  # fmt: skip
    assert SQLiteDocuments(db).get(a)["meta"] == {"tool": "lookup"}
    fresh = InProcessDocuments()  # a store that lost everything: refilled from the record
    with MemoryManager.reopen(path, documents=fresh) as m:
        assert fresh.get(a)["text"] == "kept on disk"
    with pytest.raises(ValueError, match="documents"):
        MemoryManager("lru", 100, None, documents={})
