"""Golden regression: exact hits and evictions of every registered policy x 4 budgets x both
demand-fetch settings on every bundled trace (``experiments/results/golden.json``).

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


@pytest.mark.parametrize("trace", golden.TRACES)
def test_every_policy_gives_its_golden_numbers(trace):
    got = {trace: golden.golden_for(trace)}
    diffs = golden.differences({trace: STORED[trace]}, got)
    assert not diffs, "behaviour changed:\n" + "\n".join(diffs)


def test_golden_covers_every_registered_policy():
    from memlens.config import registered_policies

    for trace in golden.TRACES:
        assert sorted(STORED[trace]) == registered_policies(), trace


def test_differences_reports_a_changed_number():
    want = {"t": {"lru": {"fetch=false": {"512": [3, 1]}}}}
    got = {"t": {"lru": {"fetch=false": {"512": [4, 1]}}}}
    assert golden.differences(want, got) == ["t lru fetch=false budget=512: [3, 1] -> [4, 1]"]
    assert golden.differences(want, want) == []
