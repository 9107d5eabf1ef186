"""OpenTelemetry exports of GenAI agent spans (OTLP JSON) -> a MemLens trace, through the OpenAI
importer's path (``memlens data import otel FILE``).

Input: the OTLP/JSON encoding of ``ExportTraceServiceRequest`` (``{"resourceSpans": [{
"scopeSpans": [{"spans": [...]}]}]}``), one object in a ``.json`` file or one per line in a
``.jsonl`` file (what the collector's file exporter writes); a directory is its files in name
order.  Attributes are OTLP ``AnyValue`` objects (``stringValue``, ``intValue`` as a decimal
string, ``doubleValue``, ``boolValue``, ``arrayValue``, ``kvlistValue``).

Spans read (GenAI semantic conventions, ``opentelemetry-semantic-conventions`` 0.66b2):

* model calls (``gen_ai.operation.name`` ``chat``, ``text_completion`` or
  ``generate_content``): ``gen_ai.system_instructions``, ``gen_ai.input.messages`` and
  ``gen_ai.output.messages`` (JSON text or structured: ``[{"role", "parts": [{"type":
  "text", "content"}, {"type": "tool_call", "id", "name", "arguments"}, {"type":
  "tool_call_response", "id", "response"}]}]``), ``gen_ai.usage.input_tokens`` /
  ``output_tokens``;
* tool executions (``execute_tool``): ``gen_ai.tool.call.id``, ``gen_ai.tool.call.result``
  (the span's duration becomes the tool message's ``latency_s``).

Every other span is skipped.  One conversation is one stream: spans grouped by
``gen_ai.conversation.id``, else by trace id, in start-time order.  A model call's input
repeats the history: the messages already taken (the longest common prefix) are skipped, and a
tool result already taken from its ``execute_tool`` span is not taken twice.  The messages
become OpenAI chat-completions messages read by ``openai_import.read_messages`` and the events
are built by ``openai_import.build_events``: the same roles, needs derivation and report.

Errors name the file, the line (``.jsonl``), the span (its index path and id) and the field,
before anything is written.
"""

from __future__ import annotations

from pathlib import Path

import orjson

from memlens.trace.tokenizer import get_tokenizer

from .needs_derivation import NeedsSettings
from .openai_import import (
    Conversation,
    Roles,
    build_events,
    header_of,
    read_messages,
    source_files,
    sources_sha256,
)
from .sources import SourceError, need

MODEL_CALLS = ("chat", "text_completion", "generate_content")
TOOL_CALL = "execute_tool"
ROLES = ("system", "user", "assistant", "tool")


# ---------------------------------------------------------------------------- OTLP values
def any_value(path, value, where: str):
    """An OTLP ``AnyValue`` as a Python value."""
    if not isinstance(value, dict) or len(value) != 1:
        raise SourceError(path, where, "expected an AnyValue object with one field "
                                       "(stringValue, intValue, ...)")  # fmt: skip
    (kind, v), = value.items()  # fmt: skip
    if kind == "stringValue" and isinstance(v, str):
        return v
    if kind == "boolValue" and isinstance(v, bool):
        return v
    if kind == "intValue" and isinstance(v, (str, int)) and not isinstance(v, bool):
        try:
            return int(v)
        except ValueError:
            pass
    elif kind == "doubleValue" and isinstance(v, (int, float)) and not isinstance(v, bool):
        return float(v)
    elif kind == "arrayValue" and isinstance(v, dict):
        items = v.get("values", [])
        if isinstance(items, list):
            return [any_value(path, x, f"{where}.arrayValue.values[{k}]")
                    for k, x in enumerate(items)]  # fmt: skip
    elif kind == "kvlistValue" and isinstance(v, dict):
        return attributes(path, v.get("values", []), f"{where}.kvlistValue.values")
    raise SourceError(path, f"{where}.{kind}", f"not a valid OTLP {kind}: {v!r}")


def attributes(path, items, where: str) -> dict:
    """An OTLP ``KeyValue`` list as a dict."""
    if not isinstance(items, list):
        raise SourceError(path, where, "expected a list of {key, value}")
    out = {}
    for k, kv in enumerate(items):
        key = need(path, kv, "key", f"{where}[{k}]", str)
        out[key] = any_value(path, need(path, kv, "value", f"{where}[{k}]"), f"{where}[{key}]")
    return out


