"""OpenAI Agents SDK adapter (optional extra ``memlens[openai-agents]``): a ``Session`` whose
history is what a live memory manager's policy keeps under the budget.

    session = MemLensSession(MemoryManager("rule", 4096, record="alice.jsonl"), "alice")
    result = await Runner.run(agent, "What did I order?", session=session)

* ``add_items``: each input item is written as one memory item (its type by kind: user messages
  -> user_input, assistant messages and reasoning -> llm_thought, tool outputs -> tool_result,
  tool calls and the rest -> agent_state; its tokens those of its text), the item itself as the
  text (JSON), so the record alone gives the items back after a restart;
* ``get_items(limit)``: the policy's context, oldest first (the latest ``limit`` of it);
* ``pop_item``: hides and returns the latest item (and records a note on it); ``clear_session``
  hides everything so far.  A record is append-only: hiding is this session object's.

A policy may keep a tool call's output and evict the call (or the other way round); a model API
that insists on pairs then refuses the input: pin tool calls, or use a budget that holds a turn.
"""

from __future__ import annotations

import orjson

from memlens.live.manager import MemoryManager


def item_type(item: dict) -> str:
    """The memory item type of an input item."""
    kind, role = item.get("type", "message"), item.get("role")
    if role == "user":
        return "user_input"
    if kind == "reasoning" or (kind == "message" and role == "assistant"):
        return "llm_thought"
    if kind.endswith("_output") or kind.endswith("_call_output"):
        return "tool_result"
    return "agent_state"


def item_text(item: dict) -> str:
    """The words of an input item, for counting its tokens."""
    content = item.get("content", item.get("output", item.get("arguments", "")))
    if isinstance(content, list):
        return " ".join(str(part.get("text", "")) for part in content if isinstance(part, dict))
    return content if isinstance(content, str) else orjson.dumps(content).decode()


class MemLensSession:
    """The SDK's ``Session`` protocol over a live manager's stream (module docstring)."""

    session_settings = None

    def __init__(self, manager: MemoryManager, session_id: str) -> None:
        self.manager, self.session_id = manager, session_id
        self._hidden: set[str] = set()
        self._written: list[str] = []

    async def get_items(self, limit: int | None = None) -> list[dict]:
        items = [orjson.loads(i.text) for i in self.manager.context(self.session_id)
                 if i.id not in self._hidden]  # fmt: skip
        return items if limit is None else items[-limit:] if limit > 0 else []

    async def add_items(self, items: list[dict]) -> None:
        for item in items:
            item = dict(item)
            ident = self.manager.write(self.session_id, orjson.dumps(item).decode(),
                                       item_type(item),
                                       tokens=self.manager.count_tokens(item_text(item)))  # fmt: skip
            self._written.append(ident)

    async def pop_item(self) -> dict | None:
        while self._written:
            ident = self._written.pop()
            if ident not in self._hidden:
                self._hidden.add(ident)
                self.manager.annotate(ident, note="popped")
                return orjson.loads(self.manager.document(ident)["text"])
        return None

    async def clear_session(self) -> None:
        self._hidden.update(self._written)
        self._written.clear()
