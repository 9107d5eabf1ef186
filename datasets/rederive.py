"""``memlens data derive``: the needs of any trace re-derived from its own texts.

A trace with texts (converted, imported, or annotated by people) can have its needs derived
again by any method of :mod:`needs_derivation`, so that two derivations, or a derivation and
the human evidence, can be compared on the same events (``memlens data score-needs``,
``memlens compare traces=[...] stability=true``).  Every write, pin and id is kept; only the
requests' ``needs`` (and their ``meta``) change, and a request left with no need is dropped
unless ``keep_empty`` (the report counts both).

What a step and an item say, for matching:

* a request's text, and its ``meta.answer`` when ``needs.answer`` is on (the answer turn of a
  question-and-answer log is the step; the issue's "the assistant turn's own text counts");
* an item's text, with its speaker's name (``meta.speaker``) in front, and, when the trace's
  times are calendar times (POSIX seconds) and ``needs.item_dates`` is on, the date it was
  written (``7 May 2023``): an answer that names a day points at what was said that day;
* an item is an assistant's when its ``meta.role`` is ``assistant``, it is a tool call
  (``meta.tool_call``), or it has no role and its type is ``llm_thought``.
"""

from __future__ import annotations

from collections import Counter
from datetime import UTC, datetime
from pathlib import Path

import orjson

from memlens.trace.io import load_trace
from memlens.trace.lines import read_lines

from .needs_derivation import Deriver, Earlier, NeedsSettings, Step

CALENDAR = (1e8, 1e10)  # POSIX seconds from 1973 to 2286: a trace's times are dates


def read_events(path: str | Path) -> tuple[dict, list[dict]]:
    """``(header, events)`` of a trace, after ``load_trace`` has validated every line."""
    load_trace(path)  # every error named by file, line and field, before any work
    header, events = {}, []
    for _, raw in read_lines(path):
        if raw.strip():
            obj = orjson.loads(raw)
            if obj.get("event") == "header":
                header = obj
            else:
                events.append(obj)
    return header, events


def _date(t: float) -> str:
    d = datetime.fromtimestamp(t, UTC)
    return f"{d.day} {d.strftime('%B')} {d.year}"


def item_text(ev: dict, dates: bool) -> str:
    """What an item says for matching: speaker, text and (calendar times only) date."""
    parts = [str(ev["meta"]["speaker"])] if isinstance(ev.get("meta"), dict) and "speaker" in ev[
        "meta"] else []  # fmt: skip
    parts.append(ev.get("text") or "")
    t = ev.get("t")
    if dates and isinstance(t, int | float) and CALENDAR[0] <= t <= CALENDAR[1]:
        parts.append(_date(float(t)))
    return " ".join(p for p in parts if p)


def step_text(ev: dict, answer: bool) -> str:
    """What a request says: its text, and its recorded answer when ``answer`` is on."""
    meta = ev.get("meta") if isinstance(ev.get("meta"), dict) else {}
    extra = meta.get("answer") if answer else None
    return " ".join(str(p) for p in (ev.get("text") or "", extra) if p)


def is_assistant(ev: dict) -> bool:
    meta = ev.get("meta") if isinstance(ev.get("meta"), dict) else {}
    if "role" in meta:
        return meta["role"] == "assistant"
    return "tool_call" in meta or ev.get("type") == "llm_thought"


def derive_events(events: list[dict], settings: NeedsSettings,
                  keep_empty: bool = False) -> tuple[list[dict], Counter]:  # fmt: skip
    """``events`` with every request's needs derived by ``settings``; and a report."""
    writes = [e for e in events if e["event"] == "write"]
    requests = [e for e in events if e["event"] == "request"]
    items = [item_text(w, settings.item_dates) for w in writes]
    steps = [step_text(r, settings.answer) for r in requests]
    deriver = Deriver(settings, items, steps)
    row_of = {w["id"]: i for i, w in enumerate(writes)}
    pinned: set[str] = set()
    earlier: dict[str, list[Earlier]] = {}
    out, report, k = [], Counter(), 0
    for e in events:
        if e["event"] == "pin":
            pinned.add(e["target"])
            for x in earlier.get(e["stream"], []):
                x.pinned = x.pinned or x.id == e["target"]
        if e["event"] == "write":
            row = row_of[e["id"]]
            earlier.setdefault(e["stream"], []).append(
                Earlier(e["id"], items[row], e["id"] in pinned, is_assistant(e))
            )
        if e["event"] != "request":
            out.append(e)
            continue
        before = earlier.get(e["stream"], [])
        meta = e.get("meta") if isinstance(e.get("meta"), dict) else {}
        answer = str(meta["answer"]) if settings.answer and meta.get("answer") else ""
        step = Step(steps[k], list(meta.get("arguments") or []), row=k,
                    question=e.get("text") or "", answer=answer)  # fmt: skip
        k += 1
        res = deriver.derive(step, before, [row_of[b.id] for b in before])
        report["requests"] += 1
        report["argument_values"] += res.values
        report["values_unmatched"] += len(res.unmatched or [])
        if not res.needs and not keep_empty:
            report["requests_dropped_no_needs"] += 1
            continue
        report["request_needs"] += len(res.needs)
        report["request_needs_with_alternatives"] += sum(isinstance(n, list) for n in res.needs)
        new_meta = {**meta, "evidence": "derived", "provenance": res.sources}
        if "evidence" in meta and meta["evidence"] != "derived":
            new_meta["evidence_was"] = meta["evidence"]
        out.append({**e, "needs": res.needs, "meta": new_meta})
    return out, report


def derive_trace(src: str | Path, settings: NeedsSettings,
                 keep_empty: bool = False) -> tuple[list[dict], dict]:  # fmt: skip
    """The events and header of ``src`` re-derived; the header records the method, its
    settings, the source trace and what the source's own needs were."""
    from memlens.trace.limits import ALTERNATIVES_VERSION

    header, events = read_events(src)
    new, report = derive_events(events, settings, keep_empty)
    head = {k: v for k, v in header.items() if k not in ("event", "version", "report")}
    head["needs"] = {**settings.describe(), "answer": settings.answer,
                     "item_dates": settings.item_dates}  # fmt: skip
    head["evidence"] = "derived"
    head["derived_from"] = {"trace": Path(src).name, "needs": header.get("needs"),
                            "evidence": header.get("evidence")}  # fmt: skip
    head["report"] = dict(sorted(report.items()))
    if report["request_needs_with_alternatives"]:
        head["version"] = ALTERNATIVES_VERSION
    return new, head
