"""An agent loop traced with OpenTelemetry: the manager's memory spans and the agent's own GenAI
model-call and tool spans, exported as OTLP JSON, which ``memlens data import otel`` reads back.

    python examples/otel_loop.py [--record out/otel.jsonl] [--otlp out/otel-spans.json] [--steps 40] [--policy rule] [--budget 150]

Each step the user asks about an order; the model (shown the manager's context) calls the
``order_status`` tool, then answers citing the memories it used.  The manager has the SDK
tracer (``tracer=``): one ``update_memory`` / ``search_memory`` span per call, evictions as
``delete_memory`` events.  Those are not what the importer reads: it reads model calls
(``chat``: ``gen_ai.input.messages`` / ``gen_ai.output.messages``) and tool executions
(``execute_tool``: ``gen_ai.tool.call.id`` / ``.result``), so the loop emits those for each
model and tool call, the way an instrumented agent does.  A chat span's input is the turn's
messages; the memory context the model was also given is the ``search_memory`` span just before
it (``memlens.context.items`` / ``.tokens``).  The model is scripted unless ``OPENAI_BASE_URL``
is set (then an OpenAI-compatible endpoint answers: ``OPENAI_API_KEY``, ``OPENAI_MODEL``).  The
counts printed are what ``memlens simulate`` on the record reports; the export imports to a
trace of the conversation (``memlens data import otel SPANS out=TRACE``).
"""

from __future__ import annotations

import json
import os

from memlens.datasets.otel_import import import_otel
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExporter, SpanExportResult
from orders import arguments, chat_completion, order_of, order_status, steady_clock, summary

from memlens.live import MemoryManager, format_context

TOOLS = [{"type": "function", "function": {
    "name": "order_status", "description": "The status of an order.",
    "parameters": {"type": "object", "properties": {"order": {"type": "string"}},
                   "required": ["order"]}}}]  # fmt: skip
MODEL = os.environ.get("OPENAI_MODEL", "gpt-4o-mini")


# ---------------------------------------------------------------------------- OTLP JSON
def any_value(value) -> dict:
    """A Python attribute value as an OTLP ``AnyValue``."""
    if isinstance(value, bool):
        return {"boolValue": value}
    if isinstance(value, int):
        return {"intValue": str(value)}
    if isinstance(value, float):
        return {"doubleValue": value}
    if isinstance(value, (list, tuple)):
        return {"arrayValue": {"values": [any_value(v) for v in value]}}
    return {"stringValue": str(value)}


def key_values(attrs) -> list[dict]:
    return [{"key": k, "value": any_value(v)} for k, v in (attrs or {}).items()]


def otlp_span(span) -> dict:
    """One finished SDK span in the OTLP/JSON encoding (ids as hex, times as strings)."""
    ctx = span.get_span_context()
    out = {"traceId": f"{ctx.trace_id:032x}", "spanId": f"{ctx.span_id:016x}",
           "name": span.name, "kind": span.kind.value + 1,  # OTLP counts UNSPECIFIED as 0
           "startTimeUnixNano": str(span.start_time), "endTimeUnixNano": str(span.end_time),
           "attributes": key_values(span.attributes),
           "events": [{"timeUnixNano": str(e.timestamp), "name": e.name,
                       "attributes": key_values(e.attributes)} for e in span.events]}  # fmt: skip
    if span.parent is not None:
        out["parentSpanId"] = f"{span.parent.span_id:016x}"
    return out


class OtlpJsonFile(SpanExporter):
    """Collects the finished spans and writes one ``ExportTraceServiceRequest`` (OTLP JSON)
    at shutdown: what a collector's file exporter holds, without a collector."""

    def __init__(self, path: str) -> None:
        self.path, self.spans = path, []

    def export(self, spans) -> SpanExportResult:
        self.spans.extend(spans)
        return SpanExportResult.SUCCESS

    def shutdown(self) -> None:
        scopes: dict[str, list] = {}
        for span in self.spans:
            scopes.setdefault(span.instrumentation_scope.name, []).append(otlp_span(span))
        resource = self.spans[0].resource.attributes if self.spans else {}
        doc = {"resourceSpans": [{"resource": {"attributes": key_values(resource)},
                                  "scopeSpans": [{"scope": {"name": name}, "spans": spans}
                                                 for name, spans in scopes.items()]}]}  # fmt: skip
        with open(self.path, "w") as f:
            json.dump(doc, f)


# ---------------------------------------------------------------------------- the agent
def genai_message(msg: dict) -> dict:
    """A chat-completions message in the GenAI conventions' parts form."""
    if msg["role"] == "tool":
        parts = [{"type": "tool_call_response", "id": msg["tool_call_id"],
                  "response": msg["content"]}]  # fmt: skip
    else:
        parts = [{"type": "text", "content": msg["content"]}] if msg.get("content") else []
        parts += [{"type": "tool_call", "id": c["id"], "name": c["function"]["name"],
                   "arguments": json.loads(c["function"]["arguments"])}
                  for c in msg.get("tool_calls", [])]  # fmt: skip
    return {"role": msg["role"], "parts": parts}


