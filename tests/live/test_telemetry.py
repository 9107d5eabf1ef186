"""The live manager's OpenTelemetry spans, read back through the SDK's in-memory exporter:
one span per call, named and attributed as memlens.live.telemetry says, evictions as events,
nothing for a call that fails, nothing at all without a tracer."""

from __future__ import annotations

import pytest

pytest.importorskip("opentelemetry.sdk")

from helpers import Tick
from opentelemetry.sdk.trace import TracerProvider  # noqa: E402
from opentelemetry.sdk.trace.export import SimpleSpanProcessor  # noqa: E402
from opentelemetry.sdk.trace.export.in_memory_span_exporter import (  # noqa: E402
    InMemorySpanExporter,
)

from memlens.live import (
    MemoryManager,  # noqa: E402
    telemetry,  # noqa: E402
)


@pytest.fixture
def spans():
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    return provider.get_tracer("test"), exporter


def test_the_names_are_the_installed_semantic_conventions():
    from opentelemetry.semconv._incubating.attributes import gen_ai_attributes as gen_ai

    assert telemetry.OPERATION == gen_ai.GEN_AI_OPERATION_NAME
    assert telemetry.CONVERSATION == gen_ai.GEN_AI_CONVERSATION_ID
    assert telemetry.DATA_SOURCE == gen_ai.GEN_AI_DATA_SOURCE_ID
    assert telemetry.QUERY_TEXT == gen_ai.GEN_AI_RETRIEVAL_QUERY_TEXT


def test_each_call_is_one_span_and_an_eviction_is_a_delete_memory_event(tmp_path, spans):
    tracer, exporter = spans
    path = tmp_path / "r.jsonl"
    with MemoryManager("lru", 100, path, clock=Tick(), tracer=tracer) as m:
        a = m.write("s", "first", "user_input", tokens=40)
        b = m.write("s", "second", "user_input", tokens=40)
        m.write("s", "third", "tool_result", tokens=40)  # evicts a (least recent)
        m.used("s", [a, b])  # a miss and a hit
        m.pin(b)
        ctx = m.context("s", query="anything")
        with pytest.raises(KeyError):
            m.used("s", ["no such id"])  # fails: records nothing, emits nothing
    got = exporter.get_finished_spans()
    assert [s.name for s in got] == ["update_memory s"] * 5 + ["search_memory s"]
    calls = [s.attributes["memlens.call"] for s in got]
    assert calls == ["write", "write", "write", "used", "pin", "context"]
    for s in got:
        assert s.attributes["gen_ai.conversation.id"] == "s"
        assert s.attributes["gen_ai.data_source.id"] == str(path)
        assert s.start_time <= s.end_time
    w1, _, w3, used, pin, context = got
    assert w1.attributes["gen_ai.memory.id"] == a
    assert w1.attributes["memlens.item.tokens"] == 40
    assert [e.name for e in w1.events] == []
    assert [(e.name, e.attributes["gen_ai.memory.id"]) for e in w3.events] == [("delete_memory", a)]
    assert (used.attributes["memlens.request.needs"], used.attributes["memlens.request.hits"]) == (
        2,
        1,
    )
    assert pin.attributes["gen_ai.memory.id"] == b
    assert context.attributes["gen_ai.retrieval.query.text"] == "anything"
    assert context.attributes["memlens.context.items"] == len(ctx) == 2
    assert context.attributes["memlens.context.tokens"] == 80


def test_no_tracer_no_spans(tmp_path, spans):
    tracer, exporter = spans
    with MemoryManager("lru", 100, None, clock=Tick()) as m:
        m.write("s", "first", "user_input", tokens=40)
        m.context("s")
    assert exporter.get_finished_spans() == ()


def test_otel_true_uses_the_global_provider(monkeypatch, spans):
    from opentelemetry import trace

    tracer, exporter = spans
    monkeypatch.setattr(trace, "get_tracer", lambda name, *a, **k: tracer)
    with MemoryManager("window", 100, None, clock=Tick(), otel=True) as m:
        m.write("s", "first", "user_input", tokens=40)
    assert [s.attributes["memlens.call"] for s in exporter.get_finished_spans()] == ["write"]
