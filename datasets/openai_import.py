"""Agent logs in the OpenAI chat-completions message format -> a MemLens trace.

The most common shape an agent's log takes is the list of messages it sent to a chat model:
``{"role": "system"|"user"|"assistant"|"tool", "content": ..., "tool_calls": [...],
"tool_call_id": ...}``.  One conversation is one stream: a ``.json`` file holding
``{"messages": [...]}`` or a bare list of messages, or one row of a ``.jsonl`` file in either
shape; a directory is every ``.json``/``.jsonl`` file in it, in name order.

Every message becomes a write typed by its role (:class:`Roles`; the system prompt is pinned),
each tool call an extra write ``name(arguments)`` (it stays in the context).  Every assistant
turn is a request, emitted before the turn is written, whose needs are *derived* from the
earlier writes of the stream by :mod:`needs_derivation` (the header's ``needs`` block records
the method and settings; every request's ``meta`` says ``"evidence": "derived"``).  A tool
message's ``cost`` (or ``cost_usd``) becomes the write's ``cost``, its ``latency_s`` (or
``latency_ms``) goes to ``meta``; an assistant message's ``usage`` to the request's ``meta``.

Every field is read through :func:`sources.need`, so a malformed log stops with its file, JSON
Lines row and field (``chat.jsonl: line 3: messages[2].tool_calls[0].function.arguments:
malformed JSON``) before anything is written.
"""

from __future__ import annotations

import gzip
import hashlib
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path

import orjson

from memlens.trace.model import ITEM_TYPES
from memlens.trace.tokenizer import get_tokenizer

from .needs_derivation import Deriver, Earlier, NeedsSettings, Step
from .sources import SourceError, need, sha256_file

ALTERNATIVES_VERSION = "1.1"  # the trace format whose needs may hold groups of alternatives
SUFFIXES = (".json", ".jsonl", ".jsonl.gz")


def _role(default, meaning: str):
    return field(default=default, metadata={"help": meaning})


@dataclass
class Roles:
    """Item type of each kind of message (every value one of ``memlens.trace.model.ITEM_TYPES``)."""

    system: str = _role("agent_state", "item type of system messages")
    user: str = _role("user_input", "item type of user messages")
    assistant: str = _role("llm_thought", "item type of assistant text")
    tool: str = _role("tool_result", "item type of tool outputs")
    tool_call: str = _role("llm_thought", "item type of an assistant's tool call name(arguments)")
    pin_system: bool = _role(True, "pin system messages when written")

    def __post_init__(self) -> None:
        for name, ty in asdict(self).items():
            if name != "pin_system" and ty not in ITEM_TYPES:
                raise ValueError(f"roles.{name} must be one of {', '.join(ITEM_TYPES)}, got {ty!r}")


@dataclass
class Message:
    role: str
    text: str
    calls: list[tuple[str, str, object]]  # (name, arguments as written, parsed arguments)
    raw: dict
    where: str


@dataclass
class Conversation:
    """One stream's messages and where they came from (for the stream name and errors)."""

    stream: str
    messages: list[Message]
    meta: dict = field(default_factory=dict)


# ---------------------------------------------------------------------------- reading
def content_text(path, value, where: str) -> str:
    """``content`` as text: a string, null, or a list of parts (their ``text`` joined)."""
    if value is None or isinstance(value, str):
        return value or ""
    if not isinstance(value, list):
        raise SourceError(path, where, f"expected a string, a list of parts or null, "
                                       f"got {type(value).__name__}")  # fmt: skip
    out = []
    for i, part in enumerate(value):
        if isinstance(part, str):
            out.append(part)
        elif isinstance(part, dict):
            text = part.get("text")
            if text is not None and not isinstance(text, str):
                raise SourceError(path, f"{where}[{i}].text", "expected a string")
            out.append(text or "")
        else:
            raise SourceError(path, f"{where}[{i}]", "expected a string or an object")
    return "\n".join(t for t in out if t)


def tool_calls(path, msg: dict, where: str) -> list[tuple[str, str, object]]:
    """``(name, arguments text, parsed arguments)`` of each tool call of an assistant message."""
    calls = msg.get("tool_calls") or []
    if not isinstance(calls, list):
        raise SourceError(path, f"{where}.tool_calls", "expected a list")
    out = []
    for j, call in enumerate(calls):
        cw = f"{where}.tool_calls[{j}]"
        fn = need(path, call, "function", cw, dict)
        name = need(path, fn, "name", f"{cw}.function", str)
        raw = need(path, fn, "arguments", f"{cw}.function", (str, dict))
        if isinstance(raw, dict):
            args, text = raw, orjson.dumps(raw).decode()
        else:
            try:
                args, text = (orjson.loads(raw) if raw.strip() else {}), raw
            except orjson.JSONDecodeError as exc:
                raise SourceError(
                    path, f"{cw}.function.arguments", f"malformed JSON: {exc}"
                ) from None
        out.append((name, text, args))
    return out


