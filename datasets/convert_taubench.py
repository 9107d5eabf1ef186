"""tau-bench trajectories (Yao et al. 2024) -> MemLens trace, with DERIVED needs.

Each trajectory is one stream.  Messages become writes: the system prompt (the airline policy)
is an ``agent_state`` write that is pinned at once, user turns are ``user_input``, assistant
text and the assistant's tool calls are ``llm_thought``, tool outputs are ``tool_result``.
tau-bench has no timestamps, so ``t`` is the message position (one second per message).

Every tool call is a ``request`` emitted just before the call is written.  Nobody annotated
which messages a call depended on, so its ``needs`` are *derived*: each scalar argument value
(strings and numbers; booleans and nulls carry no provenance) is looked up in the earlier
messages of the trajectory, case-insensitively, as a whole token (not inside a longer word or
number).  The source of a value is the first such message (``source="first"``: where the
value entered the conversation) or the latest (``source="last"``); the pinned system prompt is
used only when no other message holds the value.  Values found nowhere are counted, per
argument name, in the header's ``report``; calls none of whose values were found have no needs
and are dropped (counted) unless ``keep_empty``.  Every request's ``meta`` says
``"evidence": "derived"``.
"""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path

import orjson

from memlens.tokenizer import get_tokenizer

from .sources import SourceError, load_json_list, need, sha256_file

SOURCES = ("first", "last")
_ROLE_TYPE = {"user": "user_input", "assistant": "llm_thought", "tool": "tool_result"}


def argument_values(args) -> list[tuple[str, str]]:
    """Scalar leaves of a tool call's arguments as ``(argument path, value string)``.

    Numbers are written as a person would (``30.0`` -> ``30``); booleans, nulls and empty
    strings are skipped because no message is their source.
    """
    out: list[tuple[str, str]] = []

    def walk(value, key: str) -> None:
        if isinstance(value, dict):
            for k, v in value.items():
                walk(v, f"{key}.{k}" if key else str(k))
        elif isinstance(value, list):
            for v in value:
                walk(v, f"{key}[]")
        elif isinstance(value, bool) or value is None:
            return
        elif isinstance(value, int):
            out.append((key, str(value)))
        elif isinstance(value, float):
            out.append((key, str(int(value)) if value.is_integer() else repr(value)))
        elif isinstance(value, str) and value.strip():
            out.append((key, value.strip()))

    walk(args, "")
    return out


def token_pattern(value: str) -> re.Pattern:
    """Whole-token, case-insensitive matcher: ``value`` not flanked by letters, digits or ``_``."""
    return re.compile(r"(?<![0-9A-Za-z_])" + re.escape(value.lower()) + r"(?![0-9A-Za-z_])")


def _stream_name(task_id, trial, index: int, seen: set[str]) -> str:
    name = f"task{task_id}-trial{trial}"
    if name in seen:
        name = f"{name}-{index}"
    seen.add(name)
    return name


