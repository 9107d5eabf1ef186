"""token_buffer is LangChain's ConversationTokenBufferMemory: FIFO by tokens, as window."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from memlens.policies.token_buffer import ConversationTokenBuffer
from memlens.policies.window import SlidingWindow
from policy_cases import R, Run, W, traces

from memlens.simulator import simulate


def test_drops_oldest_until_it_fits():
    events = [W("a", 0, tokens=60), W("b", 1, tokens=30), R("q", 2, ["a"]),
              W("c", 3, tokens=50)]  # fmt: skip
    run = Run(events, ConversationTokenBuffer(), budget=100)
    assert run.evicted == ["a"]  # being needed does not keep a message
    events += [W("d", 4, tokens=90)]
    assert Run(events, ConversationTokenBuffer(), budget=100).evicted == ["a", "b", "c"]


@settings(max_examples=80, deadline=None, derandomize=True)
@given(events=traces(), budget=st.sampled_from([1, 40, 100, 250]),
       demand_fetch=st.booleans())  # fmt: skip
@pytest.mark.slow  # kept out of the default run (6-minute budget); make test-all runs it
def test_same_replay_as_window_on_both_engines(events, budget, demand_fetch):
    ref = Run(events, ConversationTokenBuffer(), budget, demand_fetch=demand_fetch)
    win = Run(events, SlidingWindow(), budget, demand_fetch=demand_fetch)
    assert ref.moves == win.moves
    fast = simulate(ref.trace, ConversationTokenBuffer(), budget, demand_fetch=demand_fetch,
                    engine="fast")  # fmt: skip
    assert fast.need_hit.tolist() == ref.result.need_hit.tolist()
    assert fast.move_item.tolist() == ref.result.move_item.tolist()
    assert fast.move_kind.tolist() == ref.result.move_kind.tolist()
