"""A LangGraph tool-calling agent whose model is shown what a live memory manager keeps
(``pre_model_hook``).

    python examples/langgraph_loop.py [--record out/langgraph.jsonl] [--steps 40] [--policy rule] [--budget 150]

Each turn the graph (a model node and a ``ToolNode`` with an ``order_status`` tool: the ReAct
loop; ``create_react_agent(..., pre_model_hook=...)`` takes the same hook, but LangGraph 1.x
deprecates it for ``langchain.agents``) gets one question; the hook writes the state's new messages to the manager and gives the model the ones the
policy keeps under the budget, so the conversation's memory across turns is the manager's (the
graph keeps no checkpoint).  The turn then says what it needed (its own four messages and the
last answer about the same order, ``OrderMemory``).  The chat model is scripted (it calls the
tool, then answers with the result) unless ``OPENAI_BASE_URL`` is set: then a small chat model
calls the OpenAI-compatible endpoint (``OPENAI_API_KEY``, ``OPENAI_MODEL``) with urllib.
``max_shown_tokens`` is the most the model was ever shown; the printed counts are what
``memlens simulate`` on the record reports.
"""

from __future__ import annotations

import json
import os

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, ToolMessage, convert_to_openai_messages
from langchain_core.outputs import ChatGeneration, ChatResult
from langchain_core.tools import tool
from langchain_core.utils.function_calling import convert_to_openai_tool
from langgraph.graph import END, START, MessagesState, StateGraph
from langgraph.prebuilt import ToolNode, tools_condition
from orders import (
    OrderMemory,
    arguments,
    chat_completion,
    order_of,
    order_status,
    steady_clock,
    summary,
)

from memlens.live.langchain import pre_model_hook


class ScriptedChatModel(BaseChatModel):
    """Calls ``order_status`` for the order asked about, then answers with its result."""

    @property
    def _llm_type(self) -> str:
        return "scripted"

    def answer(self, messages) -> AIMessage:
        last = messages[-1]
        if isinstance(last, ToolMessage):
            return AIMessage(content=f"Here you are: {last.content}")
        order = last.content.split()[-1].rstrip("?")
        return AIMessage(content="", tool_calls=[{"name": "order_status", "id": "call",
                                                  "args": {"order": order}}])  # fmt: skip

    def _generate(self, messages, stop=None, run_manager=None, **kwargs) -> ChatResult:
        return ChatResult(generations=[ChatGeneration(message=self.answer(messages))])


class EndpointChatModel(ScriptedChatModel):
    """One chat completion per call from an OpenAI-compatible endpoint (OPENAI_BASE_URL)."""

    tools: list = []  # OpenAI tool schemas

    @property
    def _llm_type(self) -> str:
        return "openai-compatible"

    def answer(self, messages) -> AIMessage:
        msg = chat_completion(convert_to_openai_messages(messages), self.tools)
        calls = [{"name": c["function"]["name"], "id": c["id"],
                  "args": json.loads(c["function"]["arguments"] or "{}")}
                 for c in msg.get("tool_calls") or []]  # fmt: skip
        return AIMessage(content=msg.get("content") or "", tool_calls=calls)


def agent_graph(model, tools, hook, count, shown: list[int]):
    """The ReAct loop as a two-node graph: the model (shown what the hook selects) and the
    tools, until the model stops calling them.  ``shown`` collects the tokens (``count``) it
    was shown."""

    def call_model(state: MessagesState) -> dict:
        messages = hook(state)["llm_input_messages"]
        shown.append(sum(count(m.content) for m in messages if isinstance(m.content, str)))
        return {"messages": [model.invoke(messages)]}

    graph = StateGraph(MessagesState)
    graph.add_node("model", call_model)
    graph.add_node("tools", ToolNode(tools))
    graph.add_edge(START, "model")
    graph.add_conditional_edges("model", tools_condition, {"tools": "tools", END: END})
    graph.add_edge("tools", "model")
    return graph.compile()


def main() -> None:
    args = arguments(__doc__, "out/langgraph.jsonl")
    step = 0

    @tool
    def order_status_tool(order: str) -> str:
        """The status of an order."""
        return order_status(order, step)

    order_status_tool.name = "order_status"
    if os.environ.get("OPENAI_BASE_URL"):
        model = EndpointChatModel(tools=[convert_to_openai_tool(order_status_tool)])
    else:
        model = ScriptedChatModel()
    shown: list[int] = []
    with OrderMemory(args.policy, args.budget, args.record, clock=steady_clock()) as memory:
        hook = pre_model_hook(memory, "agent")
        graph = agent_graph(model, [order_status_tool], hook, memory.count_tokens, shown)
        for step in range(args.steps):  # noqa: B007 - the tool reads it
            order = order_of(step)
            graph.invoke({"messages": [("user", f"What is the status of {order}?")]})
            memory.used("agent", memory.about[order][-6:], text=order)
        print(summary("langgraph", args, memory.counts(), max(shown)))
    print(f"record: {args.record}")


if __name__ == "__main__":
    main()
