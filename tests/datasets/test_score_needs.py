"""score-needs counting (hand-computed), BM25 selection, and calibration's choice."""

from __future__ import annotations

import numpy as np
import pytest
from memlens.datasets.bm25_needs import pick_best
from memlens.datasets.calibrate_needs import GRIDS, calibrate, curve
from memlens.datasets.needs_derivation import NeedsSettings
from memlens.datasets.score_needs import Tally, score_events


def _req(ident, needs, **meta):
    return {"event": "request", "id": ident, "stream": "s", "needs": needs, "meta": meta}


def test_tally_by_hand():
    t = Tally()
    t.add([["a", "b"], "c"], ["a", "d"])  # ab right (a), c wrong; a recalled, d not
    assert t.scores() == {"precision": 0.5, "recall": 0.5, "f1": 0.5, "derived_needs": 2,
                          "reference_needs": 2, "requests": 1}  # fmt: skip
    t.add([], ["e"])  # a request with nothing derived: recall only
    s = t.scores()
    assert s["precision"] == 0.5 and s["recall"] == pytest.approx(1 / 3)
    assert s["f1"] == pytest.approx(2 * 0.5 * (1 / 3) / (0.5 + 1 / 3))


def test_reference_groups_and_types():
    ref = [_req("q1", [["x", "y"]], category=1), _req("q2", ["z"], category=2)]
    got = [_req("q1", ["y"]), _req("q2", ["w"])]
    s = score_events(got, ref).as_dict()
    assert (s["precision"], s["recall"]) == (0.5, 0.5)
    assert s["by_type"]["category 1"]["f1"] == 1.0 and s["by_type"]["category 2"]["f1"] == 0.0
    assert score_events(ref, ref).as_dict()["f1"] == 1.0  # a trace against itself


def test_missing_requests_count_as_nothing_derived():
    s = score_events([], [_req("q1", ["a"])]).as_dict()
    assert s["recall"] == 0.0 and s["precision"] is None
    assert s["requests_without_derived_needs"] == 1


def test_pick_best_ratio_and_top_k():
    scores = np.array([1.0, 4.0, 3.5, 0.0, 3.9])
    ids = ["a", "b", "c", "d", "e"]
    assert pick_best(scores, ids, 1, 1.0) == ["b"]
    assert pick_best(scores, ids, 3, 0.85) == ["b", "e", "c"]  # 3.4 <= all three
    assert pick_best(scores, ids, 3, 0.97) == ["b", "e"]  # 3.88 <= 3.9 only
    assert pick_best(np.zeros(3), ids[:3], 2, 0.5) == []


LABELLED = [
    {"event": "write", "id": "m0", "stream": "s", "t": 0.0, "type": "user_input", "tokens": 5,
     "text": "my cat Tom likes tuna fish", "meta": {}},
    {"event": "write", "id": "m1", "stream": "s", "t": 1.0, "type": "user_input", "tokens": 5,
     "text": "my dog Rex likes long walks", "meta": {}},
    {"event": "write", "id": "m2", "stream": "s", "t": 2.0, "type": "user_input", "tokens": 5,
     "text": "the weather is cold and grey", "meta": {}},
    _req("q0", ["m0"], answer="Tom"), _req("q1", ["m1"], answer="Rex the dog"),
    _req("q2", ["m0", "m1"], answer="Tom the cat and Rex the dog"),
]  # fmt: skip


def test_calibration_keeps_loosest_value_meeting_the_target():
    s = NeedsSettings(method="bm25", bm25_top_k=3)
    points = curve(LABELLED, s)
    key, grid = GRIDS["bm25"]
    assert [v for v, _ in points] == list(grid)
    for target in (0.5, 0.9, 1.0):
        chosen, _ = calibrate(LABELLED, s, target, "labelled.jsonl")
        ok = [v for v, sc in points if sc["precision"] >= target]
        assert getattr(chosen, key) == (ok[-1] if ok else getattr(chosen, key))
        assert chosen.calibration.startswith(f"labelled.jsonl: target precision {target:g}")
    with pytest.raises(ValueError, match="no threshold"):
        calibrate(LABELLED, NeedsSettings(method="args"), 0.5, "x")