def read_messages(path, value, where: str) -> list[Message]:
    """A conversation: ``{"messages": [...]}`` or a bare list of messages.  ``where`` is its
    place in the file: ``""``, a JSON path (``[3].traj``) or a JSON Lines row (``line 3:``)."""
    sep = " " if where.endswith(":") else "." if where else ""
    if isinstance(value, dict):
        if "messages" not in value:
            raise SourceError(path, f"{where}{sep}messages", "missing field")
        value, where = value["messages"], f"{where}{sep}messages"
        if not isinstance(value, list):
            raise SourceError(path, where, f"expected a list, got {type(value).__name__}")
    elif not isinstance(value, list):
        raise SourceError(path, where.rstrip(":") or "<root>", "expected a list of messages or "
                          f"an object with 'messages', got {type(value).__name__}")  # fmt: skip
    prefix = f"{where} " if where.endswith(":") else where
    out = []
    for k, msg in enumerate(value):
        mw = f"{prefix}[{k}]"
        role = need(path, msg, "role", mw, str)
        if role not in ("system", "user", "assistant", "tool"):
            raise SourceError(path, f"{mw}.role", f"unknown role {role!r} "
                                                  "(expected system, user, assistant or tool)")  # fmt: skip
        text = content_text(path, msg.get("content"), f"{mw}.content")
        calls = tool_calls(path, msg, mw) if role == "assistant" else []
        for key in ("cost", "cost_usd", "latency_s", "latency_ms"):
            if key in msg and (isinstance(msg[key], bool) or not isinstance(msg[key], int | float)):
                raise SourceError(path, f"{mw}.{key}", f"expected a number, got {msg[key]!r}")
        out.append(Message(role, text, calls, msg, mw))
    return out


def _rows(path: Path) -> list[tuple[int, object]]:
    """``(line number, parsed JSON)`` of every non-blank line of a JSON Lines file."""
    opener = gzip.open if path.name.endswith(".gz") else open
    rows = []
    with opener(path, "rb") as fh:
        for n, line in enumerate(fh, 1):
            if line.strip():
                try:
                    rows.append((n, orjson.loads(line)))
                except orjson.JSONDecodeError as exc:
                    raise SourceError(path, f"line {n}", f"malformed JSON: {exc}") from None
    return rows


def read_file(path: Path) -> list[Conversation]:
    """The conversations of one ``.json`` or ``.jsonl`` file (stream names from the file)."""
    stem = path.name.split(".")[0]
    if path.suffix == ".json":
        try:
            data = orjson.loads(path.read_bytes())
        except orjson.JSONDecodeError as exc:
            raise SourceError(path, "", f"malformed JSON: {exc}") from None
        return [Conversation(_name(data, stem), read_messages(path, data, ""))]
    out = []
    for n, row in _rows(path):
        out.append(Conversation(_name(row, f"{stem}-{n}"), read_messages(path, row, f"line {n}:")))
    return out


def _name(data, default: str) -> str:
    ident = data.get("id") if isinstance(data, dict) else None
    return str(ident) if isinstance(ident, str | int) and not isinstance(ident, bool) else default


def source_files(src: str | Path) -> list[Path]:
    """``src`` itself, or the ``.json``/``.jsonl``/``.jsonl.gz`` files of a directory."""
    src = Path(src)
    if not src.is_dir():
        return [src]
    files = sorted(p for p in src.iterdir() if p.is_file() and p.name.endswith(SUFFIXES))
    if not files:
        raise SourceError(src, "", f"no {', '.join(SUFFIXES)} files in this directory")
    return files


def read_conversations(src: str | Path) -> list[Conversation]:
    """Every conversation under ``src``, stream names made unique (``name-2``...)."""
    convs = [c for path in source_files(src) for c in read_file(path)]
    seen: Counter = Counter()
    for c in convs:
        seen[c.stream] += 1
        if seen[c.stream] > 1:
            c.stream = f"{c.stream}-{seen[c.stream]}"
    return convs


