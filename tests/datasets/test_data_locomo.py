"""LoCoMo converter: evidence normalisation, placements, reproducibility, bad input."""

from __future__ import annotations

import gzip
import json
from datetime import UTC, datetime
from pathlib import Path

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st
from memlens.datasets.convert_locomo import convert_locomo, normalise_evidence
from memlens.datasets.sources import SourceError

from memlens.cli.data import main as data_main
from memlens.config.store import DATA_DIR
from memlens.trace.io import load_trace, trace_from_events, write_trace

SRC = DATA_DIR / "locomo" / "locomo10.json"


# ----------------------------------------------------------------- normalisation
@pytest.mark.parametrize(
    "raw, ids, repairs, bad",
    [
        ("D1:3", ["D1:3"], {}, []),
        ("D8:6; D9:17", ["D8:6", "D9:17"], {"split": 1}, []),
        ("D9:1 D4:4 D4:6", ["D9:1", "D4:4", "D4:6"], {"split": 1}, []),
        ("D:11:26", ["D11:26"], {"stray_colon": 1}, []),
        ("D30:05", ["D30:5"], {"leading_zero": 1}, []),
        ("D", [], {}, ["D"]),
        ("", [], {}, []),
        ("D2:1,D2:2", ["D2:1", "D2:2"], {"split": 1}, []),
    ],
)
def test_normalise_evidence_cases(raw, ids, repairs, bad):
    got_ids, got_repairs, got_bad = normalise_evidence(raw)
    assert got_ids == ids
    assert dict(got_repairs) == repairs
    assert got_bad == bad


_id = st.tuples(st.integers(1, 40), st.integers(1, 900))


@given(
    st.lists(
        st.tuples(
            _id, st.sampled_from(["plain", "zero", "colon"]), st.sampled_from(["; ", " ", ","])
        ),
        min_size=1,
        max_size=6,
    )
)
def test_normalise_evidence_recovers_canonical_ids(parts):
    rendered = []
    for (s, t), style, _ in parts:
        if style == "plain":
            rendered.append(f"D{s}:{t}")
        elif style == "zero":
            rendered.append(f"D0{s}:00{t}")
        else:
            rendered.append(f"D:{s}:{t}")
    raw = "".join(r + sep for r, (_, _, sep) in zip(rendered, parts)).rstrip("; ,")
    ids, repairs, bad = normalise_evidence(raw)
    assert ids == [f"D{s}:{t}" for (s, t), _, _ in parts]
    assert bad == []
    assert repairs["split"] == (len(parts) > 1)
    assert repairs["stray_colon"] == sum(style == "colon" for _, style, _ in parts)


# ------------------------------------------------------------------- tiny source
def _tiny() -> list[dict]:
    return [
        {
            "sample_id": "c1",
            "conversation": {
                "speaker_a": "Ann",
                "speaker_b": "Bob",
                "session_1_date_time": "1:56 pm on 8 May, 2023",
                "session_1": [
                    {"speaker": "Ann", "dia_id": "D1:1", "text": "I adopted a cat"},
                    {"speaker": "Bob", "dia_id": "D1:2", "text": "Nice!", "blip_caption": "a cat"},
                ],
                "session_2_date_time": "10:00 am on 9 May, 2023",
                "session_2": [
                    {"speaker": "Bob", "dia_id": "D2:1", "text": "I moved to Paris"},
                    {"speaker": "Ann", "dia_id": "D2:2", "text": "Cool"},
                ],
            },
            "qa": [
                {"question": "What pet?", "answer": "cat", "evidence": ["D1:1"], "category": 4},
                {
                    "question": "Where?",
                    "answer": "Paris",
                    "evidence": ["D2:1; D1:02"],
                    "category": 1,
                },
                {"question": "Nothing", "answer": "x", "evidence": [], "category": 3},
                {
                    "question": "Bad",
                    "adversarial_answer": "y",
                    "evidence": ["D9:9", "D"],
                    "category": 5,
                },
                {"question": "Mixed", "answer": "z", "evidence": ["D:1:2", "D7:1"], "category": 2},
            ],
        }
    ]