def _nanos(path, span: dict, key: str, where: str) -> int:
    raw = need(path, span, key, where, (str, int))
    try:
        return int(raw)
    except ValueError:
        raise SourceError(path, f"{where}.{key}", f"expected nanoseconds, got {raw!r}") from None


# ---------------------------------------------------------------------------- spans
class Span:
    """One span: where it is (for errors), its ids, times and attributes."""

    def __init__(self, path, obj, where: str, order: int) -> None:
        self.path, self.order = path, order
        ident = need(path, obj, "spanId", where, str)
        self.where = f"{where} (span {ident})"
        self.trace_id = need(path, obj, "traceId", where, str)
        self.start = _nanos(path, obj, "startTimeUnixNano", self.where)
        self.end = _nanos(path, obj, "endTimeUnixNano", self.where)
        self.attrs = attributes(path, obj.get("attributes", []), f"{self.where}.attributes")
        self.operation = self.attrs.get("gen_ai.operation.name")

    def field(self, name: str) -> str:
        return f"{self.where}.attributes[{name}]"

    def structured(self, name: str, default=None):
        """A JSON-valued attribute: JSON text (the usual export) or an OTLP structure."""
        value = self.attrs.get(name, default)
        if isinstance(value, str):
            try:
                return orjson.loads(value)
            except orjson.JSONDecodeError as exc:
                raise SourceError(self.path, self.field(name), f"malformed JSON: {exc}") from None
        return value


def read_spans(path: Path) -> list[Span]:
    """Every span of one export file, in file order."""
    if path.name.endswith(".json"):
        try:
            docs = [("", orjson.loads(path.read_bytes()))]
        except orjson.JSONDecodeError as exc:
            raise SourceError(path, "", f"malformed JSON: {exc}") from None
    else:
        from .openai_import import _rows

        docs = [(f"line {n}: ", row) for n, row in _rows(path)]
    spans: list[Span] = []
    for prefix, doc in docs:
        for r, rs in enumerate(need(path, doc, "resourceSpans", prefix.rstrip(": "), list)):
            for s, ss in enumerate(need(path, rs, "scopeSpans", f"{prefix}resourceSpans[{r}]",
                                        list)):  # fmt: skip
                where = f"{prefix}resourceSpans[{r}].scopeSpans[{s}]"
                for k, obj in enumerate(need(path, ss, "spans", where, list)):
                    spans.append(Span(path, obj, f"{where}.spans[{k}]", len(spans)))
    return spans


# ---------------------------------------------------------------------------- messages
def _text_of(content) -> str:
    return content if isinstance(content, str) else orjson.dumps(content).decode()


def genai_message(span: Span, msg, where: str, role: str | None = None) -> list[dict]:
    """A GenAI-convention message as OpenAI chat-completions messages (a tool message per
    ``tool_call_response`` part)."""
    path = span.path
    role = role or need(path, msg, "role", where, str)
    if role not in ROLES:
        raise SourceError(path, f"{where}.role", f"unknown role {role!r} "
                                                 f"(expected {', '.join(ROLES)})")  # fmt: skip
    parts = need(path, msg, "parts", where, list) if isinstance(msg, dict) else msg
    texts, calls, results = [], [], []
    for k, part in enumerate(parts):
        pw = f"{where}.parts[{k}]"
        kind = need(path, part, "type", pw, str)
        if kind == "text":
            texts.append(need(path, part, "content", pw, str))
        elif kind == "tool_call":
            args = part.get("arguments") or {}
            calls.append({"id": str(part.get("id") or f"call{len(calls)}"), "type": "function",
                          "function": {"name": need(path, part, "name", pw, str),
                                       "arguments": _text_of(args)}})  # fmt: skip
        elif kind == "tool_call_response":
            results.append({"role": "tool", "tool_call_id": str(need(path, part, "id", pw)),
                            "content": _text_of(part.get("response", ""))})  # fmt: skip
        elif kind != "reasoning":  # a model's hidden reasoning is not part of the context
            raise SourceError(path, f"{pw}.type", f"unknown part type {kind!r} (expected text, "
                              "tool_call, tool_call_response or reasoning)")  # fmt: skip
    out = []
    if texts or calls or not results:
        message = {"role": role, "content": "\n".join(texts)}
        if calls:
            message["tool_calls"] = calls
        out.append(message)
    return out + results


