"""LoCoMo (Maharana et al., ACL 2024) -> MemLens trace.

Each of the ten conversations becomes one stream.  Every dialogue turn is a ``write`` (id
``<sample_id>/<dia_id>``: dia_ids repeat across conversations and trace ids are global), typed by
its speaker (``speaker_a`` and ``speaker_b`` roles map to configurable item types; both are
people, so both default to ``user_input``, the speaker's name kept in ``meta``: typing speaker B
``llm_thought``, as earlier versions did, flips the rule-vs-LRU verdict), timed by its
session's date-time plus ``turn_seconds`` per turn (LoCoMo dates sessions, not turns).  Every QA
item is a ``request`` whose ``needs`` are its annotated ``evidence`` turns; its category (and
answer) go to ``meta``.

Two placements of the questions:

``end``             every question after the last session (the benchmark's own protocol);
``after_evidence``  each question right after the session holding its latest evidence turn.

The evidence field is messy in a few places; :func:`normalise_evidence` repairs what can be
repaired and the conversion report counts every repair and every drop (see the dataset card).
"""

from __future__ import annotations

import re
from collections import Counter
from datetime import UTC, datetime
from pathlib import Path

from memlens.trace.model import ITEM_TYPES
from memlens.trace.tokenizer import get_tokenizer

from .sources import SourceError, load_json_list, need, sha256_file

PLACEMENTS = ("end", "after_evidence")
_SPLIT = re.compile(r"[;,\s]+")
_EVIDENCE = re.compile(r"D:?0*(\d+):0*(\d+)")
_SESSION = re.compile(r"session_(\d+)")
_DATE_FORMAT = "%I:%M %p on %d %B, %Y"  # "1:56 pm on 8 May, 2023"


def normalise_evidence(raw: str) -> tuple[list[str], Counter, list[str]]:
    """Split and canonicalise one evidence string.

    Returns ``(ids, repairs, unparseable)``: canonical ``D<session>:<turn>`` ids in order,
    a counter of the repairs applied (``split``, ``stray_colon``, ``leading_zero``) and the
    pieces that are not dialogue ids at all.
    """
    repairs: Counter = Counter()
    pieces = [p for p in _SPLIT.split(raw.strip()) if p]
    if len(pieces) > 1:
        repairs["split"] += 1
    ids: list[str] = []
    bad: list[str] = []
    for piece in pieces:
        m = _EVIDENCE.fullmatch(piece)
        if m is None:
            bad.append(piece)
            continue
        canon = f"D{int(m.group(1))}:{int(m.group(2))}"
        if piece.startswith("D:"):
            repairs["stray_colon"] += 1
        elif canon != piece:
            repairs["leading_zero"] += 1
        ids.append(canon)
    return ids, repairs, bad


def parse_session_time(path, value, field: str) -> float:
    """``"1:56 pm on 8 May, 2023"`` -> POSIX seconds (the dates carry no zone; read as UTC)."""
    if not isinstance(value, str):
        raise SourceError(path, field, f"expected a date-time string, got {type(value).__name__}")
    try:
        dt = datetime.strptime(value.strip(), _DATE_FORMAT)
    except ValueError:
        raise SourceError(
            path,
            field,
            f"cannot parse date-time {value!r} (expected e.g. '1:56 pm on 8 May, 2023')",
        ) from None
    return dt.replace(tzinfo=UTC).timestamp()


def _sessions(path, conv: dict, where: str) -> list[tuple[int, list, float]]:
    """Sessions in chronological (numeric) order: ``(number, turns, start time)``."""
    out = []
    for key, turns in conv.items():
        m = _SESSION.fullmatch(key)
        if m is None:
            continue
        if not isinstance(turns, list):
            raise SourceError(
                path, f"{where}.{key}", f"expected a list of turns, got {type(turns).__name__}"
            )
        n = int(m.group(1))
        dt_key = f"session_{n}_date_time"
        start = parse_session_time(path, need(path, conv, dt_key, where), f"{where}.{dt_key}")
        out.append((n, turns, start))
    out.sort(key=lambda s: s[0])
    return out


