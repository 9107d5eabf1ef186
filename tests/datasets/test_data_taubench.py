"""tau-bench converter: derived needs (whole-token matching), pins, reproducibility, bad input."""

from __future__ import annotations

import re

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st
from memlens.datasets.convert_taubench import argument_values, convert_taubench, token_pattern
from memlens.datasets.sources import SourceError

from memlens.cli.data import main as data_main
from memlens.config.store import DATA_DIR
from memlens.trace.io import load_trace, trace_from_events

SRC = DATA_DIR / "taubench" / "gpt-4o-airline.json"


def test_argument_values():
    args = {"user_id": "mia_li_3668", "flights": [{"flight_number": "HAT136", "date": "2024-05-20"}],
            "total": 30.0, "price": 12.5, "insurance": False, "note": None, "blank": " ", "n": 2}  # fmt: skip
    assert argument_values(args) == [
        ("user_id", "mia_li_3668"), ("flights[].flight_number", "HAT136"),
        ("flights[].date", "2024-05-20"), ("total", "30"), ("price", "12.5"), ("n", "2"),
    ]  # fmt: skip


@pytest.mark.parametrize(
    "value, text, hit",
    [
        ("mia_li_3668", "Sure, my user ID is MIA_LI_3668.", True),
        ("HAT13", "flight HAT136 on May 20", False),
        ("HAT136", '{"flight_number": "HAT136"}', True),
        ("1", "I need 10 bags", False),
        ("2024-05-20", "date 2024-05-20T10:00", False),
        ("New York", "from new york to Seattle", True),
        ("york", "yorkshire", False),
    ],
)
def test_token_pattern_cases(value, text, hit):
    assert bool(token_pattern(value).search(text.lower())) is hit


_word = st.text(alphabet="abcdefghijXYZ0123456789_-.@", min_size=1, max_size=12)


@given(_word, _word, _word)
def test_token_pattern_whole_tokens(value, left, right):
    pat = token_pattern(value)
    assert pat.search(f"{left} {value.upper()} {right}".lower())  # case-insensitive, spaced
    if re.match(r"\w", value):  # glued to a preceding letter: not a whole token
        assert not pat.search(f"q{value}".lower())
    if re.search(r"\w$", value):
        assert not pat.search(f"{value}7".lower())


def _traj(calls_args: list[dict]) -> dict:
    traj = [
        {"role": "system", "content": "Policy: cabins are basic_economy, economy, business."},
        {"role": "user", "content": "Hi, my user id is mia_li_3668."},
        {"role": "assistant", "content": "Sure, where to?"},
        {"role": "user", "content": "Book HAT136 on 2024-05-20 please, for MIA_LI_3668."},
    ]
    for j, args in enumerate(calls_args):
        traj.append({"role": "assistant", "content": None, "tool_calls": [
            {"id": f"c{j}", "type": "function",
             "function": {"name": "book", "arguments": orjson.dumps(args).decode()}}]})  # fmt: skip
        traj.append({"role": "tool", "tool_call_id": f"c{j}", "name": "book", "content": f"ok {j}"})
    return {"task_id": 7, "trial": 1, "reward": 1.0, "traj": traj}


def _src(tmp_path, data):
    p = tmp_path / "tau.json"
    p.write_bytes(orjson.dumps(data))
    return p


def test_tiny_trajectory(tmp_path):
    args = {"user_id": "mia_li_3668", "flight": "HAT136", "date": "2024-05-20", "cabin": "economy",
            "confirm": True, "code": "ZZZ999"}  # fmt: skip
    events, header = convert_taubench(_src(tmp_path, [_traj([args, {}])]), source="first")
    s = "task7-trial1"
    assert [(e["event"], e.get("id", e.get("target"))) for e in events] == [
        ("write", f"{s}/m0"), ("pin", f"{s}/m0"), ("write", f"{s}/m1"), ("write", f"{s}/m2"),
        ("write", f"{s}/m3"), ("request", f"{s}/r4"), ("write", f"{s}/m4.0"),
        ("write", f"{s}/m5"), ("write", f"{s}/m6.0"), ("write", f"{s}/m7"),
    ]  # fmt: skip
    req = events[5]
    # user_id first appears in m1; flight and date in m3; "economy" only in the system prompt
    assert req["needs"] == [f"{s}/m1", f"{s}/m3", f"{s}/m0"]
    assert req["meta"]["evidence"] == "derived"
    assert req["meta"]["values"] == 5 and req["meta"]["values_matched"] == 4
    assert req["meta"]["unmatched"] == ["code"]
    types = {e["id"]: e["type"] for e in events if e["event"] == "write"}
    assert types == {f"{s}/m0": "agent_state", f"{s}/m1": "user_input", f"{s}/m2": "llm_thought",
                     f"{s}/m3": "user_input", f"{s}/m4.0": "llm_thought", f"{s}/m5": "tool_result",
                     f"{s}/m6.0": "llm_thought", f"{s}/m7": "tool_result"}  # fmt: skip
    rep = header["report"]
    assert (
        rep["tool_calls"] == 2
        and rep["requests"] == 1
        and rep["requests_dropped_no_needs"] == 2  # the call with no arguments, and m2
    )
    assert rep["argument_values"] == 5 and rep["values_unmatched"] == 1
    assert rep["values_found_in_messages"] == 3 and rep["values_found_in_system_prompt_only"] == 1
    assert header["evidence"] == "derived" and header["unmatched_by_argument"] == {"book.code": 1}
    trace_from_events(events)


