"""Reopening by the kernel (``memlens.live.restore``) leaves what stepping every event through
the reference handlers (``memlens.live.engine.replay_into``) leaves: the shared marks, each
stream's move log, pins and counters, and the rule scorer's own state, down to its whole
eviction order.  Hypothesis traces with every event kind, alternatives, demand fetch and both
admission settings for fetched items."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from memlens.live.columns import LiveColumns
from memlens.live.engine import LiveState, replay_into
from memlens.live.restore import restore_into
from memlens.policy import restores
from memlens.testing import traces, with_alternatives
from memlens.trace.io import trace_from_events
from policies.lru import LRU
from policies.rule import RuleScorer

SHARED = ("in_wm", "need_hit", "context_tokens", "pinned_tokens_at", "uses_seen")
PER_ITEM = ("_uses", "_last", "_anchor", "_state")


def rebuilt(trace, make, budget: int, demand_fetch: bool, how):
    """A fresh live state and its engines, rebuilt from ``trace`` by ``how``."""
    state = LiveState(LiveColumns.from_trace(trace), trace.annotations)
    return state, how(state, trace, make, budget, demand_fetch, 0)


def eviction_order(policy: RuleScorer, now: int) -> list[int]:
    """Every item the policy would evict, in order, at event ``now`` (this empties it)."""
    return policy.victims(10**12, now)


@settings(max_examples=60, deadline=None)
@given(events=traces(max_events=60), budget=st.sampled_from([20, 60, 150]),
       demand_fetch=st.booleans(), alternatives=st.booleans(), admit_fetched=st.booleans(),
       seed=st.integers(0, 2**16))  # fmt: skip
def test_the_kernel_restores_what_stepping_the_events_leaves(
    events, budget, demand_fetch, alternatives, admit_fetched, seed
):
    if alternatives:
        events = with_alternatives(events, np.random.default_rng(seed))
    trace = trace_from_events(events)
    make = lambda: RuleScorer(admit_fetched=admit_fetched)  # noqa: E731
    stepped, by_step = rebuilt(trace, make, budget, demand_fetch, replay_into)
    restored, by_kernel = rebuilt(trace, make, budget, demand_fetch, restore_into)
    for name in SHARED:
        assert list(getattr(stepped, name)) == list(getattr(restored, name)), name
    last = trace.n_events - 1
    for s, (a, b) in enumerate(zip(by_step, by_kernel, strict=True)):
        assert (a.mv_event, a.mv_item) == (b.mv_event, b.mv_item)
        assert bytes(a.mv_kind) == bytes(b.mv_kind)
        assert list(a.pins) == list(b.pins)  # pin order too
        assert (a.used, a.pinned_tok, a.n_evicted) == (b.used, b.pinned_tok, b.n_evicted)
        assert sorted(a.resident) == sorted(b.resident)
        own = stepped.items_of(s)
        for name in PER_ITEM:
            column_a, column_b = getattr(a.policy, name), getattr(b.policy, name)
            assert [column_a[i] for i in own] == [column_b[i] for i in own], (s, name)
        assert a.policy._override == b.policy._override
        assert eviction_order(a.policy, last) == eviction_order(b.policy, last)


def test_only_a_policy_with_a_kernel_and_restore_is_restored_by_the_kernel():
    assert restores(RuleScorer())
    assert not restores(LRU())  # no restore: stepped through the handlers on reopen


def test_a_restored_manager_goes_on_like_one_that_never_closed(tmp_path):
    """Hand-made: a pin, an annotation and evictions before the reopen; after it, the next
    write evicts what the uninterrupted session evicts."""
    from memlens.live import MemoryManager

    def session(path, reopen_at: int | None):
        clock = iter(float(t) for t in range(100))
        m = MemoryManager("rule", 100, path, clock=lambda: next(clock))
        ids = [m.write("s", f"note {k}", "tool_result", tokens=30) for k in range(3)]
        m.pin(ids[0])
        m.annotate(ids[1], value=0.9)
        m.used("s", [ids[2]])
        if reopen_at is not None:
            m.close()
            m = MemoryManager.reopen(path, clock=lambda: next(clock))
        m.write("s", "one more", "llm_thought", tokens=30)
        m.write("s", "and another", "user_input", tokens=30)
        result = m.result()
        m.close()
        return result

    straight, reopened = session(tmp_path / "a.jsonl", None), session(tmp_path / "b.jsonl", 1)
    assert straight.evictions.sum() > 0
    for field in ("move_event", "move_item", "move_kind", "need_hit"):
        assert np.array_equal(getattr(straight, field), getattr(reopened, field)), field
