"""``memlens data import openai``: OpenAI chat-completions logs -> traces with derived needs."""

from __future__ import annotations

import json

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st
from memlens.datasets.needs_derivation import NeedsSettings
from memlens.datasets.openai_import import Roles, import_openai, read_conversations
from memlens.datasets.sources import SourceError

from memlens.cli.data import main as data_main
from memlens.trace.io import load_trace, trace_from_events


def _call(cid: str, name: str, args: dict) -> dict:
    return {"id": cid, "type": "function",
            "function": {"name": name, "arguments": json.dumps(args)}}  # fmt: skip


def _log() -> list[dict]:
    return [
        {"role": "system", "content": "You are a support agent."},
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "Refund order A-1042,"},
                {"type": "text", "text": "it arrived broken."},
            ],
        },  # fmt: skip
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [_call("c1", "get_order", {"order_id": "A-1042"})],
        },  # fmt: skip
        {
            "role": "tool",
            "tool_call_id": "c1",
            "name": "get_order",
            "cost": 0.002,
            "latency_ms": 340,
            "content": '{"order_id": "A-1042", "total": 59.9}',
        },  # fmt: skip
        {"role": "assistant", "content": "A-1042 qualifies.", "usage": {"prompt_tokens": 80}},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [_call("c2", "refund", {"order_id": "A-1042"})],
        },  # fmt: skip
    ]


def _write(tmp_path, name: str, data) -> object:
    p = tmp_path / name
    if name.endswith(".jsonl"):
        p.write_text("".join(json.dumps(row) + "\n" for row in data))
    else:
        p.write_bytes(orjson.dumps(data))
    return p


def test_one_conversation_by_hand(tmp_path):
    src = _write(tmp_path, "chat.json", {"messages": _log()})
    events, header = import_openai(src)
    s = "chat"
    assert [(e["event"], e.get("id", e.get("target"))) for e in events] == [
        ("write", f"{s}/m0"), ("pin", f"{s}/m0"), ("write", f"{s}/m1"),
        ("request", f"{s}/r2"), ("write", f"{s}/m2.0"), ("write", f"{s}/m3"),
        ("write", f"{s}/m4"), ("request", f"{s}/r5"), ("write", f"{s}/m5.0"),
    ]  # fmt: skip
    by = {e.get("id"): e for e in events}
    assert by[f"{s}/m1"]["text"] == "Refund order A-1042,\nit arrived broken."
    assert [by[f"{s}/m{k}"]["type"] for k in (0, 1, 3, 4)] == [
        "agent_state", "user_input", "tool_result", "llm_thought"]  # fmt: skip
    assert by[f"{s}/m2.0"]["type"] == "llm_thought"
    assert by[f"{s}/m3"]["cost"] == 0.002 and by[f"{s}/m3"]["meta"]["latency_s"] == 0.34
    assert by[f"{s}/r2"]["needs"] == [f"{s}/m1"]
    assert "usage" not in by[f"{s}/r2"]["meta"] and "usage" not in by[f"{s}/m4"]["meta"]
    # by the refund, A-1042 is in the user turn, the first call, the tool output and the text
    assert by[f"{s}/r5"]["needs"] == [[f"{s}/m1", f"{s}/m2.0", f"{s}/m3", f"{s}/m4"]]
    assert by[f"{s}/r5"]["meta"]["evidence"] == "derived"
    assert header["version"] == "1.1" and header["needs"]["method"] == "args"
    rep = header["report"]
    assert (rep["assistant_turns"], rep["requests"], rep["requests_dropped_no_needs"]) == (3, 2, 1)
    assert rep["pins"] == 1 and rep["tool_calls"] == 2
    trace = trace_from_events([{"event": "header", **header}, *events])
    assert trace.n_streams == 1


def test_usage_goes_to_the_request(tmp_path):
    src = _write(tmp_path, "chat.json", _log())
    events, _ = import_openai(src, keep_empty=True)
    (r4,) = [e for e in events if e.get("id") == "chat/r4"]
    assert r4["meta"]["usage"] == {"prompt_tokens": 80} and r4["needs"] == []