def test_alternatives_default(tmp_path):
    """A value several messages hold is a group of alternatives, not one pick; a group met
    whenever another need is met is left out (user_id's m1-or-m3 is implied by m3)."""
    args = {"user_id": "mia_li_3668", "flight": "HAT136"}
    src = _src(tmp_path, [_traj([{"user_id": "mia_li_3668"}, args])])
    events, header = convert_taubench(src)
    reqs = [e for e in events if e["event"] == "request"]
    s = "task7-trial1"
    assert reqs[0]["needs"] == [[f"{s}/m1", f"{s}/m3"]]
    # by the second call the id is also in the first call's write m4.0
    assert reqs[1]["needs"] == [f"{s}/m3"]
    assert header["version"] == "1.1" and header["needs"]["pick"] == "alternatives"
    assert header["report"]["request_needs_with_alternatives"] == 1
    trace_from_events([{"event": "header", **header}, *events])
    firsts = [e["needs"] for e in convert_taubench(src, source="first")[0] if "needs" in e]
    assert firsts == [[f"{s}/m1"], [f"{s}/m1", f"{s}/m3"]]


def test_source_last_and_keep_empty(tmp_path):
    src = _src(tmp_path, [_traj([{"user_id": "mia_li_3668"}, {"code": "nowhere"}])])
    events, header = convert_taubench(src, source="last", keep_empty=True)
    reqs = [e for e in events if e["event"] == "request" and "tools" in e["meta"]]
    assert reqs[0]["needs"] == ["task7-trial1/m3"]  # the latest mention, not the first
    assert reqs[1]["needs"] == [] and header["report"]["requests"] == 3  # m2 (text) too
    trace_from_events(events)


def test_real_slice_needs_are_sound(tmp_path):
    data = orjson.loads(SRC.read_bytes())[:8]
    events, header = convert_taubench(_src(tmp_path, data))
    # every need is an earlier write of the same stream
    trace = trace_from_events([{"event": "header", **header}, *events])
    assert trace.n_streams == 8
    text = {e["id"]: e["text"].lower() for e in events if e["event"] == "write"}
    for e in (e for e in events if e["event"] == "request"):
        values = [v.lower() for a in e["meta"]["arguments"] for _, v in argument_values(a)]
        alternatives = [
            n for group in e["needs"] for n in ([group] if isinstance(group, str) else group)
        ]
        for need in alternatives:  # independent check: some value occurs as a whole token
            tokens = re.split(r"[^0-9a-z_]+", text[need])
            assert any(
                v in text[need] and all(w in tokens for w in re.split(r"[^0-9a-z_]+", v) if w)
                for v in values
            ), (e["id"], need)
    pins = [e for e in events if e["event"] == "pin"]
    assert len(pins) == 8 and all(p["target"].endswith("/m0") for p in pins)


def test_shipped_trace_reproduces_byte_for_byte(tmp_path):
    out = tmp_path / "airline.jsonl.gz"
    assert data_main(["convert", "dataset=taubench", f"src={SRC}", f"out={out}"]) == 0
    assert out.read_bytes() == (DATA_DIR / "taubench" / "airline.jsonl.gz").read_bytes()
    trace = load_trace(out)
    assert trace.header["evidence"] == "derived" and trace.n_streams == 200


@pytest.mark.parametrize(
    "mutate, field",
    [
        (lambda d: d[0]["traj"][4]["tool_calls"][0]["function"].__setitem__("arguments", "{bad"),
         "[0].traj[4].tool_calls[0].function.arguments"),
        (lambda d: d[0]["traj"][1].pop("role"), "[0].traj[1].role"),
        (lambda d: d[0]["traj"][1].__setitem__("role", "robot"), "[0].traj[1].role"),
        (lambda d: d[0].pop("traj"), "[0].traj"),
        (lambda d: d[0]["traj"][2].__setitem__("content", 5), "[0].traj[2].content"),
    ],
)  # fmt: skip
def test_bad_input_names_field_and_writes_nothing(tmp_path, capsys, mutate, field):
    data = [_traj([{"user_id": "mia_li_3668"}])]
    mutate(data)
    src = _src(tmp_path, data)
    with pytest.raises(SourceError) as info:
        convert_taubench(src)
    assert info.value.field == field
    out = tmp_path / "out.jsonl.gz"
    assert data_main(["convert", "dataset=taubench", f"src={src}", f"out={out}"]) == 2
    err = capsys.readouterr().err
    assert field in err and "tau.json" in err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["tau.json"]
