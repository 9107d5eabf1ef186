"""LangChain / LangGraph adapter (optional extra ``memlens[langchain]``): the conversation's
messages go through a live memory manager, and what the model is shown is what the policy keeps.

* :class:`MemLensChatMessageHistory`: a ``BaseChatMessageHistory`` (``RunnableWithMessageHistory``,
  any chain that takes a message history): ``add_messages`` writes each message as an item (its
  type by role: human -> user_input, ai -> llm_thought, tool -> tool_result, system and the rest
  -> agent_state; its tokens those of its content), ``messages`` is the policy's context.
* :func:`pre_model_hook`: for a LangGraph agent (``create_react_agent(..., pre_model_hook=...)``):
  writes the state's messages it has not seen and returns ``{"llm_input_messages": ...}``, the
  ones the policy keeps under the budget.

Each item's text is the message as LangChain's own JSON (``message_to_dict``), so the record
alone gives the messages back after a restart.  ``clear`` hides what was written so far from this
history object (a record is append-only).
"""

from __future__ import annotations

from collections.abc import Sequence

import orjson
from langchain_core.chat_history import BaseChatMessageHistory
from langchain_core.messages import BaseMessage, message_to_dict, messages_from_dict

from memlens.live.manager import MemoryManager

ROLE_TYPES = {"human": "user_input", "ai": "llm_thought", "tool": "tool_result",
              "function": "tool_result"}  # fmt: skip


def _content(message: BaseMessage) -> str:
    content = message.content
    return content if isinstance(content, str) else orjson.dumps(content).decode()


class MemLensChatMessageHistory(BaseChatMessageHistory):
    """A chat history whose ``messages`` are what the manager's policy keeps (module docstring)."""

    def __init__(self, manager: MemoryManager, stream: str) -> None:
        self.manager, self.stream = manager, stream
        self._hidden_below = -1  # item ids up to this index were cleared

    @property
    def messages(self) -> list[BaseMessage]:  # type: ignore[override]
        items = [i for i in self.manager.context(self.stream)
                 if int(i.id[1:]) > self._hidden_below]  # fmt: skip
        return messages_from_dict([orjson.loads(i.text) for i in items])

    def add_messages(self, messages: Sequence[BaseMessage]) -> None:
        for message in messages:
            self.add_message_item(message)

    def add_message_item(self, message: BaseMessage) -> str:
        """Write one message; returns its item id."""
        text = orjson.dumps(message_to_dict(message)).decode()
        return self.manager.write(self.stream, text, ROLE_TYPES.get(message.type, "agent_state"),
                                  tokens=self.manager.count_tokens(_content(message)))  # fmt: skip

    def clear(self) -> None:
        written = [int(i[1:]) for i in self.manager._item_index if i[1:].isdigit()]
        self._hidden_below = max(written, default=-1)


def pre_model_hook(manager: MemoryManager, stream: str):
    """A LangGraph ``pre_model_hook``: record the state's new messages, and give the model the
    ones the policy keeps (``llm_input_messages``; the graph's state keeps them all)."""
    history = MemLensChatMessageHistory(manager, stream)
    seen: set[str] = set()

    def hook(state) -> dict:
        messages = state["messages"] if isinstance(state, dict) else state.messages
        for k, message in enumerate(messages):
            key = message.id or f"#{k}"
            if key not in seen:
                seen.add(key)
                history.add_message_item(message)
        return {"llm_input_messages": history.messages}

    return hook