def test_roles_and_pinning_configurable(tmp_path):
    src = _write(tmp_path, "chat.json", _log())  # a bare list of messages
    roles = Roles(system="user_input", assistant="agent_state", pin_system=False)
    events, header = import_openai(src, roles=roles)
    assert not [e for e in events if e["event"] == "pin"]
    types = {e["id"]: e["type"] for e in events if e["event"] == "write"}
    assert types["chat/m0"] == "user_input" and types["chat/m4"] == "agent_state"
    assert header["roles"]["pin_system"] is False
    with pytest.raises(ValueError, match="roles.tool must be one of"):
        Roles(tool="output")


def test_first_pick_writes_a_version_1_trace(tmp_path):
    src = _write(tmp_path, "chat.json", _log())
    events, header = import_openai(src, needs=NeedsSettings(pick="first"))
    assert "version" not in header
    assert [e["needs"] for e in events if e["event"] == "request"] == [["chat/m1"], ["chat/m1"]]


def test_directory_jsonl_rows_and_stream_names(tmp_path):
    d = tmp_path / "logs"
    d.mkdir()
    _write(d, "b.jsonl", [{"id": "x", "messages": _log()}, _log(), {"messages": _log()}])
    _write(d, "a.json", {"id": "x", "messages": _log()})
    (d / "notes.txt").write_text("ignored")
    names = [c.stream for c in read_conversations(d)]
    assert names == ["x", "x-2", "b-2", "b-3"]  # a.json first; row numbers name the rest


def test_cli_import_positional_and_keyword_forms_agree(tmp_path, capsys):
    src = _write(tmp_path, "chat.jsonl", [_log(), _log()])
    a, b = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    assert data_main(["import", "openai", str(src), f"out={a}"]) == 0
    assert data_main(["import", "format=openai", f"src={src}", f"out={b}"]) == 0
    assert a.read_bytes() == b.read_bytes()
    out = capsys.readouterr().out
    assert f"wrote 18 events to {a}" in out and "needs derived by args" in out
    t = load_trace(a)
    assert t.header["needs"]["evidence"] == "derived" and t.n_streams == 2
    assert data_main(["import", "openai", str(src), f"out={a}"]) == 2  # exists: overwrite=true
    assert "overwrite=true" in capsys.readouterr().err


def test_cli_needs_and_roles_settings(tmp_path):
    src = _write(tmp_path, "chat.json", _log())
    out = tmp_path / "o.jsonl"
    argv = ["import", "openai", str(src), f"out={out}", "needs.method=union",
            "needs.overlap_top_k=2", "roles.assistant=agent_state"]  # fmt: skip
    assert data_main(argv) == 0
    h = load_trace(out).header
    assert h["needs"]["method"] == "union" and h["needs"]["overlap_top_k"] == 2
    assert h["roles"]["assistant"] == "agent_state"


@pytest.mark.slow  # kept out of the default run (6-minute budget); make test-all runs it
def test_cli_help_lists_the_needs_settings(capsys):
    assert data_main(["import", "--help"]) == 0
    text = capsys.readouterr().out
    assert "needs.method=args" in text and "roles.system=agent_state" in text


