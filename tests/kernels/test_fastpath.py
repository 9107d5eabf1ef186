"""The compiled kernels must replay exactly like the reference loop, event for event."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from memlens.policies.lru import LRU
from memlens.policies.token_buffer import ConversationTokenBuffer
from memlens.policies.window import SlidingWindow

from memlens.checker import CheckFailed, check_policy
from memlens.config.store import DATA_DIR
from memlens.policy import COMPILED_KERNELS, OrderedPolicy, compiled_kernel, kernel_of
from memlens.simulator import simulate
from memlens.testing import RESULT_FIELDS, random_events
from memlens.trace.classic import classic_trace, zipf_keys
from memlens.trace.io import load_trace, trace_from_events


def assert_same(tr, policy_cls, budget, demand_fetch):
    ref = simulate(tr, policy_cls(), budget=budget, demand_fetch=demand_fetch, engine="reference")
    fast = simulate(tr, policy_cls(), budget=budget, demand_fetch=demand_fetch, engine="fast")
    assert fast.engine == "fast" and ref.engine == "reference"
    for name in RESULT_FIELDS:
        assert np.array_equal(getattr(ref, name), getattr(fast, name)), name


@given(
    seed=st.integers(0, 2**32 - 1),
    n_events=st.integers(1, 200),
    n_streams=st.integers(1, 3),
    budget=st.integers(1, 120),
    demand_fetch=st.booleans(),
    lru=st.booleans(),
)
def test_fast_equals_reference_on_random_traces(
    seed, n_events, n_streams, budget, demand_fetch, lru
):
    events = random_events(np.random.default_rng(seed), n_events=n_events, n_streams=n_streams)
    tr = trace_from_events(events)
    assert_same(tr, LRU if lru else SlidingWindow, budget, demand_fetch)


@pytest.mark.parametrize("policy_cls", [LRU, SlidingWindow])
@pytest.mark.parametrize("demand_fetch", [False, True])
def test_fast_equals_reference_on_a_zipf_trace(policy_cls, demand_fetch):
    rng = np.random.default_rng(7)
    keys = zipf_keys(20_000, 2_000, 0.8, rng)
    sizes = rng.integers(1, 64, size=2_000)
    assert_same(classic_trace(keys, sizes), policy_cls, 3_000, demand_fetch)


def test_engine_fast_requires_a_kernel():
    class NoKernel(OrderedPolicy):
        name = "no-kernel"

    tr = trace_from_events([{"event": "write", "id": "a", "tokens": 1, "type": "user_input"}])
    with pytest.raises(ValueError, match="no fast kernel"):
        simulate(tr, NoKernel(), budget=4, engine="fast")


def test_kernels_are_registered_for_exact_classes():
    assert COMPILED_KERNELS[LRU] == "memlens.kernels.queues:replay_lru"
    fifo = "memlens.kernels.queues:replay_fifo"
    assert COMPILED_KERNELS[SlidingWindow] == COMPILED_KERNELS[ConversationTokenBuffer] == fifo
    assert (
        kernel_of(LRU()) == "memlens.kernels.queues:replay_lru"
        and kernel_of(SlidingWindow()) == "memlens.kernels.queues:replay_fifo"
    )


class LazyLRU(LRU):
    """An LRU whose touch does nothing: it is a FIFO now, whatever its parent's kernel says."""

    name = "lazy-lru"

    def touch(self, item, now):
        pass


def test_a_subclass_does_not_inherit_its_parents_kernel():
    # before the registry, LazyLRU ran on the "lru" kernel under engine=auto and scored LRU's
    # 816 hits on the bundled tau-bench trace, where its own methods give the window's 623
    tr = load_trace(DATA_DIR / "taubench" / "airline.jsonl.gz")
    auto = simulate(tr, LazyLRU(), budget=2048, engine="auto")
    assert kernel_of(LazyLRU()) is None and auto.engine == "reference"
    # (on the trace of that time, 623 and 816 hits; the bundled trace is regenerated at times)
    window = int(simulate(tr, SlidingWindow(), budget=2048).need_hit.sum())
    lru = int(simulate(tr, LRU(), budget=2048).need_hit.sum())
    assert int(auto.need_hit.sum()) == window != lru
    with pytest.raises(ValueError, match="no fast kernel"):
        simulate(tr, LazyLRU(), budget=2048, engine="fast")
    check_policy(LazyLRU)  # and the subclass passes the checker on its own


def test_a_subclass_may_register_a_kernel_of_its_own():
    @compiled_kernel("memlens.kernels.queues:replay_fifo")
    class LazyLRUAsFifo(LazyLRU):  # touch does nothing: a FIFO, as the fifo kernel replays
        name = "lazy-lru-fifo"

    assert kernel_of(LazyLRUAsFifo()) == "memlens.kernels.queues:replay_fifo"
    assert simulate(BASIC_ZIPF, LazyLRUAsFifo(), budget=3_000).engine == "fast"
    check_policy(LazyLRUAsFifo)


def test_a_wrong_registration_fails_the_checker():
    @compiled_kernel("memlens.kernels.queues:replay_fifo")
    class NotAFifo(LRU):
        name = "not-a-fifo"

    with pytest.raises(
        CheckFailed,
        match="check_compiled_kernel.*'memlens.kernels.queues:replay_fifo' kernel differs",
    ):
        check_policy(NotAFifo)


def test_the_old_class_attribute_is_refused():
    with pytest.raises(TypeError, match="compiled_kernel"):

        class Old(LRU):
            fast_kernel = "lru"

    with pytest.raises(ValueError, match="'module:function'"):
        compiled_kernel("arc")  # a bare name, as the old central dict had them


BASIC_ZIPF = classic_trace(zipf_keys(2_000, 300, 0.8, np.random.default_rng(1)))
