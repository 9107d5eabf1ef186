"""LongMemEval (Wu et al., ICLR 2025; MIT licence) -> MemLens trace, with ANNOTATED needs.

LongMemEval's published files (``longmemeval_s.json``, ``longmemeval_m.json``,
``longmemeval_oracle.json``) are a JSON list of questions, each with its own chat history:

``question_id``, ``question_type``, ``question``, ``answer``, ``question_date``,
``haystack_session_ids``, ``haystack_dates`` and ``haystack_sessions`` (one list of
``{"role": "user"|"assistant", "content": ..., "has_answer": true}`` turns per session), and
``answer_session_ids``.

Each question becomes one stream: every turn of every session a write (id
``<question_id>/<session_id>:<turn>``, the user's turns ``user_input``, the assistant's
``llm_thought``), timed by its session's date plus ``turn_seconds`` per turn, then the question
as one request at ``question_date`` whose needs are the turns marked ``has_answer: true`` (people
marked them: the header says ``"evidence": "annotated"``).  A question with no marked turn (the
abstention questions, ``*_abs``) has no need and is counted, not written.
"""

from __future__ import annotations

from collections import Counter
from datetime import UTC, datetime
from pathlib import Path

from memlens.trace.tokenizer import get_tokenizer

from .sources import SourceError, load_json_list, need, sha256_file

ROLES = {"user": "user_input", "assistant": "llm_thought"}
_FORMATS = ("%Y/%m/%d (%a) %H:%M", "%Y/%m/%d %H:%M", "%Y/%m/%d")


def parse_date(path, value, where: str) -> float:
    """``"2023/05/20 (Sat) 02:21"`` -> POSIX seconds (read as UTC)."""
    if not isinstance(value, str):
        raise SourceError(path, where, f"expected a date string, got {type(value).__name__}")
    for fmt in _FORMATS:
        try:
            return datetime.strptime(value.strip(), fmt).replace(tzinfo=UTC).timestamp()
        except ValueError:
            continue
    raise SourceError(path, where, f"cannot parse date {value!r} (expected e.g. "
                                   "'2023/05/20 (Sat) 02:21')")  # fmt: skip


def _session_writes(src, qid: str, sessions, ids, dates, tok, turn_seconds: float,
                    where: str, report: Counter) -> tuple[list[dict], list[str]]:  # fmt: skip
    """Every turn of every session as a write, and the ids of the turns marked as evidence."""
    if not len(sessions) == len(ids) == len(dates):
        raise SourceError(src, f"{where}.haystack_sessions", "haystack_sessions, "
                          "haystack_session_ids and haystack_dates differ in length")  # fmt: skip
    writes, evidence = [], []
    for si, (turns, sid, date) in enumerate(zip(sessions, ids, dates, strict=True)):
        sw = f"{where}.haystack_sessions[{si}]"
        if not isinstance(turns, list):
            raise SourceError(src, sw, f"expected a list of turns, got {type(turns).__name__}")
        start = parse_date(src, date, f"{where}.haystack_dates[{si}]")
        for k, turn in enumerate(turns):
            tw = f"{sw}[{k}]"
            role = need(src, turn, "role", tw, str)
            if role not in ROLES:
                raise SourceError(src, f"{tw}.role", f"unknown role {role!r} (user or assistant)")
            text = need(src, turn, "content", tw, str)
            ident = f"{qid}/{sid}:{k}"
            writes.append({"event": "write", "id": ident, "stream": qid,
                           "t": start + k * turn_seconds, "type": ROLES[role],
                           "tokens": max(1, tok.count(text)), "text": text,
                           "session": str(sid), "meta": {"role": role}})  # fmt: skip
            if turn.get("has_answer") is True:
                evidence.append(ident)
        report["sessions"] += 1
        report["turns"] += len(turns)
    return writes, evidence


def convert_longmemeval(src: str | Path, tokenizer: str | None = None,
                        turn_seconds: float = 30.0) -> tuple[list[dict], dict]:  # fmt: skip
    """Convert ``src`` (a LongMemEval JSON file) into ``(events, header)``; nothing is written."""
    tok = get_tokenizer(tokenizer)
    src = Path(src)
    data = load_json_list(src, "questions")
    report: Counter = Counter()
    events: list[dict] = []
    seen: set[str] = set()
    for qi, item in enumerate(data):
        where = f"[{qi}]"
        qid = str(need(src, item, "question_id", where, (str, int)))
        if qid in seen:
            raise SourceError(src, f"{where}.question_id", f"duplicate question_id {qid!r}")
        seen.add(qid)
        sessions = need(src, item, "haystack_sessions", where, list)
        ids = need(src, item, "haystack_session_ids", where, list)
        dates = need(src, item, "haystack_dates", where, list)
        question = need(src, item, "question", where, str)
        writes, evidence = _session_writes(src, qid, sessions, ids, dates, tok, turn_seconds,
                                           where, report)  # fmt: skip
        report["questions"] += 1
        t_q = parse_date(src, need(src, item, "question_date", where, str),
                         f"{where}.question_date")  # fmt: skip
        t_q = max(t_q, writes[-1]["t"] if writes else t_q)
        events += writes
        if not evidence:
            report["questions_without_evidence"] += 1
            continue
        report["questions_kept"] += 1
        report["needs"] += len(evidence)
        meta = {"question_type": item.get("question_type"), "answer": str(item.get("answer")),
                "answer_session_ids": item.get("answer_session_ids")}  # fmt: skip
        events.append({"event": "request", "id": f"{qid}/q", "stream": qid, "t": t_q,
                       "text": question, "needs": evidence, "meta": meta})  # fmt: skip
    header = {"converter": "longmemeval", "source": src.name, "source_sha256": sha256_file(src),
              "license": "MIT", "evidence": "annotated", **tok.describe(),
              "options": {"turn_seconds": turn_seconds},
              "report": dict(sorted(report.items()))}  # fmt: skip
    return events, header