@pytest.mark.parametrize(
    "data, name, where",
    [
        ([{"role": "user", "content": "hi"}, {"content": "x"}], "c.json", "[1].role"),
        ([{"role": "robot", "content": "x"}], "c.json", "[0].role"),
        ({"msgs": []}, "c.json", "messages"),
        ([{"messages": 3}], "c.jsonl", "line 1: messages"),
        ([7], "c.jsonl", "line 1"),
        ([{"role": "user", "content": 5}], "c.json", "[0].content"),
        ([{"role": "tool", "content": "x", "cost": "cheap"}], "c.json", "[0].cost"),
        ([[{"role": "user", "content": "a"}], [{"role": "assistant", "tool_calls": [
            {"function": {"name": "f", "arguments": "{bad"}}]}]], "c.jsonl",
         "line 2: [0].tool_calls[0].function.arguments"),
        ([[{"role": "user", "content": "a"}], [{"role": "user"}, {"role": "assistant",
          "tool_calls": [{"function": {"arguments": "{}"}}]}]], "c.jsonl",
         "line 2: [1].tool_calls[0].function.name"),
    ],
)  # fmt: skip
@pytest.mark.slow  # kept out of the default run (6-minute budget); make test-all runs it
def test_bad_input_names_file_row_field_and_writes_nothing(tmp_path, capsys, data, name, where):
    src = _write(tmp_path, name, data)
    with pytest.raises(SourceError) as info:
        import_openai(src)
    assert info.value.field == where
    out = tmp_path / "out.jsonl"
    assert data_main(["import", "openai", str(src), f"out={out}"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"error: {src}: {where}") and len(err.splitlines()) == 1
    assert not out.exists()


def test_malformed_jsonl_line_and_bad_settings(tmp_path, capsys):
    src = tmp_path / "c.jsonl"
    src.write_text('{"messages": []}\n{oops\n')
    assert data_main(["import", "openai", str(src), f"out={tmp_path / 'o.jsonl'}"]) == 2
    assert "c.jsonl: line 2: malformed JSON" in capsys.readouterr().err
    good = _write(tmp_path, "g.json", _log())
    for bad, says in (("needs.method=magic", "needs.method must be one of"),
                      ("format=anthropic", "format must be one of"),
                      ("roles.user=person", "roles.user must be one of")):  # fmt: skip
        assert data_main(["import", "openai", str(good), f"out={tmp_path / 'o.jsonl'}", bad]) == 2
        assert says in capsys.readouterr().err
    assert not (tmp_path / "o.jsonl").exists()


_text = st.text(alphabet="ab12 _-XY", max_size=12)
_msg = st.one_of(
    st.builds(lambda c: {"role": "user", "content": c}, _text),
    st.builds(lambda c: {"role": "tool", "content": c}, _text),
    st.builds(
        lambda c, v: {"role": "assistant", "content": c, "tool_calls": [_call("c", "f", {"v": v})]},
        st.one_of(st.none(), _text),
        _text,
    ),  # fmt: skip
)


@given(st.lists(st.lists(_msg, max_size=8), min_size=1, max_size=3),
       st.sampled_from(["args", "overlap", "union"]))  # fmt: skip
def test_any_wellformed_log_gives_a_valid_trace(tmp_path_factory, convs, method):
    """Whatever the messages, the trace validates (needs are earlier writes of the stream) and
    every ``args`` need holds one of the turn's argument values."""
    d = tmp_path_factory.mktemp("h")
    src = _write(d, "h.jsonl", [{"messages": [{"role": "system", "content": "sys"}, *c]}
                                for c in convs])  # fmt: skip
    events, header = import_openai(src, needs=NeedsSettings(method=method))
    trace_from_events([{"event": "header", **header}, *events])
    text = {e["id"]: e["text"].lower() for e in events if e["event"] == "write"}
    for r in (e for e in events if e["event"] == "request" and method == "args"):
        values = [a["v"].strip().lower() for a in r["meta"]["arguments"]]
        for need in r["needs"]:
            for member in [need] if isinstance(need, str) else need:
                assert any(v and v in text[member] for v in values)


_json = st.recursive(
    st.none() | st.booleans() | st.integers(-5, 5) | st.sampled_from(["", "x", "{", "{}", "user"]),
    lambda inner: (
        st.lists(inner, max_size=3)
        | st.dictionaries(
            st.sampled_from(
                [
                    "role",
                    "content",
                    "messages",
                    "tool_calls",
                    "function",
                    "name",
                    "arguments",
                    "text",
                    "cost",
                    "latency_ms",
                    "id",
                ]
            ),
            inner,
            max_size=4,
        )
    ),  # fmt: skip
    max_leaves=12,
)
_role = st.sampled_from(["system", "user", "assistant", "tool", "robot"])


@given(st.lists(st.one_of(_json, st.fixed_dictionaries({"role": _role}, optional={
    "content": _json, "tool_calls": _json, "cost": _json})), max_size=4))  # fmt: skip
def test_any_json_is_imported_or_refused_with_a_named_field(tmp_path_factory, messages):
    """Whatever JSON a log holds, the importer either builds a valid trace or raises a
    ``SourceError`` naming the file: never a KeyError, TypeError or a half-built trace."""
    src = _write(tmp_path_factory.mktemp("f"), "f.json", {"messages": messages})
    try:
        events, header = import_openai(src)
    except SourceError as err:
        assert err.path == str(src) and err.field
        return
    trace_from_events([{"event": "header", **header}, *events])
