"""The ``fusion`` method: its score fusion by hand, the answer's parts (hypothesis: any text),
echoes, a hand-made log end to end, and calibration's coordinate search against brute force."""

from __future__ import annotations

import itertools
import re

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from memlens.datasets.calibrate_needs import FUSION_KNOBS, better, calibrate, search
from memlens.datasets.fusion_needs import (
    answer_parts,
    echo_source,
    fuse,
    fusion_positions,
    scaled,
    top_positions,
)
from memlens.datasets.needs_derivation import Deriver, Earlier, NeedsSettings, Step


# ------------------------------------------------------------------------- by hand
def test_fuse_by_hand():
    lexical, semantic = np.array([2.0, 1.0, 0.0]), np.array([0.5, 0.25, 1.0])
    # 2/2 + 0.5*0.5/1, 1/2 + 0.5*0.25/1, 0/2 + 0.5*1/1
    assert fuse(lexical, semantic, 0.5).tolist() == [1.25, 0.625, 0.5]
    # scaled by the whole step's best (4), not this vector's own (2)
    assert fuse(lexical, semantic, 0.5, scale=4.0).tolist() == [0.75, 0.375, 0.5]
    assert fuse(lexical, semantic, 0.0).tolist() == [1.0, 0.5, 0.0]
    assert fuse(np.zeros(3), np.array([-0.2, 0.0, 0.4]), 1.0).tolist() == [0.0, 0.0, 1.0]


def test_scaled_and_top_positions():
    assert scaled(np.array([-1.0, 0.0])).tolist() == [0.0, 0.0]
    s = np.array([0.2, 1.0, 0.95, 0.0, 1.0])
    assert top_positions(s, 1, 1.0) == [4]  # a tie goes to the later (nearer) item
    assert top_positions(s, 3, 0.95) == [4, 1, 2]
    assert top_positions(s, 3, 0.96) == [4, 1]
    assert top_positions(np.zeros(2), 2, 0.5) == []


@pytest.mark.parametrize(
    "answer, parts",
    [
        ("pottery, camping and painting", ["pottery", "camping", "painting"]),
        ("Sweden", ["Sweden"]),
        ("beach; mountains\nforest OR lake", ["beach", "mountains", "forest", "lake"]),
        ("Android phone", ["Android phone"]),  # "and" only as a whole word
        ("", []),
        (" , ", []),
    ],
)
def test_answer_parts(answer, parts):
    assert answer_parts(answer) == parts


@given(st.text())
def test_answer_parts_any_text(text):
    parts = answer_parts(text)
    assert all(isinstance(p, str) and p and p == p.strip() and p in text for p in parts)
    assert (parts == []) == (not re.sub(r"[\s,;]|\band\b|\bor\b", "", text, flags=re.I).strip())


def test_echo_source():
    sets = [{"cat", "tom", "adopt"}, {"dog"}, {"cat", "tom", "wow"}].__getitem__
    assert echo_source(2, {"cat", "tom"}, sets, 2) == 0  # introduced two items before
    assert echo_source(2, {"cat", "tom"}, sets, 1) == 2  # out of the window: itself
    assert echo_source(2, {"cat", "wow"}, sets, 3) == 2  # "wow" is its own
    assert echo_source(2, set(), sets, 3) == 2 and echo_source(0, {"cat"}, sets, 3) == 0


def test_fusion_positions_parts_by_hand():
    s = NeedsSettings(method="fusion", fusion_answer_weight=2.0, fusion_embedding_weight=0.0,
                      fusion_part_ratio=0.5, fusion_top_k=1, fusion_ratio=1.0)  # fmt: skip
    question, answer = np.array([1.0, 0.0, 0.0]), np.array([0.0, 2.0, 1.0])
    parts = [np.array([0.0, 2.0, 0.0]), np.array([0.0, 0.0, 1.0])]
    # whole: 1+0, 0+4, 0+2 -> best 1 (4); part 2: 0+2 at 2, 2/4 = 0.5 >= 0.5 of the best
    assert fusion_positions(question, answer, parts, np.zeros(3), s) == [1, 2]
    s.fusion_part_ratio = 0.6
    assert fusion_positions(question, answer, parts, np.zeros(3), s) == [1]
    assert fusion_positions(np.zeros(3), np.zeros(3), [], np.ones(3), s) == []


# ------------------------------------------------------------------------ end to end
PETS = [
    Earlier("s", "You are a helpful assistant.", pinned=True),
    Earlier("m0", "I adopted a cat named Tom last spring"),
    Earlier("m1", "Wow, a cat named Tom!"),
    Earlier("m2", "my dog Rex likes long walks"),
    Earlier("m3", "the weather is cold and grey today"),
]


