"""One table over every registered policy that has a compiled kernel: the kernel replays the
default configuration exactly as the reference engine does (every field of the result, the
whole move log included).

The per-kernel files (``test_kernels_<name>.py``) keep what is particular to one kernel: its
settings' corners, hand-computed cases and the properties only that policy has.  A policy
added to ``conf/policy/`` with ``@compiled_kernel`` is in this table without a line here.
"""

from __future__ import annotations

import importlib

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from memlens.config.compose import policy_config
from memlens.config.schema import build_policy
from memlens.config.store import registered_policies
from memlens.policy import COMPILED_KERNELS, kernel_of
from memlens.simulator import MoveKind
from memlens.testing import assert_kernel_matches, random_events, with_alternatives
from memlens.trace.generate import generate_simple
from memlens.trace.io import trace_from_events

CONFIGS = {name: policy_config(name) for name in registered_policies()}  # composed once


def make_policy(name: str):
    """A fresh instance of the registered policy ``name`` with its default settings."""
    return build_policy(CONFIGS[name])


WITH_KERNEL = [name for name in CONFIGS if kernel_of(make_policy(name))]
GENERATED = trace_from_events(
    list(generate_simple(streams=3, events_per_stream=1200, pin_rate=0.05, seed=5))
)


def test_the_table_holds_every_bundled_kernel():
    # an independent list: the bundled policies that ship a kernel (docs/concepts/policies.md)
    assert set(WITH_KERNEL) == {"generative_agents", "learned", "lfu", "lru", "memgpt",
                                "memorybank", "memoryos_heat", "oracle", "rule",
                                "token_buffer", "window"}  # fmt: skip


@pytest.mark.parametrize("name", WITH_KERNEL)
def test_every_registration_names_an_importable_replay_function(name):
    target = COMPILED_KERNELS[type(make_policy(name))]
    module, _, function = target.partition(":")
    assert callable(getattr(importlib.import_module(module), function))


@pytest.mark.parametrize("demand_fetch", [False, True])
@pytest.mark.parametrize("budget", [300, 3000])
@pytest.mark.parametrize("name", WITH_KERNEL)
def test_kernel_equals_reference_on_a_generated_trace_with_pins(name, budget, demand_fetch):
    assert_kernel_matches(GENERATED, lambda: make_policy(name), budget, demand_fetch)


@pytest.mark.parametrize("name", [n for n in WITH_KERNEL if n != "oracle"])
def test_a_small_budget_evicts(name):
    from memlens.simulator import simulate

    res = simulate(GENERATED, make_policy(name), 300, progress=False)
    assert int((res.move_kind == MoveKind.EVICT).sum()) > 0


@pytest.mark.parametrize("name", WITH_KERNEL)
@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), n_events=st.integers(1, 150), n_streams=st.integers(1, 3),
       budget=st.sampled_from([1, 10, 60, 400, 5000]), demand_fetch=st.booleans(),
       alternatives=st.booleans())  # fmt: skip
def test_kernel_equals_reference_on_random_traces(name, seed, n_events, n_streams, budget,
                                                  demand_fetch, alternatives):  # fmt: skip
    rng = np.random.default_rng(seed)
    events = random_events(rng, n_events=n_events, n_streams=n_streams)
    if alternatives:
        events = with_alternatives(events, rng)
    assert_kernel_matches(trace_from_events(events), lambda: make_policy(name), budget,
                          demand_fetch)  # fmt: skip