def _turn_writes(src, sid: str, sessions, roles: dict, opts: dict, tok, report: Counter,
                 where: str) -> tuple[dict[str, int], list[list[dict]]]:  # fmt: skip
    """Every turn as a write, one block per session; and each dia_id's session index."""
    turn_pos: dict[str, int] = {}  # dia_id -> index into `sessions`
    writes: list[list[dict]] = []
    for si, (n, turns, start) in enumerate(sessions):
        block = []
        for k, turn in enumerate(turns):
            tw = f"{where}.conversation.session_{n}[{k}]"
            dia = need(src, turn, "dia_id", tw, str)
            if dia in turn_pos:
                raise SourceError(src, f"{tw}.dia_id", f"duplicate dia_id {dia!r}")
            speaker = need(src, turn, "speaker", tw, str)
            if speaker not in roles:
                raise SourceError(
                    src,
                    f"{tw}.speaker",
                    f"speaker {speaker!r} is neither speaker_a nor speaker_b",
                )
            text = need(src, turn, "text", tw, str)
            caption = turn.get("blip_caption") if opts["captions"] else None
            if isinstance(caption, str) and caption:
                text = f"{text} [shares a photo: {caption}]"
            t = start + k * opts["turn_seconds"]
            turn_pos[dia] = si
            block.append({
                "event": "write", "id": f"{sid}/{dia}", "stream": sid, "t": t,
                "type": roles[speaker], "tokens": max(1, tok.count(text)),
                "task": sid, "session": f"session_{n}", "text": text,
                "meta": {"speaker": speaker, "dia_id": dia},
            })  # fmt: skip
        report["turns"] += len(turns)
        writes.append(block)
    return turn_pos, writes


def _evidence(src, evidence: list, qw: str, turn_pos: dict, report: Counter):
    """A question's evidence strings as distinct resolvable dia_ids, and what was dropped."""
    needs: list[str] = []
    drops: list[str] = []
    for ei, raw in enumerate(evidence):
        if not isinstance(raw, str):
            raise SourceError(src, f"{qw}.evidence[{ei}]", f"expected a string, got {raw!r}")
        report["evidence_strings"] += 1
        ids, repairs, bad = normalise_evidence(raw)
        report.update({f"repaired_{k}": v for k, v in repairs.items()})
        for piece in bad:
            report["dropped_unparseable"] += 1
            drops.append(piece)
        for ident in ids:
            if ident not in turn_pos:
                report["dropped_dangling"] += 1
                drops.append(ident)
            elif ident in needs:
                report["duplicate_evidence"] += 1
            else:
                needs.append(ident)
    return needs, drops


def _questions(src, sid: str, qa: list, where: str, turn_pos: dict, n_sessions: int,
               placement: str, report: Counter, dropped: list) -> list[list[dict]]:  # fmt: skip
    """Every question with resolvable evidence as a request, in the slot (session index) after
    which it is asked."""
    after: list[list[dict]] = [[] for _ in range(n_sessions)]
    for qi, item in enumerate(qa):
        qw = f"{where}.qa[{qi}]"
        question = need(src, item, "question", qw, str)
        evidence = need(src, item, "evidence", qw, list)
        category = item.get("category")
        report["questions"] += 1
        needs, drops = _evidence(src, evidence, qw, turn_pos, report)
        if drops:
            dropped.append({"sample_id": sid, "qa": qi, "evidence": evidence, "dropped": drops})
        if not needs:
            key = "questions_without_evidence" if not evidence else "questions_all_evidence_dropped"
            report[key] += 1
            continue
        report["questions_kept"] += 1
        report["needs"] += len(needs)
        report[f"category_{category}"] += 1
        answer = item.get("answer", item.get("adversarial_answer"))
        meta = {"category": category, "qa_index": qi}
        if answer is not None:
            meta["answer"] = str(answer)
        if drops:
            meta["evidence_dropped"] = drops
        req = {
            "event": "request", "id": f"{sid}/q{qi}", "stream": sid, "text": question,
            "needs": [f"{sid}/{d}" for d in needs], "meta": meta,
        }  # fmt: skip
        slot = n_sessions - 1 if placement == "end" else max(turn_pos[d] for d in needs)
        after[slot].append(req)
    return after


