"""Budget monotonicity on the bundled trace: hit rate at 2B >= at B, or a named anomaly."""

from __future__ import annotations

import pytest
from memlens.policies.memoryos_heat import MemoryOSHeat

from memlens.checker import CheckFailed, budget_violations, check_budget_monotone
from memlens.config.store import data_path
from memlens.trace.io import load_trace

BUDGETS = (256, 512, 1024, 2048)
#: the published baselines with a code variant, and the rest of the online policies
VARIANTS = ["generative_agents", "memgpt", "memorybank", "memoryos_heat"]
ONLINE = ["window", "lru", "lfu", "rule", "token_buffer"]


@pytest.fixture(scope="module")
def bundled():
    return load_trace(data_path("default/agent-small.jsonl.gz"))


def _factory(name: str, overrides: list[str]):
    from memlens.config.compose import policy_config
    from memlens.config.schema import build_policy

    cfg = policy_config(name, overrides)
    return lambda: build_policy(cfg)


def _case(name: str, overrides: list[str]):
    if name == "generative_agents":  # its TF-IDF fit and reference replays: 2-5 s
        return pytest.param(name, overrides, marks=pytest.mark.slow)
    return pytest.param(name, overrides)


@pytest.mark.parametrize("name,overrides",
                         [_case(n, []) for n in ONLINE + VARIANTS]
                         + [_case(n, ["policy.variant=code"]) for n in VARIANTS])  # fmt: skip
def test_every_baseline_is_monotone_in_budget_on_the_bundled_trace(bundled, name, overrides):
    assert check_budget_monotone(_factory(name, overrides), bundled, BUDGETS) is None


def old_memoryos() -> MemoryOSHeat:
    """This class's default before issue 28: no queue, L = tokens / 1000, 24 h, no promotion."""
    return MemoryOSHeat(short_term_pages=0, length="tokens", recency_tau_hours=24.0,
                        heat_threshold=None)  # fmt: skip


def test_the_long_item_anomaly_is_real_and_named(bundled):
    found = budget_violations(old_memoryos, bundled, (1024,))
    assert [b for b, _, _ in found] == [1024]
    ((_, at_b, at_2b),) = found
    assert round(at_b, 3) == 0.741 and round(at_2b, 3) == 0.678  # issue 28's numbers
    assert check_budget_monotone(old_memoryos, bundled, (1024,)) == "long-item anomaly"
    assert MemoryOSHeat().budget_anomaly() is None


def test_an_anomaly_must_be_declared_and_explained(bundled):
    class Undeclared(MemoryOSHeat):
        def budget_anomaly(self):
            return None

    with pytest.raises(CheckFailed, match="0.741 at budget 1024 but 0.678 at 2048"):
        check_budget_monotone(lambda: Undeclared(short_term_pages=0, length="tokens",
                                                 recency_tau_hours=24.0, heat_threshold=None),
                              bundled, (1024,))  # fmt: skip

    class Unexplained(MemoryOSHeat):
        def budget_anomaly(self):
            return "an anomaly no docstring mentions"

    with pytest.raises(CheckFailed, match="neither its class nor its module docstring"):
        check_budget_monotone(Unexplained, bundled, (1024,))