def _fusion(**kw) -> list:
    q, a = "What pets does Ana have?", "a cat named Tom and a dog named Rex"
    s = NeedsSettings(method="fusion", **kw)
    d = Deriver(s, [e.text for e in PETS], [f"{q} {a}"])
    step = Step(f"{q} {a}", [], row=0, question=q, answer=a)
    return d.derive(step, PETS, list(range(len(PETS)))).needs


def test_fusion_traces_each_value_and_the_echo_back():
    kw = {"fusion_top_k": 1, "fusion_part_ratio": 0.2}
    assert sorted(_fusion(**kw, fusion_echo_window=3)) == ["m0", "m2"]
    assert sorted(_fusion(**kw, fusion_echo_window=0)) == ["m1", "m2"]  # the echo kept
    assert _fusion(fusion_top_k=1, fusion_part_ratio=1.0, fusion_echo_window=0) == ["m1"]
    assert "s" not in _fusion(fusion_top_k=3, fusion_ratio=0.01)


def test_fusion_settings_checked_and_described():
    for kw, message in (({"fusion_ratio": 0.0}, "needs.fusion_ratio"),
                        ({"fusion_part_ratio": 1.5}, "needs.fusion_part_ratio"),
                        ({"fusion_answer_weight": -1.0}, "needs.fusion_answer_weight"),
                        ({"fusion_echo_window": -1}, "needs.fusion_echo_window")):  # fmt: skip
        with pytest.raises(ValueError, match=re.escape(message)):
            NeedsSettings(**kw)
    d = NeedsSettings(method="fusion").describe()
    assert set(FUSION_KNOBS) <= set(d) and "bm25_ratio" not in d and "bm25_stem" in d
    assert not any(k.startswith("fusion_") for k in NeedsSettings(method="union").describe())


# ------------------------------------------------------------------------ calibration
def test_better_orders_by_target_then_recall():
    meets, misses = {"precision": 0.7, "recall": 0.3}, {"precision": 0.5, "recall": 0.9}
    assert better(meets, misses, 0.6) and not better(misses, meets, 0.6)
    assert better({"precision": 0.65, "recall": 0.4}, meets, 0.6)
    assert better({"precision": 0.55, "recall": 0.1}, misses, 0.6)  # none meets: precision
    assert not better(meets, dict(meets), 0.6)  # a tie keeps the earlier


def test_search_finds_what_brute_force_finds():
    knobs = {"fusion_ratio": (1.0, 0.9, 0.8), "fusion_part_ratio": (1.0, 0.6, 0.2)}

    def scorer(_, s):  # each knob loosened: recall up, precision down
        loose = (1.0 - s.fusion_ratio) * 5 + (1.0 - s.fusion_part_ratio)
        return {"precision": 0.8 - 0.2 * loose, "recall": 0.4 + 0.2 * loose}

    start = NeedsSettings(method="fusion", fusion_ratio=1.0, fusion_part_ratio=1.0)
    for target in (0.5, 0.62, 0.7, 0.9):
        got, scores, n = search(None, start, knobs, target, scorer=scorer)
        grid = [NeedsSettings(method="fusion", fusion_ratio=a, fusion_part_ratio=b)
                for a, b in itertools.product(*knobs.values())]  # fmt: skip
        best = grid[0]
        for g in grid[1:]:
            best = g if better(scorer(None, g), scorer(None, best), target) else best
        assert scorer(None, got) == scorer(None, best) == scores and n <= len(grid)


def test_calibrate_fusion_records_every_knob():
    events = [
        {"event": "write", "id": f"m{k}", "stream": "s", "t": float(k), "type": "user_input",
         "tokens": 5, "text": e.text, "meta": {}} for k, e in enumerate(PETS[1:])
    ] + [{"event": "request", "id": "q", "stream": "s", "needs": ["m0", "m2"],
          "text": "What pets does Ana have?",
          "meta": {"answer": "a cat named Tom and a dog named Rex"}}]  # fmt: skip
    chosen, points = calibrate(events, NeedsSettings(method="fusion"), 0.9, "pets.jsonl")
    assert chosen.calibration.startswith("pets.jsonl: target precision 0.9 met: ")
    assert all(f"{k}=" in chosen.calibration for k in FUSION_KNOBS)
    assert points[0][1]["precision"] >= 0.9 and points[0][1]["recall"] == 1.0