def _write_src(tmp_path: Path, data) -> Path:
    p = tmp_path / "locomo.json"
    p.write_bytes(orjson.dumps(data))
    return p


def test_tiny_end_placement(tmp_path):
    events, header = convert_locomo(_write_src(tmp_path, _tiny()), placement="end")
    kinds = [(e["event"], e["id"]) for e in events]
    assert kinds == [
        ("write", "c1/D1:1"), ("write", "c1/D1:2"), ("write", "c1/D2:1"), ("write", "c1/D2:2"),
        ("request", "c1/q0"), ("request", "c1/q1"), ("request", "c1/q4"),
    ]  # fmt: skip
    by_id = {e["id"]: e for e in events}
    assert by_id["c1/D1:1"]["type"] == "user_input" and by_id["c1/D2:1"]["type"] == "user_input"
    assert (
        by_id["c1/D2:1"]["meta"]["speaker"] == "Bob"
    )  # both are people: the name tells them apart
    t0 = datetime(2023, 5, 8, 13, 56, tzinfo=UTC).timestamp()
    t1 = datetime(2023, 5, 9, 10, 0, tzinfo=UTC).timestamp()
    assert by_id["c1/D1:1"]["t"] == t0 and by_id["c1/D1:2"]["t"] == t0 + 30
    assert by_id["c1/D2:2"]["t"] == t1 + 30 and by_id["c1/q0"]["t"] == t1 + 60
    assert by_id["c1/D1:2"]["text"] == "Nice! [shares a photo: a cat]"
    assert by_id["c1/q1"]["needs"] == ["c1/D2:1", "c1/D1:2"]
    assert by_id["c1/q4"]["needs"] == ["c1/D1:2"]
    assert by_id["c1/q4"]["meta"] == {
        "category": 2,
        "qa_index": 4,
        "answer": "z",
        "evidence_dropped": ["D7:1"],
    }
    rep = header["report"]
    assert rep["questions"] == 5 and rep["questions_kept"] == 3
    assert rep["questions_without_evidence"] == 1 and rep["questions_all_evidence_dropped"] == 1
    assert rep["dropped_dangling"] == 2 and rep["dropped_unparseable"] == 1
    assert (
        rep["repaired_split"] == 1
        and rep["repaired_leading_zero"] == 1
        and rep["repaired_stray_colon"] == 1
    )
    assert header["tokenizer"] == "approx" and header["placement"] == "end"
    trace = trace_from_events(events)
    assert trace.n_streams == 1 and trace.n_requests == 3 and trace.n_items == 4


def test_tiny_after_evidence_placement(tmp_path):
    events, _ = convert_locomo(_write_src(tmp_path, _tiny()), placement="after_evidence")
    order = [e["id"] for e in events]
    # q0 and q4 need only session 1 -> right after it; q1 needs D2:1 -> after session 2
    assert order == ["c1/D1:1", "c1/D1:2", "c1/q0", "c1/q4", "c1/D2:1", "c1/D2:2", "c1/q1"]
    trace_from_events(events)  # times are non-decreasing, needs precede requests


def test_speaker_types_configurable(tmp_path):
    events, _ = convert_locomo(
        _write_src(tmp_path, _tiny()), speaker_a_type="agent_state", speaker_b_type="tool_result"
    )
    types = {e["id"]: e.get("type") for e in events}
    assert types["c1/D1:1"] == "agent_state" and types["c1/D1:2"] == "tool_result"


