"""The LangChain adapter, offline: a chain with LangChain's own fake chat model keeps its history
in a live manager, so the model sees what the policy keeps, and the record replays."""

from __future__ import annotations

import pytest

pytest.importorskip("langchain_core")

from langchain_core.language_models.fake_chat_models import FakeListChatModel  # noqa: E402
from langchain_core.messages import AIMessage, HumanMessage, SystemMessage  # noqa: E402
from langchain_core.prompts import ChatPromptTemplate, MessagesPlaceholder  # noqa: E402
from langchain_core.runnables.history import RunnableWithMessageHistory  # noqa: E402

from memlens.live import MemoryManager  # noqa: E402
from memlens.live.langchain import MemLensChatMessageHistory, pre_model_hook  # noqa: E402
from memlens.live.replay import replay_record  # noqa: E402
from memlens.trace.io import load_trace  # noqa: E402


def test_a_chain_sees_the_window_the_policy_keeps_and_the_record_replays(tmp_path):
    path = tmp_path / "chat.jsonl"
    manager = MemoryManager("window", 40, path)
    seen: list[int] = []

    class Counting(FakeListChatModel):
        def _call(self, messages, stop=None, run_manager=None, **kwargs):
            seen.append(len(messages))
            return super()._call(messages, stop, run_manager, **kwargs)

    model = Counting(responses=[f"answer number {k} with some words" for k in range(6)])
    prompt = ChatPromptTemplate.from_messages([MessagesPlaceholder("history"), ("human", "{q}")])
    chain = RunnableWithMessageHistory(
        prompt | model, lambda sid: MemLensChatMessageHistory(manager, sid),
        input_messages_key="q", history_messages_key="history",
    )  # fmt: skip
    for k in range(6):
        chain.invoke({"q": f"question {k} about the refund"},
                     config={"configurable": {"session_id": "alice"}})  # fmt: skip
    history = MemLensChatMessageHistory(manager, "alice")
    kept = history.messages
    assert sum(manager.count_tokens(m.content) for m in kept) <= 40  # under the budget
    assert (kept[-1].type, kept[-1].content) == ("ai", "answer number 5 with some words")
    assert seen[0] == 1 and max(seen) < 12  # the model never saw the whole conversation
    manager.close()
    trace = load_trace(path)
    assert trace.n_items == 12  # every message recorded
    assert replay_record(path).evictions.sum() == trace.n_items - len(kept)


def test_the_pre_model_hook_records_new_messages_once_and_selects_under_budget(tmp_path):
    with MemoryManager("lru", 30, tmp_path / "g.jsonl") as manager:
        hook = pre_model_hook(manager, "graph")
        msgs = [
            SystemMessage(content="be brief", id="s"),
            HumanMessage(content="hi " * 20, id="h1"),
        ]
        out = hook({"messages": msgs})
        assert [m.content for m in out["llm_input_messages"]] == ["be brief", "hi " * 20]
        msgs += [
            AIMessage(content="hello there " * 5, id="a1"),
            HumanMessage(content="ok", id="h2"),
        ]
        out = hook({"messages": msgs})
        assert manager.result().move_item.max() == 3  # four messages, each written once
        assert sum(manager.count_tokens(m.content) for m in out["llm_input_messages"]) <= 30
        assert out["llm_input_messages"][-1].content == "ok"


def test_clear_hides_what_was_written(tmp_path):
    with MemoryManager("window", 500, None) as manager:
        history = MemLensChatMessageHistory(manager, "s")
        history.add_messages([HumanMessage(content="a"), AIMessage(content="b")])
        history.clear()
        assert history.messages == []
        history.add_message(HumanMessage(content="c"))
        assert [m.content for m in history.messages] == ["c"]
