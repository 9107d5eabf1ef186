"""The OpenAI Agents SDK adapter, offline: ``Runner.run`` with a scripted model keeps the
conversation in a live manager's session, and what the model is given is what the policy keeps."""

from __future__ import annotations

import asyncio

import pytest

pytest.importorskip("agents")

from agents import Agent, Runner, set_tracing_disabled  # noqa: E402
from agents.items import ModelResponse  # noqa: E402
from agents.models.interface import Model  # noqa: E402
from agents.usage import Usage  # noqa: E402
from openai.types.responses import ResponseOutputMessage, ResponseOutputText  # noqa: E402

from memlens.live import MemoryManager  # noqa: E402
from memlens.live.openai_agents import MemLensSession, item_type  # noqa: E402
from memlens.live.replay import replay_record  # noqa: E402

set_tracing_disabled(True)  # offline: no trace export is even attempted


class ScriptedModel(Model):
    """Answers each turn with a fixed sentence; remembers how many input items it was given."""

    def __init__(self) -> None:
        self.inputs: list[int] = []

    async def get_response(self, system_instructions, input, model_settings, tools,
                           output_schema, handoffs, tracing, **kwargs) -> ModelResponse:  # fmt: skip
        self.inputs.append(len(input) if isinstance(input, list) else 1)
        text = ResponseOutputText(text=f"reply {len(self.inputs)}: noted, thank you",
                                  type="output_text", annotations=[])  # fmt: skip
        message = ResponseOutputMessage(id=f"msg{len(self.inputs)}", content=[text],
                                        role="assistant", status="completed", type="message")  # fmt: skip
        return ModelResponse(output=[message], usage=Usage(), response_id=None)

    def stream_response(self, *args, **kwargs):  # pragma: no cover - not used
        raise NotImplementedError


def test_runner_keeps_the_session_in_the_manager_under_the_budget(tmp_path):
    path = tmp_path / "agent.jsonl"
    manager = MemoryManager("window", 30, path)
    session = MemLensSession(manager, "alice")
    model = ScriptedModel()
    agent = Agent(name="helper", instructions="be brief", model=model)

    async def turns() -> None:
        for k in range(6):
            await Runner.run(agent, f"my order number is {k} please remember", session=session)

    asyncio.run(turns())
    kept = asyncio.run(session.get_items())
    assert kept[-1]["role"] == "assistant"
    assert sum(manager.count_tokens(i["content"] if isinstance(i["content"], str)
                                    else i["content"][0]["text"]) for i in kept) <= 30  # fmt: skip
    assert model.inputs[0] == 1 and max(model.inputs) < 12  # never the whole conversation
    manager.close()
    assert replay_record(path).move_item.max() == 11  # 6 user + 6 assistant items recorded


def test_pop_and_clear_hide_items(tmp_path):
    with MemoryManager("window", 500, None) as manager:
        session = MemLensSession(manager, "s")
        asyncio.run(session.add_items([{"role": "user", "content": "a"},
                                       {"role": "assistant", "content": "b"}]))  # fmt: skip
        assert asyncio.run(session.pop_item()) == {"role": "assistant", "content": "b"}
        assert asyncio.run(session.get_items()) == [{"role": "user", "content": "a"}]
        asyncio.run(session.clear_session())
        assert asyncio.run(session.get_items()) == [] and asyncio.run(session.pop_item()) is None


def test_item_types_by_kind():
    assert item_type({"role": "user", "content": "x"}) == "user_input"
    assert item_type({"type": "message", "role": "assistant", "content": []}) == "llm_thought"
    assert (
        item_type({"type": "function_call_output", "call_id": "c", "output": "7"}) == "tool_result"
    )
    assert item_type({"type": "function_call", "name": "f", "arguments": "{}"}) == "agent_state"