def scripted_model(prompt: str, messages: list[dict], order: str, facts: dict, step: int) -> dict:
    """Calls the tool first; then answers citing the memories about ``order`` that the prompt
    holds (a perfect, honest model)."""
    if messages[-1]["role"] != "tool":
        call = {"id": f"call{step}", "type": "function", "function": {
            "name": "order_status", "arguments": json.dumps({"order": order})}}  # fmt: skip
        return {"role": "assistant", "content": "", "tool_calls": [call]}
    cited = " ".join(f"[{i}]" for i in facts.get(order, []) if f"[{i}]" in prompt)
    return {"role": "assistant", "content": f"{messages[-1]['content']} {cited}".strip()}


def endpoint_model(prompt: str, messages: list[dict]) -> dict:
    """One chat completion from an OpenAI-compatible endpoint (only with OPENAI_BASE_URL)."""
    msg = chat_completion([{"role": "system", "content": prompt}, *messages], TOOLS)
    return {k: v for k, v in msg.items() if k in ("role", "content", "tool_calls") and v}


def model_call(tracer, memory, order: str, messages: list[dict], facts: dict, step: int,
               shown: list[int]) -> dict:  # fmt: skip
    """The model shown the manager's context and the turn, inside a GenAI ``chat`` span
    (``shown`` collects the context's tokens)."""
    items = memory.context("agent")
    shown.append(sum(i.tokens for i in items))
    prompt = format_context(items)
    with tracer.start_as_current_span(f"chat {MODEL}") as span:
        if os.environ.get("OPENAI_BASE_URL"):
            reply = endpoint_model(prompt, messages)
        else:
            reply = scripted_model(prompt, messages, order, facts, step)
        span.set_attributes({"gen_ai.operation.name": "chat", "gen_ai.request.model": MODEL,
                             "gen_ai.conversation.id": "agent",
                             "gen_ai.input.messages": json.dumps([genai_message(m) for m in messages]),
                             "gen_ai.output.messages": json.dumps([genai_message(reply)])})  # fmt: skip
    return reply


def tool_call(tracer, call: dict, step: int) -> dict:
    """The tool, inside a GenAI ``execute_tool`` span."""
    with tracer.start_as_current_span("execute_tool order_status") as span:
        result = order_status(json.loads(call["function"]["arguments"])["order"], step)
        span.set_attributes({"gen_ai.operation.name": "execute_tool",
                             "gen_ai.conversation.id": "agent", "gen_ai.tool.name": "order_status",
                             "gen_ai.tool.call.id": call["id"], "gen_ai.tool.call.result": result})  # fmt: skip
    return {"role": "tool", "tool_call_id": call["id"], "content": result}


def run(args, tracer) -> str:
    facts: dict[str, list[str]] = {}
    shown: list[int] = []
    with MemoryManager(args.policy, args.budget, args.record, clock=steady_clock(),
                       tracer=tracer) as memory:  # fmt: skip
        for step in range(args.steps):
            order = order_of(step)
            question = {"role": "user", "content": f"What is the status of {order}?"}
            facts.setdefault(order, []).append(memory.write("agent", question["content"],
                                                            "user_input"))  # fmt: skip
            messages = [question]
            reply = model_call(tracer, memory, order, messages, facts, step, shown)
            for call in reply.get("tool_calls", []):
                messages += [reply, tool_call(tracer, call, step)]
                facts[order].append(memory.write("agent", messages[-1]["content"],
                                                 "tool_result", cost=0.02))  # fmt: skip
                reply = model_call(tracer, memory, order, messages, facts, step, shown)
            memory.write("agent", reply.get("content") or "", "llm_thought")
            memory.used("agent", facts[order][-4:], text=question["content"])
        return summary("otel", args, memory.counts(), max(shown))


def main() -> None:
    ap_args = arguments(__doc__, "out/otel.jsonl", extra={"--otlp": "out/otel-spans.json"})
    exporter = OtlpJsonFile(ap_args.otlp)
    provider = TracerProvider(resource=Resource.create({"service.name": "orders-agent"}))
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    line = run(ap_args, provider.get_tracer("orders-agent"))
    n_spans = len(exporter.spans)
    provider.shutdown()  # writes the export
    events, header = import_otel(ap_args.otlp)
    kinds = [e["event"] for e in events]
    print(line)
    print(f"spans: {n_spans} -> {ap_args.otlp}; import otel: {kinds.count('write')} items, "
          f"{kinds.count('request')} requests")  # fmt: skip
    print(f"record: {ap_args.record}")


if __name__ == "__main__":
    main()