# ------------------------------------------------------------- the real source
def test_real_source_messy_evidence_counts():
    events, header = convert_locomo(SRC, placement="end")
    rep = header["report"]
    assert rep["conversations"] == 10 and rep["turns"] == 5882 and rep["questions"] == 1986
    # the six messy strings of locomo10.json: 4 split (one of them "D8:6; D9:17"), "D:11:26",
    # "D30:05", "D" (unparseable) and 2 well-formed ids that point nowhere (D10:19, D4:36)
    assert rep["repaired_split"] == 4
    assert rep["repaired_stray_colon"] == 1 and rep["repaired_leading_zero"] == 1
    assert rep["dropped_unparseable"] == 1 and rep["dropped_dangling"] == 2
    dropped = {(d["sample_id"], tuple(d["dropped"])) for d in header["dropped_evidence"]}
    assert dropped == {("conv-42", ("D10:19",)), ("conv-42", ("D",)), ("conv-47", ("D4:36",))}
    by_id = {e["id"]: e for e in events}
    q = next(e for e in events if e["event"] == "request" and "D11:26" in " ".join(e["needs"]))
    assert q["stream"] == "conv-43" and "conv-43/D11:26" in q["needs"]
    assert all(n in by_id for e in events if e["event"] == "request" for n in e["needs"])


@pytest.mark.parametrize(
    "name, placement",
    [("locomo10-end.jsonl.gz", "end"), ("locomo10-after_evidence.jsonl.gz", "after_evidence")],
)
def test_shipped_trace_reproduces_byte_for_byte(tmp_path, name, placement):
    out = tmp_path / name
    assert (
        data_main(
            ["convert", "dataset=locomo", f"src={SRC}", f"out={out}", f"placement={placement}"]
        )
        == 0
    )
    assert out.read_bytes() == (DATA_DIR / "locomo" / name).read_bytes()
    trace = load_trace(out)
    assert trace.header["converter"] == "locomo" and trace.header["tokenizer"] == "approx"


# -------------------------------------------------------------------- bad input
def test_malformed_json_names_file_and_exits_2(tmp_path, capsys):
    src = tmp_path / "broken.json"
    src.write_text('[{"sample_id": "c1", ')
    out = tmp_path / "out.jsonl.gz"
    assert data_main(["convert", "dataset=locomo", f"src={src}", f"out={out}"]) == 2
    err = capsys.readouterr().err
    assert "broken.json" in err and "malformed JSON" in err
    assert not out.exists() and list(tmp_path.iterdir()) == [src]


@pytest.mark.parametrize(
    "mutate, field",
    [
        (lambda d: d[0]["conversation"]["session_2"][1].pop("dia_id"), "[0].conversation.session_2[1].dia_id"),
        (lambda d: d[0]["qa"][1].pop("evidence"), "[0].qa[1].evidence"),
        (lambda d: d[0].pop("sample_id"), "[0].sample_id"),
        (lambda d: d[0]["conversation"].__setitem__("session_2_date_time", "yesterday"),
         "[0].conversation.session_2_date_time"),
        (lambda d: d[0]["conversation"]["session_1"][0].__setitem__("speaker", "Eve"),
         "[0].conversation.session_1[0].speaker"),
        (lambda d: d[0]["qa"][0].__setitem__("evidence", "D1:1"), "[0].qa[0].evidence"),
    ],
)  # fmt: skip
@pytest.mark.slow  # kept out of the default run (6-minute budget); make test-all runs it
def test_missing_or_bad_field_is_named(tmp_path, capsys, mutate, field):
    data = _tiny()
    mutate(data)
    src = _write_src(tmp_path, data)
    with pytest.raises(SourceError) as info:
        convert_locomo(src)
    assert info.value.field == field and str(src) in str(info.value)
    out = tmp_path / "o.jsonl"
    write_trace(out, [])  # an existing good file must survive a failed conversion untouched
    before = out.read_bytes()
    assert (
        data_main(["convert", "dataset=locomo", f"src={src}", f"out={out}", "overwrite=true"]) == 2
    )
    assert field in capsys.readouterr().err
    assert out.read_bytes() == before


def test_header_is_first_line(tmp_path):
    out = tmp_path / "t.jsonl.gz"
    assert (
        data_main(
            ["convert", "dataset=locomo", f"src={_write_src(tmp_path, _tiny())}", f"out={out}"]
        )
        == 0
    )
    first = json.loads(gzip.open(out, "rt").readline())
    assert first["event"] == "header" and first["report"]["questions_kept"] == 3
