"""tau-bench trajectories (Yao et al. 2024) -> MemLens trace, with DERIVED needs.

tau-bench's logs are OpenAI chat-completions messages, so this is a thin layer on
:mod:`openai_import`: each trajectory is one conversation (stream ``task<id>-trial<n>``, the
system prompt's ``meta`` keeps task id, trial and reward), imported with the default roles
(system prompt pinned ``agent_state``, ``user_input``, ``llm_thought`` for assistant text and
tool calls, ``tool_result``).  Every assistant turn is a request whose needs come from the
``args`` method of :mod:`needs_derivation`: each value of its tool calls' arguments traced to
the earlier messages holding it.  When several messages hold a value, the default
``source="alternatives"`` says so (trace format 1.1: the need is met when any of them is
resident); ``first`` (where the value entered the conversation) and ``last`` (its latest
mention) pick one, as earlier versions did.  Which pick is made decides the tau-bench verdicts
(docs/how-to/own-logs.md), which is why the default does not pick.
"""

from __future__ import annotations

from pathlib import Path

from memlens.trace.tokenizer import get_tokenizer

from .needs_derivation import PICKS, NeedsSettings, argument_values, token_pattern
from .openai_import import Conversation, Roles, build_events, header_of, read_messages
from .sources import load_json_list, need, sha256_file

SOURCES = PICKS
__all__ = ["SOURCES", "argument_values", "convert_taubench", "token_pattern", "trajectories"]


def trajectories(src: Path) -> list[Conversation]:
    """One conversation per trajectory, streams named ``task<id>-trial<n>`` (made unique)."""
    data = load_json_list(src, "trajectories")
    seen: set[str] = set()
    out = []
    for ti, run in enumerate(data):
        where = f"[{ti}]"
        traj = need(src, run, "traj", where, list)
        task_id = need(src, run, "task_id", where, int)
        trial = run.get("trial", 0)
        name = f"task{task_id}-trial{trial}"
        if name in seen:
            name = f"{name}-{ti}"
        seen.add(name)
        meta = {"task": f"task{task_id}",
                "system_meta": {"task_id": task_id, "trial": trial, "reward": run.get("reward")}}  # fmt: skip
        out.append(Conversation(name, read_messages(src, traj, f"{where}.traj"), meta))
    return out


def convert_taubench(
    src: str | Path,
    tokenizer: str | None = None,
    source: str = "alternatives",
    keep_empty: bool = False,
    commands: bool = False,
) -> tuple[list[dict], dict]:
    """Convert ``src`` (a tau-bench results JSON) into ``(events, header)``; nothing is written.

    ``commands=False`` (default) traces whole argument values only, which is how the shipped
    ``airline.jsonl.gz`` (and the golden numbers on it) were made; ``True`` also splits
    prose and commands into values and records each need's values (90.6% -> 94.6% of the
    argument values traced, ``experiments/needs_scores.py``)."""
    if source not in SOURCES:
        raise ValueError(f"source must be one of {', '.join(SOURCES)}, got {source!r}")
    tok = get_tokenizer(tokenizer)
    src = Path(src)
    needs, roles = NeedsSettings(method="args", pick=source, commands=commands), Roles()
    b = build_events(trajectories(src), needs, roles, tok, keep_empty)
    b.report["trajectories"] = b.report.pop("conversations", 0)
    extra = {"converter": "taubench", "source": src.name, "source_sha256": sha256_file(src),
             "license": "MIT", "options": {"source": source, "keep_empty": keep_empty}}  # fmt: skip
    if commands:
        extra["options"]["commands"] = True
    return b.events, header_of(b, needs, roles, tok, extra)