def _list(span: Span, name: str) -> list:
    value = span.structured(name, [])
    if not isinstance(value, list):
        raise SourceError(span.path, span.field(name), "expected a list of messages")
    return value


class Stream:
    """One conversation's OpenAI messages, built span by span."""

    def __init__(self) -> None:
        self.messages: list[dict] = []
        self.inputs: list[dict] = []  # the last model call's input, as converted
        self.answered: set[str] = set()  # tool call ids whose result was taken

    def model_call(self, span: Span) -> None:
        system = _list(span, "gen_ai.system_instructions")
        inputs = genai_message(span, system, span.field("gen_ai.system_instructions"),
                               "system") if system else []  # fmt: skip
        for k, msg in enumerate(_list(span, "gen_ai.input.messages")):
            inputs += genai_message(span, msg, f"{span.field('gen_ai.input.messages')}[{k}]")
        same = 0
        while same < min(len(inputs), len(self.inputs)) and inputs[same] == self.inputs[same]:
            same += 1
        fresh = inputs[same:] if self.inputs else inputs
        self.inputs = inputs
        self._add(fresh)
        outputs = []
        for k, msg in enumerate(_list(span, "gen_ai.output.messages")):
            outputs += genai_message(span, msg, f"{span.field('gen_ai.output.messages')}[{k}]")
        self.inputs = self.inputs + [dict(m) for m in outputs]  # the next input repeats them
        usage = {key: span.attrs[f"gen_ai.usage.{key}"] for key in ("input_tokens",
                 "output_tokens") if f"gen_ai.usage.{key}" in span.attrs}  # fmt: skip
        for msg in outputs:
            if usage and msg["role"] == "assistant":
                msg["usage"] = usage
        self._add(outputs)

    def tool_call(self, span: Span) -> None:
        ident = span.attrs.get("gen_ai.tool.call.id")
        if ident is None or str(ident) in self.answered:
            return
        if "gen_ai.tool.call.result" not in span.attrs:
            raise SourceError(span.path, span.field("gen_ai.tool.call.result"), "missing field")
        result = span.attrs["gen_ai.tool.call.result"]  # text as the tool returned it
        msg = {"role": "tool", "tool_call_id": str(ident), "content": _text_of(result),
               "latency_s": (span.end - span.start) / 1e9}  # fmt: skip
        self._add([msg])

    def _add(self, messages: list[dict]) -> None:
        for msg in messages:
            if msg["role"] == "tool":
                if msg["tool_call_id"] in self.answered:
                    continue
                self.answered.add(msg["tool_call_id"])
            self.messages.append(msg)


def read_conversations(src: str | Path) -> list[Conversation]:
    """Every conversation of the export(s), read through the OpenAI message reader."""
    streams: dict[str, tuple[Stream, Path]] = {}
    for path in source_files(src):
        spans = sorted(read_spans(path), key=lambda s: (s.start, s.order))
        for span in spans:
            if span.operation not in MODEL_CALLS and span.operation != TOOL_CALL:
                continue
            name = span.attrs.get("gen_ai.conversation.id", span.trace_id)
            stream, _ = streams.setdefault(str(name), (Stream(), path))
            (stream.model_call if span.operation in MODEL_CALLS else stream.tool_call)(span)
    return [Conversation(name, read_messages(path, stream.messages, f"conversation {name}"))
            for name, (stream, path) in streams.items()]  # fmt: skip


def import_otel(
    src: str | Path,
    tokenizer: str | None = None,
    needs: NeedsSettings | None = None,
    roles: Roles | None = None,
    keep_empty: bool = False,
) -> tuple[list[dict], dict]:
    """Import ``src`` into ``(events, header)``; nothing is written (``import_openai``'s
    contract, for OTLP JSON exports)."""
    needs, roles = needs or NeedsSettings(), roles or Roles()
    tok = get_tokenizer(tokenizer)
    convs = read_conversations(src)
    if not convs:
        raise SourceError(src, "", "no GenAI model-call or tool-execution spans "
                                   "(gen_ai.operation.name chat/execute_tool ...)")  # fmt: skip
    b = build_events(convs, needs, roles, tok, keep_empty)
    extra = {"importer": "otel", "source": Path(src).name, "source_sha256": sources_sha256(src),
             "options": {"keep_empty": keep_empty}}  # fmt: skip
    return b.events, header_of(b, needs, roles, tok, extra)
