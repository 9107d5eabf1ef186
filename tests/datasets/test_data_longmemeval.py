"""LongMemEval's schema -> a trace whose needs are the has_answer turns (a file we wrote)."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

import pytest
from memlens.datasets.convert_longmemeval import convert_longmemeval
from memlens.datasets.sources import SourceError

from memlens.cli.data import main as data_main
from memlens.trace.io import load_trace

TINY = Path(__file__).parent / "data" / "longmemeval_tiny.json"


def test_turns_writes_has_answer_needs():
    events, header = convert_longmemeval(TINY)
    writes = [e for e in events if e["event"] == "write"]
    reqs = [e for e in events if e["event"] == "request"]
    assert [w["id"] for w in writes] == ["q1/s_a:0", "q1/s_a:1", "q1/s_b:0", "q1/s_b:1",
                                         "q2_abs/s_c:0", "q2_abs/s_c:1"]  # fmt: skip
    assert [w["type"] for w in writes[:2]] == ["user_input", "llm_thought"]
    assert len(reqs) == 1 and reqs[0]["needs"] == ["q1/s_a:0"]  # the abstention has none
    assert reqs[0]["meta"]["answer"] == "Business Administration"
    assert header["evidence"] == "annotated" and header["license"] == "MIT"
    assert header["report"]["questions_without_evidence"] == 1
    start = datetime(2023, 5, 20, 2, 21, tzinfo=UTC).timestamp()
    assert writes[0]["t"] == start and writes[1]["t"] == start + 30.0
    assert reqs[0]["t"] == datetime(2023, 5, 30, 23, 40, tzinfo=UTC).timestamp()


def test_cli_convert_then_derive_and_score(tmp_path):
    out = tmp_path / "lme.jsonl"
    assert data_main(["convert", "dataset=longmemeval", f"src={TINY}", f"out={out}"]) == 0
    assert load_trace(out).n_requests == 1
    derived = tmp_path / "d.jsonl"
    assert data_main(["derive", f"trace={out}", f"out={derived}", "needs.method=bm25"]) == 0
    head = json.loads(derived.read_text().splitlines()[0])
    assert head["needs"]["method"] == "bm25" and head["evidence"] == "derived"
    # the question and answer share "Business Administration" with the first two turns; the
    # assistant's turn only repeats what the user introduced, so it is an alternative, never
    # the sole source: BM25 names s_a:1 or s_a:0, and either way s_a:0 is in the need.
    req = [json.loads(x) for x in derived.read_text().splitlines()[1:]]
    req = next(e for e in req if e["event"] == "request")
    members = {m for n in req["needs"] for m in ([n] if isinstance(n, str) else n)}
    assert "q1/s_a:0" in members and req["meta"]["provenance"]


@pytest.mark.parametrize(("edit", "where"), [
    (lambda d: d[0].pop("haystack_dates"), "[0].haystack_dates: missing field"),
    (lambda d: d[0]["haystack_sessions"][1][0].update(role="bot"), "[0].haystack_sessions[1][0].role"),
    (lambda d: d[0].update(question_date="tuesday"), "[0].question_date: cannot parse date"),
])  # fmt: skip
def test_bad_input_names_field(tmp_path, edit, where):
    data = json.loads(TINY.read_text())
    edit(data)
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(data))
    with pytest.raises(SourceError, match=where.replace("[", r"\[").replace("]", r"\]")):
        convert_longmemeval(bad)


def test_derive_and_score_refuse_bad_input_before_work(tmp_path, capsys):
    """A missing trace, an unknown method, a bad target: exit 2, one error line, nothing
    written."""
    out = tmp_path / "o.jsonl"
    assert data_main(["derive", f"trace={tmp_path / 'none.jsonl'}", f"out={out}"]) == 2
    assert data_main(["derive", f"trace={TINY}", f"out={out}", "needs.method=magic"]) == 2
    assert data_main(["derive", f"trace={TINY}", f"out={out}", "target_precision=2"]) == 2
    assert (
        data_main(["score-needs", f"derived={tmp_path / 'none.jsonl'}", f"reference={TINY}"]) == 2
    )
    err = capsys.readouterr().err.strip().splitlines()
    assert err and all(line.startswith("error: ") for line in err)
    assert "needs.method must be one of" in "\n".join(err)
    assert not out.exists()