def convert_taubench(
    src: str | Path,
    tokenizer: str | None = None,
    source: str = "first",
    keep_empty: bool = False,
) -> tuple[list[dict], dict]:
    """Convert ``src`` (a tau-bench results JSON) into ``(events, header)``; nothing is written."""
    if source not in SOURCES:
        raise ValueError(f"source must be one of {', '.join(SOURCES)}, got {source!r}")
    tok = get_tokenizer(tokenizer)
    src = Path(src)
    data = load_json_list(src, "trajectories")
    report: Counter = Counter()
    unmatched_by_arg: Counter = Counter()
    events: list[dict] = []
    seen: set[str] = set()
    for ti, run in enumerate(data):
        where = f"[{ti}]"
        traj = need(src, run, "traj", where, list)
        task_id = need(src, run, "task_id", where, int)
        trial = run.get("trial", 0)
        stream = _stream_name(task_id, trial, ti, seen)
        reward = run.get("reward")
        # (write id, lowercased text) of earlier messages, the system prompt kept apart
        history: list[tuple[str, str]] = []
        system_ids: list[tuple[str, str]] = []
        report["trajectories"] += 1

        def write(ident, ty, text, t, meta, _stream=stream, _history=history, _task=task_id):
            events.append({
                "event": "write", "id": ident, "stream": _stream, "t": t, "type": ty,
                "tokens": max(1, tok.count(text)), "task": f"task{_task}", "text": text,
                "meta": meta,
            })  # fmt: skip
            _history.append((ident, text.lower()))
            report[f"writes_{ty}"] += 1

        for k, msg in enumerate(traj):
            mw = f"{where}.traj[{k}]"
            role = need(src, msg, "role", mw, str)
            content = msg.get("content")
            if content is not None and not isinstance(content, str):
                raise SourceError(
                    src, f"{mw}.content", f"expected a string or null, got {type(content).__name__}"
                )
            t = float(k)
            ident = f"{stream}/m{k}"
            if role == "system":
                text = content or ""
                events.append({
                    "event": "write", "id": ident, "stream": stream, "t": t, "type": "agent_state",
                    "tokens": max(1, tok.count(text)), "task": f"task{task_id}", "text": text,
                    "meta": {"role": "system", "task_id": task_id, "trial": trial, "reward": reward},
                })  # fmt: skip
                events.append({"event": "pin", "target": ident, "stream": stream, "t": t})
                system_ids.append((ident, text.lower()))
                report["writes_agent_state"] += 1
                report["pins"] += 1
                continue
            if role not in _ROLE_TYPE:
                raise SourceError(
                    src,
                    f"{mw}.role",
                    f"unknown role {role!r} (expected system, user, assistant or tool)",
                )
            if content:
                meta = {"role": role}
                if role == "tool":
                    meta["tool"] = msg.get("name")
                write(ident, _ROLE_TYPE[role], content, t, meta)
            calls = msg.get("tool_calls") or []
            if not isinstance(calls, list):
                raise SourceError(src, f"{mw}.tool_calls", "expected a list")
            for j, call in enumerate(calls):
                cw = f"{mw}.tool_calls[{j}]"
                fn = need(src, call, "function", cw, dict)
                name = need(src, fn, "name", f"{cw}.function", str)
                raw_args = need(src, fn, "arguments", f"{cw}.function", (str, dict))
                if isinstance(raw_args, str):
                    try:
                        args = orjson.loads(raw_args) if raw_args.strip() else {}
                    except orjson.JSONDecodeError as exc:
                        raise SourceError(
                            src, f"{cw}.function.arguments", f"malformed JSON: {exc}"
                        ) from None
                else:
                    args = raw_args
                report["tool_calls"] += 1
                needs: list[str] = []
                found = missing = from_system = 0
                unmatched: list[str] = []
                for arg, value in argument_values(args):
                    report["argument_values"] += 1
                    pat = token_pattern(value)
                    hits = [i for i, text in history if pat.search(text)]
                    if hits:
                        src_id = hits[0] if source == "first" else hits[-1]
                        found += 1
                    else:
                        sys_hits = [i for i, text in system_ids if pat.search(text)]
                        if not sys_hits:
                            missing += 1
                            unmatched.append(arg)
                            unmatched_by_arg[f"{name}.{arg}"] += 1
                            continue
                        src_id = sys_hits[0]
                        from_system += 1
                    if src_id not in needs:
                        needs.append(src_id)
                report["values_found_in_messages"] += found
                report["values_found_in_system_prompt_only"] += from_system
                report["values_unmatched"] += missing
                call_text = f"{name}({raw_args if isinstance(raw_args, str) else orjson.dumps(raw_args).decode()})"
                if needs or keep_empty:
                    report["requests"] += 1
                    report["request_needs"] += len(needs)
                    report["requests_fully_covered"] += int(missing == 0)
                    meta = {
                        "evidence": "derived",
                        "tool": name,
                        "arguments": args,
                        "values": found + from_system + missing,
                        "values_matched": found + from_system,
                    }
                    if unmatched:
                        meta["unmatched"] = unmatched
                    events.append(
                        {
                            "event": "request",
                            "id": f"{stream}/c{k}.{j}",
                            "stream": stream,
                            "t": t,
                            "needs": needs,
                            "text": call_text,
                            "meta": meta,
                        }
                    )
                elif found + from_system + missing == 0:
                    report["requests_dropped_no_arguments"] += 1
                else:
                    report["requests_dropped_no_source"] += 1
                write(
                    f"{stream}/m{k}.{j}",
                    "llm_thought",
                    call_text,
                    t,
                    {"role": "assistant", "tool_call": name},
                )
    header = {
        "converter": "taubench",
        "source": src.name,
        "source_sha256": sha256_file(src),
        "license": "MIT",
        "evidence": "derived",
        **tok.describe(),
        "options": {"source": source, "keep_empty": keep_empty},
        "report": dict(sorted(report.items())),
        "unmatched_by_argument": dict(unmatched_by_arg.most_common()),
    }
    return events, header