def sources_sha256(src: str | Path) -> str:
    """The file's sha256, or for a directory the sha256 of its files' names and digests."""
    files = source_files(src)
    if not Path(src).is_dir():
        return sha256_file(files[0])
    lines = "".join(f"{p.name} {sha256_file(p)}\n" for p in files)
    return hashlib.sha256(lines.encode()).hexdigest()


# ---------------------------------------------------------------------------- events
def call_text(name: str, args_text: str) -> str:
    return f"{name}({args_text})"


def step_of(msg: Message) -> tuple[str, list]:
    """The text of an assistant turn (its words and calls) and its calls' arguments."""
    parts = [msg.text] if msg.text else []
    parts += [call_text(name, text) for name, text, _ in msg.calls]
    return "\n".join(parts), [args for _, _, args in msg.calls]


@dataclass
class Builder:
    """Turns conversations into events; ``report`` counts what was written, derived, dropped."""

    roles: Roles
    tok: object
    keep_empty: bool = False
    report: Counter = field(default_factory=Counter)
    unmatched: Counter = field(default_factory=Counter)
    untraced_by_tool: Counter = field(default_factory=Counter)
    events: list[dict] = field(default_factory=list)
    steps: int = 0  # assistant turns so far: the next one's row among the deriver's steps
    provenance: bool = True  # record each need's values in the request's meta

    def write(self, conv: Conversation, ident: str, ty: str, text: str, t: float, meta: dict,
              cost: float | None = None) -> None:  # fmt: skip
        ev = {"event": "write", "id": ident, "stream": conv.stream, "t": t, "type": ty,
              "tokens": max(1, self.tok.count(text)), "text": text, "meta": meta}  # fmt: skip
        if conv.meta.get("task"):
            ev["task"] = conv.meta["task"]
        if cost is not None:
            ev["cost"] = float(cost)
        self.events.append(ev)
        self.report[f"writes_{ty}"] += 1

    def request(self, conv: Conversation, ident: str, t: float, text: str, res, msg) -> None:
        """A request for one assistant turn, or a count of why it was dropped."""
        r, calls = self.report, msg.calls
        r["assistant_turns"] += 1
        r["argument_values"] += res.values
        r["values_found_in_messages"] += res.found
        r["values_found_in_system_prompt_only"] += res.system_only
        r["values_unmatched"] += len(res.unmatched or [])
        for arg in res.unmatched or []:
            tool = calls[0][0] if len(calls) == 1 else "*"
            self.unmatched[f"{tool}.{arg}"] += 1
            self.untraced_by_tool[tool] += 1
        if not res.needs and not self.keep_empty:
            r["requests_dropped_no_needs"] += 1
            return
        groups = sum(isinstance(n, list) for n in res.needs)
        r["requests"] += 1
        r["request_needs"] += len(res.needs)
        r["request_needs_with_alternatives"] += groups
        meta = {"evidence": "derived"}
        if calls:
            meta["tools"] = [name for name, _, _ in calls]
            meta["arguments"] = [args for _, _, args in calls]
        if res.values:  # the args method looked at argument values
            meta["values"], meta["values_matched"] = res.values, res.found + res.system_only
        if res.unmatched:
            meta["unmatched"] = res.unmatched
        if res.sources and self.provenance:  # which values produced which need
            meta["provenance"] = res.sources
        if isinstance(msg.raw.get("usage"), dict):
            meta["usage"] = msg.raw["usage"]
        self.events.append({"event": "request", "id": ident, "stream": conv.stream, "t": t,
                            "needs": res.needs, "text": text, "meta": meta})  # fmt: skip

    def conversation(self, conv: Conversation, deriver: Deriver, rows: list[int]) -> None:
        """Every message of ``conv`` in order; ``rows[i]`` is write i's row in the deriver."""
        earlier: list[Earlier] = []
        self.report["conversations"] += 1
        for k, msg in enumerate(conv.messages):
            t, ident = float(k), f"{conv.stream}/m{k}"
            meta = {"role": msg.role}
            if msg.role == "system":
                meta |= conv.meta.get("system_meta", {})
            if msg.role == "assistant":
                text, args = step_of(msg)
                step = Step(text, args, row=self.steps)
                self.steps += 1
                res = deriver.derive(step, earlier, rows[: len(earlier)])
                self.request(conv, f"{conv.stream}/r{k}", t, text, res, msg)
            self._message_writes(conv, msg, ident, t, meta, earlier)

    def _message_writes(self, conv, msg: Message, ident, t, meta, earlier) -> None:
        """The writes of one message (its text; an assistant's calls), pinned if a system one."""
        role = msg.role
        if role == "tool":
            meta |= {
                k: msg.raw[k] for k in ("tool_call_id", "name") if isinstance(msg.raw.get(k), str)
            }
            for key, scale in (("latency_s", 1.0), ("latency_ms", 1e-3)):
                if key in msg.raw:
                    meta["latency_s"] = msg.raw[key] * scale
        cost = msg.raw.get("cost", msg.raw.get("cost_usd")) if role == "tool" else None
        if msg.text or role == "system":
            self.write(conv, ident, getattr(self.roles, role), msg.text, t, meta, cost)
            earlier.append(
                Earlier(
                    ident,
                    msg.text,
                    role == "system" and self.roles.pin_system,
                    assistant=role == "assistant",
                )
            )
            if role == "system" and self.roles.pin_system:
                self.events.append({"event": "pin", "target": ident, "stream": conv.stream, "t": t})
                self.report["pins"] += 1
        for j, (name, text, _) in enumerate(msg.calls):
            cid = f"{ident}.{j}"
            self.write(conv, cid, self.roles.tool_call, call_text(name, text), t,
                       {"role": "assistant", "tool_call": name})  # fmt: skip
            earlier.append(Earlier(cid, call_text(name, text), assistant=True))
            self.report["tool_calls"] += 1


