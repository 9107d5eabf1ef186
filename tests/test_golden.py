"""Golden regression: exact hits, evictions, miss cost and value-weighted hit rate of every
registered policy x 4 budgets x both demand-fetch settings on every bundled trace
(``experiments/results/golden.json``).

A failure lists each changed number.  If the change is intended, regenerate the file with
``python experiments/golden.py`` and commit the diff: it is the record of what changed.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "experiments"))

import golden  # noqa: E402

STORED = json.loads((REPO / "experiments" / "results" / "golden.json").read_text())


@pytest.mark.parametrize(
    "trace",  # the bundled default trace in the default run; the converted datasets: slow
    [t if t.startswith("default/") else pytest.param(t, marks=pytest.mark.slow)
     for t in golden.TRACES],
)  # fmt: skip
def test_every_policy_gives_its_golden_numbers(trace):
    got = {trace: golden.golden_for(trace)}
    diffs = golden.differences({trace: STORED[trace]}, got)
    assert not diffs, "behaviour changed:\n" + "\n".join(diffs)


def test_golden_covers_every_registered_policy():
    from memlens.config.store import registered_policies

    for trace in golden.TRACES:
        assert sorted(STORED[trace]) == registered_policies(), trace


def test_differences_reports_a_changed_number():
    cell = {"hits": 3, "evictions": 1, "miss_cost_usd": 0.25, "value_weighted_hit_rate": 0.5}
    want = {"t": {"lru": {"fetch=false": {"512": cell}}}}
    got = {"t": {"lru": {"fetch=false": {"512": {**cell, "hits": 4, "miss_cost_usd": 0.2}}}}}
    assert golden.differences(want, got) == [
        "t lru fetch=false budget=512 hits: 3 -> 4",
        "t lru fetch=false budget=512 miss_cost_usd: 0.25 -> 0.2",
    ]
    assert golden.differences(want, want) == []
    gone = {"t": {"lru": {"fetch=false": {}}}}
    assert golden.differences(want, gone)[0] == "t lru fetch=false budget=512 hits: 3 -> None"


def test_golden_pins_every_field_of_every_cell():
    for trace, by_policy in STORED.items():
        for policy, by_fetch in by_policy.items():
            for key, cells in by_fetch.items():
                for budget, cell in cells.items():
                    assert tuple(cell) == golden.FIELDS, (trace, policy, key, budget)
                    assert cell["miss_cost_usd"] == round(cell["miss_cost_usd"], golden.DECIMALS)


def test_record_rounds_floats_and_keeps_counts():
    m = {"hits": 7, "evictions": 2, "miss_cost_usd": 0.1 + 0.2, "value_weighted_hit_rate": None,
         "cost_usd": 1.0}  # fmt: skip
    assert golden.record(m) == {"hits": 7, "evictions": 2, "miss_cost_usd": 0.3,
                                "value_weighted_hit_rate": None}  # fmt: skip
