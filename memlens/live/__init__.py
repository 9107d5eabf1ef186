"""The live memory manager: a policy MemLens measured, running inside an agent, recording a
trace its replay reproduces (issue 29).

* :class:`MemoryManager` (``memlens.live.manager``): ``write``, ``context``, ``used``, ``pin``,
  ``unpin``, ``annotate``, ``close``; ``from_config`` and ``reopen``;
* the record (``memlens.live.record``): the write-ahead log in trace format 1.1;
* the engine (``memlens.live.engine``): the reference replay's handlers, fed event by event;
* :func:`format_context` / :func:`parse_citations` (``memlens.live.citations``): needs from the
  model's own citations;
* retrieval from the lower tiers for ``context(stream, query)`` (``memlens.live.retrieval``) and
  OpenTelemetry spans for the memory operations (``memlens.live.telemetry``);
* adapters, optional extras: ``memlens.live.openai_agents`` (an OpenAI Agents SDK ``Session``)
  and ``memlens.live.langchain`` (a LangChain chat history, a LangGraph pre-model hook).

The storage protocols the manager's document store follows are in ``memlens.retrieval.storage``.

May import: ``memlens.config`` and everything below it (the engine, the policies, the trace);
never ``runs``, ``learn``, ``ui`` or ``cli``.
"""

from __future__ import annotations

_PUBLIC = {
    "MemoryManager": "memlens.live.manager:MemoryManager",
    "Item": "memlens.live.manager:Item",
    "RecordLocked": "memlens.live.record:RecordLocked",
    "format_context": "memlens.live.citations:format_context",
    "parse_citations": "memlens.live.citations:parse_citations",
    "replay_record": "memlens.live.replay:replay_record",
}

__all__ = sorted(_PUBLIC)


def __getattr__(name: str):
    target = _PUBLIC.get(name)
    if target is None:
        raise AttributeError(f"module 'memlens.live' has no attribute {name!r}")
    import importlib

    module, _, attribute = target.partition(":")
    value = getattr(importlib.import_module(module), attribute)
    globals()[name] = value
    return value
