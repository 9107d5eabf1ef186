"""Small builders for hand-written traces in tests."""

from __future__ import annotations

from memlens.trace_io import trace_from_events


def w(ident: str, tokens: int, type_: str = "llm_thought", stream: str = "", **kw) -> dict:
    return {"event": "write", "id": ident, "tokens": tokens, "type": type_, "stream": stream, **kw}


def rq(ident: str, *needs: str, stream: str = "", **kw) -> dict:
    return {"event": "request", "id": ident, "needs": list(needs), "stream": stream, **kw}


def pin(target: str, **kw) -> dict:
    return {"event": "pin", "target": target, **kw}


def unpin(target: str, **kw) -> dict:
    return {"event": "unpin", "target": target, **kw}


def trace(*events: dict):
    return trace_from_events(list(events), source="<test>")