def written_texts(conv: Conversation) -> tuple[list[str], list[str]]:
    """The texts the stream's writes will have, in order, and its assistant turns' texts."""
    items, steps = [], []
    for msg in conv.messages:
        if msg.role == "assistant":
            steps.append(step_of(msg)[0])
        if msg.text or msg.role == "system":
            items.append(msg.text)
        items += [call_text(name, text) for name, text, _ in msg.calls]
    return items, steps


def build_events(convs: list[Conversation], needs: NeedsSettings, roles: Roles, tok,
                 keep_empty: bool = False) -> Builder:  # fmt: skip
    """Every conversation's events, needs derived with one deriver over the whole log."""
    per = [written_texts(c) for c in convs]
    items = [t for i, _ in per for t in i]
    steps = [t for _, s in per for t in s]
    deriver = Deriver(needs, items, steps)
    b = Builder(roles, tok, keep_empty, provenance=needs.commands)
    start = 0
    for conv, (its, _) in zip(convs, per, strict=True):
        b.conversation(conv, deriver, list(range(start, start + len(its))))
        start += len(its)
    return b


def header_of(b: Builder, needs: NeedsSettings, roles: Roles, tok, extra: dict) -> dict:
    """The trace header: provenance, roles, the needs method and the report."""
    head = {**extra, **tok.describe(), "roles": asdict(roles), "needs": needs.describe(),
            "evidence": "derived", "report": dict(sorted(b.report.items())),
            "unmatched_by_argument": dict(b.unmatched.most_common())}  # fmt: skip
    if needs.commands:
        head["untraced_by_tool"] = dict(b.untraced_by_tool.most_common())
    if b.report["request_needs_with_alternatives"]:
        head["version"] = ALTERNATIVES_VERSION
    return head


UNTRACED_SHARE = 0.2  # more untraced argument values than this share earns a warning


def untraced_warning(header: dict) -> str | None:
    """One ``warning:`` line when more than a fifth of the argument values were traced to no
    earlier message (their needs are missing from the trace), counted per tool."""
    r = header.get("report", {})
    total, untraced = r.get("argument_values", 0), r.get("values_unmatched", 0)
    if not total or untraced <= UNTRACED_SHARE * total:
        return None
    tools = ", ".join(f"{t} {n}" for t, n in header.get("untraced_by_tool", {}).items())
    return (f"warning: {untraced} of {total} tool-call argument values ({untraced / total:.0%}) "
            f"were traced to no earlier message; their needs are missing (by tool: {tools})")  # fmt: skip


def import_openai(
    src: str | Path,
    tokenizer: str | None = None,
    needs: NeedsSettings | None = None,
    roles: Roles | None = None,
    keep_empty: bool = False,
) -> tuple[list[dict], dict]:
    """Import ``src`` (a file or a directory of logs) into ``(events, header)``; nothing is
    written.  Raises :class:`SourceError` naming file, row and field on malformed input."""
    needs, roles = needs or NeedsSettings(), roles or Roles()
    tok = get_tokenizer(tokenizer)
    convs = read_conversations(src)
    b = build_events(convs, needs, roles, tok, keep_empty)
    extra = {"importer": "openai", "source": Path(src).name, "source_sha256": sources_sha256(src),
             "options": {"keep_empty": keep_empty}}  # fmt: skip
    return b.events, header_of(b, needs, roles, tok, extra)
