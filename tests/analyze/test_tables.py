"""experiments/tables.py: interval cells and the paired-difference table of a compare.json."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "experiments"))

import tables  # noqa: E402


def row(policy, budget, hit_rate, vs=None):
    r = {"trace": "t", "policy": policy, "budget": budget, "hit_rate": hit_rate,
         "intervals": {"hit_rate": {"estimate": hit_rate, "low": hit_rate - 0.1,
                                    "high": hit_rate + 0.1, "method": "percentile",
                                    "ci": 0.95, "n_streams": 9}}}  # fmt: skip
    if vs is not None:
        r["vs_reference"] = {"reference": "lru", "metrics": {"hit_rate": vs}}
    return r


def test_difference_cells_mark_what_excludes_zero():
    sig = {"estimate": 0.2, "low": 0.1, "high": 0.3, "n_streams": 9, "excludes_zero": True}
    ns = {"estimate": 0.01, "low": -0.02, "high": 0.04, "n_streams": 9, "excludes_zero": False}
    rows = [row("lru", 512, 0.5, {}), row("rule", 512, 0.7, sig), row("lfu", 512, 0.51, ns)]
    rows[0]["vs_reference"]["metrics"] = {}
    text = tables.render(rows)
    assert "### t: hit_rate vs lru" in text
    assert "| rule | +0.200 [+0.100, +0.300] * |" in text
    assert "| lfu | +0.010 [-0.020, +0.040] |" in text
    assert "| lru | (reference) |" in text


def test_no_reference_no_difference_table():
    assert "vs lru" not in tables.render([row("lru", 512, 0.5)])
