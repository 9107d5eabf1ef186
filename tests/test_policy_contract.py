"""The contract every registered policy (conf/policy/*.yaml) must satisfy.

Like cachetools' shared cache tests: one mixin-style check runs against every policy found in
the config group, so a new policy is covered the moment its yaml exists.
"""

from __future__ import annotations

import pytest

from memlens.checker import CheckFailed, check_policy
from memlens.config import make_policy, policy_config, registered_policies
from memlens.policy import OrderedPolicy, Policy, PolicyError
from memlens.trace_io import trace_from_events

POLICIES = registered_policies()


def test_window_and_lru_are_registered():
    assert {"window", "lru"} <= set(POLICIES)


@pytest.mark.parametrize("name", POLICIES)
def test_policy_passes_the_checker(name):
    cfg = policy_config(name)
    policy = make_policy(cfg)
    assert isinstance(policy, Policy)
    assert isinstance(policy.name, str) and policy.name
    check_policy(lambda: make_policy(cfg))


class EvictsPinned(OrderedPolicy):
    """A deliberately broken policy: ignores pins."""

    name = "broken"

    def victims(self, excess, now):
        return [self._order.popitem(last=False)[0]] if self._order else []


class NeverEvicts(OrderedPolicy):
    name = "hoarder"

    def victims(self, excess, now):
        return []


class LeakyLFU(OrderedPolicy):
    """Broken: use counts live on the instance and survive reset(), so trace B is replayed
    with trace A's counts (item indices of different traces collide)."""

    name = "leaky-lfu"

    def __init__(self):
        self.uses: dict[int, int] = {}

    def touch(self, item, now):
        self.uses[item] = self.uses.get(item, 0) + 1

    def victims(self, excess, now):
        candidates = [i for i in self._order if i not in self._pinned]
        if not candidates:
            return []
        victim = min(candidates, key=lambda i: (self.uses.get(i, 0), i))
        del self._order[victim]
        return [victim]


def test_checker_catches_a_policy_that_evicts_pinned_items():
    with pytest.raises(PolicyError, match="pinned"):
        check_policy(EvictsPinned)


def test_checker_catches_a_policy_that_never_evicts():
    with pytest.raises(PolicyError, match="chose nothing"):
        check_policy(NeverEvicts)


def test_checker_catches_state_leaking_across_reset():
    with pytest.raises(CheckFailed, match="reset"):
        check_policy(LeakyLFU)


def test_simulator_rejects_victims_that_are_not_resident():
    class Phantom(OrderedPolicy):
        name = "phantom"

        def victims(self, excess, now):
            return [10_000]

    tr = trace_from_events(
        [{"event": "write", "id": k, "tokens": 5, "type": "user_input"} for k in "abc"]
    )
    from memlens.simulator import simulate

    with pytest.raises(PolicyError, match="not resident"):
        simulate(tr, Phantom(), budget=8)
