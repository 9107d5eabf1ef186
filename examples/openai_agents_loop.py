"""An OpenAI Agents SDK agent whose session is a live memory manager (``MemLensSession``).

    python examples/openai_agents_loop.py [--record out/agents.jsonl] [--steps 40] [--policy rule] [--budget 150]

Each turn ``Runner.run`` asks about an order; the agent calls its ``order_status`` tool and
answers.  The session's history is what the policy keeps under the budget; the turn then says
what it needed (its own four items and the last answer about the same order, ``OrderMemory``).  The model is scripted (it calls the
tool, then answers with the result) unless ``OPENAI_BASE_URL`` is set: then an
OpenAI-compatible endpoint answers (``OPENAI_API_KEY``, ``OPENAI_MODEL``) through the SDK's
chat-completions model.  ``max_shown_tokens`` is the most the session ever handed the model; the
printed counts are what ``memlens simulate`` on the record reports.
"""

from __future__ import annotations

import asyncio
import os

from agents import Agent, Runner, function_tool, set_tracing_disabled
from agents.items import ModelResponse
from agents.models.interface import Model
from agents.usage import Usage
from openai.types.responses import (
    ResponseFunctionToolCall,
    ResponseOutputMessage,
    ResponseOutputText,
)
from orders import OrderMemory, arguments, order_of, order_status, steady_clock, summary

from memlens.live.openai_agents import MemLensSession, item_text

set_tracing_disabled(True)  # the SDK's own traces would go to OpenAI's servers


class ScriptedModel(Model):
    """Calls ``order_status`` for the order the user asked about, then answers with its result."""

    async def get_response(self, system_instructions, input, model_settings, tools,
                           output_schema, handoffs, tracing, **kwargs) -> ModelResponse:  # fmt: skip
        last = input[-1]
        if last.get("type") == "function_call_output":
            text = ResponseOutputText(text=f"Here you are: {last['output']}", type="output_text",
                                      annotations=[])  # fmt: skip
            out = ResponseOutputMessage(id="msg", content=[text], role="assistant",
                                        status="completed", type="message")  # fmt: skip
        else:
            order = last["content"].split()[-1].rstrip("?")
            out = ResponseFunctionToolCall(arguments=f'{{"order": "{order}"}}', call_id="call",
                                           name="order_status", type="function_call")  # fmt: skip
        return ModelResponse(output=[out], usage=Usage(), response_id=None)

    def stream_response(self, *args, **kwargs):  # pragma: no cover - not used
        raise NotImplementedError


def endpoint_model():
    """The SDK's chat-completions model on an OpenAI-compatible endpoint."""
    from agents import OpenAIChatCompletionsModel
    from openai import AsyncOpenAI

    client = AsyncOpenAI(base_url=os.environ["OPENAI_BASE_URL"],
                         api_key=os.environ.get("OPENAI_API_KEY", "none"))  # fmt: skip
    return OpenAIChatCompletionsModel(os.environ.get("OPENAI_MODEL", "gpt-4o-mini"), client)


class MeasuredSession(MemLensSession):
    """The adapter, noting the most tokens of history it gave the model."""

    shown = 0

    async def get_items(self, limit=None):
        items = await super().get_items(limit)
        tokens = sum(self.manager.count_tokens(item_text(i)) for i in items)
        self.shown = max(self.shown, tokens)
        return items


async def run(args) -> str:
    step = 0

    @function_tool
    def lookup(order: str) -> str:
        """The status of an order."""
        return order_status(order, step)

    lookup.name = "order_status"
    model = endpoint_model() if os.environ.get("OPENAI_BASE_URL") else ScriptedModel()
    agent = Agent(name="orders", instructions="Answer with the order's status.", model=model,
                  tools=[lookup])  # fmt: skip
    with OrderMemory(args.policy, args.budget, args.record, clock=steady_clock()) as memory:
        session = MeasuredSession(memory, "agent")
        for step in range(args.steps):  # noqa: B007 - the tool reads it
            order = order_of(step)
            await Runner.run(agent, f"What is the status of {order}?", session=session)
            memory.used("agent", memory.about[order][-6:], text=order)
        return summary("openai-agents", args, memory.counts(), session.shown)


if __name__ == "__main__":
    args = arguments(__doc__, "out/agents.jsonl")
    print(asyncio.run(run(args)))
    print(f"record: {args.record}")