def _in_order(sessions, writes, after, turn_seconds: float, report: Counter) -> list[dict]:
    """Each session's writes then its questions, times made non-decreasing (file order kept)."""
    events = []
    last_t = float("-inf")
    for si, block in enumerate(writes):
        t_after = (block[-1]["t"] if block else sessions[si][2]) + turn_seconds
        for req in after[si]:
            req["t"] = t_after
        for ev in (*block, *after[si]):
            if ev["t"] < last_t:  # a session dated before the previous one: keep file order
                report["times_clamped"] += 1
                ev["t"] = last_t
            last_t = ev["t"]
            events.append(ev)
    return events


def convert_locomo(
    src: str | Path,
    placement: str = "end",
    tokenizer: str | None = None,
    speaker_a_type: str = "user_input",
    speaker_b_type: str = "user_input",
    turn_seconds: float = 30.0,
    captions: bool = True,
) -> tuple[list[dict], dict]:
    """Convert ``src`` (``locomo10.json``) into ``(events, header)``; nothing is written.

    The header holds the provenance (source file and sha256, tokenizer, options) and the
    ``report`` of evidence repairs and drops.
    """
    if placement not in PLACEMENTS:
        raise ValueError(f"placement must be one of {', '.join(PLACEMENTS)}, got {placement!r}")
    for name, ty in (("speaker_a_type", speaker_a_type), ("speaker_b_type", speaker_b_type)):
        if ty not in ITEM_TYPES:
            raise ValueError(f"{name} must be one of {', '.join(ITEM_TYPES)}, got {ty!r}")
    tok = get_tokenizer(tokenizer)
    src = Path(src)
    data = load_json_list(src, "conversations")
    report: Counter = Counter()
    dropped: list[dict] = []
    events: list[dict] = []
    streams_seen: set[str] = set()
    opts = {"turn_seconds": turn_seconds, "captions": captions}
    for ci, sample in enumerate(data):
        where = f"[{ci}]"
        sid = need(src, sample, "sample_id", where, str)
        if sid in streams_seen:
            raise SourceError(src, f"{where}.sample_id", f"duplicate sample_id {sid!r}")
        streams_seen.add(sid)
        conv = need(src, sample, "conversation", where, dict)
        qa = need(src, sample, "qa", where, list)
        roles = {
            need(src, conv, "speaker_a", f"{where}.conversation", str): speaker_a_type,
            need(src, conv, "speaker_b", f"{where}.conversation", str): speaker_b_type,
        }
        sessions = _sessions(src, conv, f"{where}.conversation")
        turn_pos, writes = _turn_writes(src, sid, sessions, roles, opts, tok, report, where)
        after = _questions(src, sid, qa, where, turn_pos, len(sessions), placement, report,
                           dropped)  # fmt: skip
        events += _in_order(sessions, writes, after, turn_seconds, report)
        report["conversations"] += 1
    header = {
        "converter": "locomo",
        "source": src.name,
        "source_sha256": sha256_file(src),
        "license": "CC BY-NC 4.0",
        "placement": placement,
        **tok.describe(),
        "options": {
            "speaker_a_type": speaker_a_type,
            "speaker_b_type": speaker_b_type,
            "turn_seconds": turn_seconds,
            "captions": captions,
        },  # fmt: skip
        "report": dict(sorted(report.items())),
        "dropped_evidence": dropped,
    }
    return events, header
