"""``memlens data import otel``: OTLP JSON exports of GenAI spans -> traces, through the OpenAI
importer's path.  The export below is written by hand in the published OTLP/JSON encoding
(``resourceSpans`` / ``scopeSpans`` / ``spans``, ``AnyValue`` attributes, nanosecond strings)
with the GenAI conventions' message attributes; its trace must equal, event for event, the
trace of the same conversation given as an OpenAI chat-completions log."""

from __future__ import annotations

import json

import orjson
import pytest
from memlens.datasets.openai_import import import_openai
from memlens.datasets.otel_import import import_otel
from memlens.datasets.sources import SourceError

from memlens.cli.data import main as data_main
from memlens.trace.io import load_trace

SYSTEM = [{"type": "text", "content": "You are a support agent."}]
USER = {"role": "user", "parts": [{"type": "text", "content": "Refund order A-1042, it broke."}]}
CALL1 = {"role": "assistant", "parts": [{"type": "tool_call", "id": "c1", "name": "get_order",
                                         "arguments": {"order_id": "A-1042"}}]}  # fmt: skip
RESULT1 = {"role": "tool", "parts": [{"type": "tool_call_response", "id": "c1",
                                      "response": '{"order_id": "A-1042", "total": 59.9}'}]}  # fmt: skip
TEXT = {"role": "assistant", "parts": [{"type": "text", "content": "A-1042 qualifies."}],
        "finish_reason": "stop"}  # fmt: skip
CALL2 = {"role": "assistant", "parts": [{"type": "tool_call", "id": "c2", "name": "refund",
                                         "arguments": {"order_id": "A-1042"}}]}  # fmt: skip


def s(value: str) -> dict:
    return {"stringValue": value}


def attr(key: str, value: dict) -> dict:
    return {"key": key, "value": value}


def span(ident: str, start_ms: int, end_ms: int, attrs: list[dict], name: str) -> dict:
    return {"traceId": "5b8efff798038103d269b633813fc60c", "spanId": ident, "name": name,
            "kind": 3, "startTimeUnixNano": str(start_ms * 1_000_000),
            "endTimeUnixNano": str(end_ms * 1_000_000), "attributes": attrs}  # fmt: skip


def chat(ident: str, start_ms: int, inputs: list, output: dict, usage: int | None = None) -> dict:
    attrs = [attr("gen_ai.operation.name", s("chat")),
             attr("gen_ai.conversation.id", s("conv-1")),
             attr("gen_ai.system_instructions", s(json.dumps(SYSTEM))),
             attr("gen_ai.input.messages", s(json.dumps(inputs))),
             attr("gen_ai.output.messages", s(json.dumps([output])))]  # fmt: skip
    if usage is not None:
        attrs += [attr("gen_ai.usage.input_tokens", {"intValue": str(usage)}),
                  attr("gen_ai.usage.output_tokens", {"intValue": "5"})]  # fmt: skip
    return span(ident, start_ms, start_ms + 900, attrs, "chat gpt-4o")


def tool(ident: str, start_ms: int, end_ms: int) -> dict:
    attrs = [attr("gen_ai.operation.name", s("execute_tool")),
             attr("gen_ai.conversation.id", s("conv-1")),
             attr("gen_ai.tool.name", s("get_order")), attr("gen_ai.tool.call.id", s("c1")),
             attr("gen_ai.tool.call.result", s('{"order_id": "A-1042", "total": 59.9}'))]  # fmt: skip
    return span(ident, start_ms, end_ms, attrs, "execute_tool get_order")


def export() -> dict:
    spans = [
        chat("a1", 1000, [USER], CALL1),
        tool("a2", 2000, 2340),  # 340 ms
        chat("a3", 3000, [USER, CALL1, RESULT1], TEXT, usage=80),
        chat("a4", 4000, [USER, CALL1, RESULT1, TEXT], CALL2),
        span("a5", 500, 600, [attr("http.method", s("GET"))], "GET /"),  # not GenAI: skipped
    ]
    return {"resourceSpans": [{"resource": {"attributes": [attr("service.name", s("agent"))]},
                               "scopeSpans": [{"scope": {"name": "agent"}, "spans": spans}]}]}  # fmt: skip


def the_same_as_openai() -> dict:
    """The conversation above as an OpenAI chat-completions log."""
    return {"id": "conv-1", "messages": [
        {"role": "system", "content": "You are a support agent."},
        {"role": "user", "content": "Refund order A-1042, it broke."},
        {"role": "assistant", "content": "", "tool_calls": [{"id": "c1", "type": "function",
         "function": {"name": "get_order", "arguments": '{"order_id":"A-1042"}'}}]},
        {"role": "tool", "tool_call_id": "c1", "content": '{"order_id": "A-1042", "total": 59.9}',
         "latency_s": 0.34},
        {"role": "assistant", "content": "A-1042 qualifies.",
         "usage": {"input_tokens": 80, "output_tokens": 5}},
        {"role": "assistant", "content": "", "tool_calls": [{"id": "c2", "type": "function",
         "function": {"name": "refund", "arguments": '{"order_id":"A-1042"}'}}]},
    ]}  # fmt: skip


