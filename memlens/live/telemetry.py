"""OpenTelemetry spans for the live manager's memory operations (opt-in: ``tracer=`` or
``otel=True``).

Names follow what the installed ``opentelemetry-semantic-conventions`` (0.66b2,
``opentelemetry/semconv/_incubating/attributes/gen_ai_attributes.py``) defines:
``gen_ai.operation.name``, ``gen_ai.conversation.id`` (the stream), ``gen_ai.data_source.id``
(the record), ``gen_ai.retrieval.query.text``.  That package has no memory operations: the
operation names ``update_memory``, ``search_memory`` and ``delete_memory`` and the attribute
``gen_ai.memory.id`` are the GenAI memory proposal's (open-telemetry/semantic-conventions
issue 2664; ``gen_ai.memory.id`` is also what AWS's distro emits), marked proposed in
docs/live.md.  What only MemLens has is under ``memlens.*``.

Spans are emitted after the operation, with its start and end times, so a manager without a
tracer pays one ``None`` test per call; an operation that raises emits nothing (and records
nothing).
"""

from __future__ import annotations

# the semconv names, spelled out: OpenTelemetry is an optional extra (``memlens[otel]``), and
# tests/live/test_telemetry.py checks each against the installed package's constant
OPERATION = "gen_ai.operation.name"  # GEN_AI_OPERATION_NAME
CONVERSATION = "gen_ai.conversation.id"  # GEN_AI_CONVERSATION_ID
DATA_SOURCE = "gen_ai.data_source.id"  # GEN_AI_DATA_SOURCE_ID
QUERY_TEXT = "gen_ai.retrieval.query.text"  # GEN_AI_RETRIEVAL_QUERY_TEXT
MEMORY_ID = "gen_ai.memory.id"  # proposed (module docstring)

#: the manager's calls as memory operations: (operation name, what the call is)
OPERATIONS = {"write": "update_memory", "pin": "update_memory", "unpin": "update_memory",
              "annotate": "update_memory", "used": "update_memory", "context": "search_memory",
              "evict": "delete_memory"}  # fmt: skip


def make_tracer(tracer, otel: bool):
    """The tracer to use: ``tracer`` if given, the global provider's with ``otel=True``."""
    if tracer is not None:
        return tracer
    if otel:
        try:
            from opentelemetry import trace
        except ImportError:
            raise ImportError("otel=True needs opentelemetry-api: pip install 'memlens[otel]'"
                              ) from None  # fmt: skip

        return trace.get_tracer("memlens.live")
    return None


def emit(tracer, call: str, stream: str, source: str | None, start_ns: int, end_ns: int,
         attributes: dict, evicted: list[str] = ()) -> None:  # fmt: skip
    """One span for a manager call; each item the call evicted is a ``delete_memory`` event."""
    op = OPERATIONS[call]
    attrs = {OPERATION: op, CONVERSATION: stream, "memlens.call": call}
    if source is not None:
        attrs[DATA_SOURCE] = source
    attrs.update({k: v for k, v in attributes.items() if v is not None})
    span = tracer.start_span(f"{op} {stream}", attributes=attrs, start_time=start_ns)
    for ident in evicted:
        span.add_event(OPERATIONS["evict"], {OPERATION: OPERATIONS["evict"], MEMORY_ID: ident},
                       timestamp=end_ns)  # fmt: skip
    span.end(end_time=end_ns)