def test_an_otlp_export_imports_as_its_openai_log_does(tmp_path):
    otlp = tmp_path / "spans.json"
    otlp.write_bytes(orjson.dumps(export()))
    log = tmp_path / "log.json"
    log.write_bytes(orjson.dumps(the_same_as_openai()))
    events, header = import_otel(otlp)
    expected, expected_header = import_openai(log)
    assert events == expected
    assert header["importer"] == "otel" and header["report"] == expected_header["report"]
    writes = [e for e in events if e["event"] == "write"]
    assert [w["text"] for w in writes][:2] == ["You are a support agent.",
                                               "Refund order A-1042, it broke."]  # fmt: skip
    assert sum(e["event"] == "request" for e in events) >= 1


def test_jsonl_exports_and_the_cli_write_the_trace(tmp_path, capsys):
    otlp = tmp_path / "spans.jsonl"
    half = export()
    rs = half["resourceSpans"][0]
    first = {"resourceSpans": [{**rs, "scopeSpans": [{"spans": rs["scopeSpans"][0]["spans"][:2]}]}]}
    second = {
        "resourceSpans": [{**rs, "scopeSpans": [{"spans": rs["scopeSpans"][0]["spans"][2:]}]}]
    }
    otlp.write_text(orjson.dumps(first).decode() + "\n" + orjson.dumps(second).decode() + "\n")
    out = tmp_path / "t.jsonl"
    assert data_main(["import", "otel", str(otlp), f"out={out}"]) == 0
    log = tmp_path / "log.json"
    log.write_bytes(orjson.dumps(the_same_as_openai()))
    events, _ = import_openai(log)
    trace = load_trace(out)
    assert list(trace.item_text) == [e["text"] for e in events if e["event"] == "write"]


def broken(where: str):
    doc = export()
    spans = doc["resourceSpans"][0]["scopeSpans"][0]["spans"]
    if where == "json":
        spans[2]["attributes"][3]["value"] = s("[{not json")
    elif where == "spanId":
        del spans[1]["spanId"]
    elif where == "role":
        spans[0]["attributes"][3]["value"] = s(json.dumps([{"role": "robot", "parts": []}]))
    elif where == "part":
        spans[0]["attributes"][3]["value"] = s(json.dumps([{"role": "user",
                                                            "parts": [{"type": "video"}]}]))  # fmt: skip
    elif where == "intValue":
        spans[2]["attributes"][5]["value"] = {"intValue": "eighty"}
    elif where == "nanos":
        spans[3]["startTimeUnixNano"] = "soon"
    return doc


@pytest.mark.parametrize(("where", "message"), [
    ("json", r"spans\[2\] \(span a3\)\.attributes\[gen_ai\.input\.messages\]: malformed JSON"),
    ("spanId", r"spans\[1\]\.spanId: missing field"),
    ("role", r"attributes\[gen_ai\.input\.messages\]\[0\]\.role: unknown role 'robot'"),
    ("part", r"\[0\]\.parts\[0\]\.type: unknown part type 'video'"),
    ("intValue", r"attributes\[gen_ai\.usage\.input_tokens\]\.intValue: not a valid"),
    ("nanos", r"spans\[3\] \(span a4\)\.startTimeUnixNano: expected nanoseconds"),
])  # fmt: skip
def test_malformed_exports_name_file_span_and_field(tmp_path, where, message):
    otlp = tmp_path / "spans.json"
    otlp.write_bytes(orjson.dumps(broken(where)))
    with pytest.raises(SourceError, match=message) as err:
        import_otel(otlp)
    assert str(err.value).startswith(str(otlp))


def test_the_cli_exits_2_naming_the_line_and_writes_nothing(tmp_path, capsys):
    otlp = tmp_path / "spans.jsonl"
    otlp.write_text(orjson.dumps(export()).decode() + "\n" + orjson.dumps(broken("json")).decode())
    out = tmp_path / "t.jsonl"
    assert data_main(["import", "otel", str(otlp), f"out={out}"]) == 2
    err = capsys.readouterr().err
    assert f"{otlp}: line 2: resourceSpans[0].scopeSpans[0].spans[2] (span a3)" in err
    assert "malformed JSON" in err
    assert not out.exists()


def test_an_export_without_genai_spans_is_refused(tmp_path):
    otlp = tmp_path / "spans.json"
    doc = export()
    doc["resourceSpans"][0]["scopeSpans"][0]["spans"] = doc["resourceSpans"][0]["scopeSpans"][0][
        "spans"
    ][4:]
    otlp.write_bytes(orjson.dumps(doc))
    with pytest.raises(SourceError, match="no GenAI"):
        import_otel(otlp)
