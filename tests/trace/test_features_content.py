"""Content features: hand-counted texts, and the vectorised counter against a per-text regex
implementation of the same definitions."""

from __future__ import annotations

import re

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from policy_cases import W

from memlens.trace.features import (
    CONCLUSION_WORDS,
    ERROR_WORDS,
    content_boost,
    content_features,
    static_value,
    text_features,
)
from memlens.trace.io import trace_from_events
from memlens.trace.model import ITEM_TYPES


def test_hand_counted():
    f = text_features([
        "Error: failed to call getUser in src/app.py",
        "The final answer is 42 for Alice at IBM, v2",
        "let me think, terror and unanswered",
        "ord_7 INV-2024 /usr/bin",
        "",
    ])  # fmt: skip
    assert f.error.tolist() == [2, 0, 0, 0, 0]
    assert f.conclusion.tolist() == [0, 2, 0, 0, 0]
    assert f.numbers.tolist() == [0, 1, 0, 1, 0]  # "v2" is an identifier, not a number
    assert f.identifiers.tolist() == [2, 1, 0, 3, 0]  # getUser, app.py; v2; ord_7, INV-2024, /usr
    assert f.entities.tolist() == [0, 2, 0, 1, 0]  # Alice, IBM ("The" opens the sentence); INV
    assert f.tokens.tolist() == [7, 10, 6, 3, 0]  # words, when no token counts are given


def test_non_ascii_and_nul_do_not_shift_items():
    f = text_features(["über Größe", "a\x00b error", "Ünïcode 12 — final"])
    assert f.error.tolist() == [0, 1, 0]
    assert f.conclusion.tolist() == [0, 0, 1]
    assert f.numbers.tolist() == [0, 0, 1]


def _keyword_count(words, text: str) -> int:
    low = text.lower()
    return sum(len(re.findall(rf"(?<![a-z0-9_])(?:{w})\b", low)) for w in words)


ID_RE = re.compile(r"(?=[A-Za-z][0-9]|[A-Za-z][_-][0-9]|[a-z0-9]_[a-z0-9]|[a-z][A-Z][a-z]"
                   r"|[A-Za-z]\.[A-Za-z]|(?<![A-Za-z0-9_])/[A-Za-z0-9_])")  # fmt: skip
ENT_RE = re.compile(r"(?<=[a-z0-9,;:)] )[A-Z](?=[a-z])|(?<![A-Za-z])[A-Z](?=[A-Z])")
NUM_RE = re.compile(r"(?<![A-Za-z0-9_.])[0-9]")

ALPHABET = st.sampled_from(list("aAeEfFrRoOiInNlLdDsStT0123456789 _-./,:;)#\n") + [
    "error ", "failed ", "final ", "answer ", "not found ", "IBM ", "Alice ", "x_1 ",
])  # fmt: skip


@settings(max_examples=200, deadline=None, derandomize=True)
@given(texts=st.lists(st.lists(ALPHABET, max_size=30).map("".join), min_size=1, max_size=6))
def test_vectorised_counts_match_per_text_regexes(texts):
    f = text_features(texts)
    assert f.error.tolist() == [_keyword_count(ERROR_WORDS, t) for t in texts]
    assert f.conclusion.tolist() == [_keyword_count(CONCLUSION_WORDS, t) for t in texts]
    assert f.identifiers.tolist() == [len(ID_RE.findall(t)) for t in texts]
    assert f.entities.tolist() == [len(ENT_RE.findall(t)) for t in texts]
    assert f.numbers.tolist() == [len(NUM_RE.findall(t)) for t in texts]


def test_static_value_by_hand_and_cached():
    trace = trace_from_events([
        W("a", 0, "tool_result", tokens=1000, cost=0.5, text="error: failed, final answer 42"),
        W("b", 1, "llm_thought", tokens=1, text="hmm"),
    ])  # fmt: skip
    v = static_value(trace)
    # 0.6 + error 0.2 + conclusion 0.15 + number 0.05 + length 0.05 (1000 tokens) + cost 0.15
    assert v[0] == pytest.approx(1.2)
    # 0.4 + length 0.05 * log(2) / log(1001)
    assert v[1] == pytest.approx(0.4 + 0.05 * np.log(2) / np.log(1001))
    assert content_features(trace) is content_features(trace)
    zero = content_boost(content_features(trace), error=0, conclusion=0, numbers=0,
                         identifiers=0, entities=0, length=0)  # fmt: skip
    assert zero.tolist() == [0.0, 0.0]


def test_type_table_must_name_every_type():
    trace = trace_from_events([W("a", 0)])
    with pytest.raises(ValueError, match="missing"):
        static_value(trace, type_base={"user_input": 1.0})


def test_static_value_is_cached_per_parameter_set_and_bounded():
    from memlens.testing import random_events
    from memlens.trace import features

    trace = trace_from_events(random_events(np.random.default_rng(2), 60, 2))
    first = static_value(trace)
    assert static_value(trace) is first  # the same parameters: computed once
    assert not first.flags.writeable  # shared, so nobody may change it in place
    flat = static_value(trace, type_base=dict.fromkeys(features.ITEM_TYPES, 1.0))
    assert not np.array_equal(flat, first)  # other parameters: their own numbers
    for k in range(features._STATIC_KEEP + 2):  # a tuner's trials: the cache stays bounded
        static_value(trace, cost_boost=1.0 + k)
    assert len(trace.__dict__[features._STATIC_KEY]) == features._STATIC_KEEP
    again = static_value(trace)  # evicted, computed again: the same numbers
    assert again is not first and np.array_equal(again, first)


ALPHABET = "aZz09_-./ ,;:)(\x00éA1b"


@given(st.text(alphabet=ALPHABET, max_size=24))
def test_text_presence_is_text_features_counts_above_zero(text):
    from memlens.trace.features import COUNT_FIELDS, text_presence

    once = text_features([text], np.zeros(1, np.int64))
    assert text_presence(text) == tuple(int(getattr(once, k)[0] > 0) for k in COUNT_FIELDS)


@given(st.lists(st.text(alphabet=ALPHABET + " error final", max_size=30), min_size=1,
                max_size=6))  # fmt: skip
def test_static_value_of_one_item_is_static_value_bit_for_bit(texts):
    from memlens.testing import trace, w
    from memlens.trace.features import static_value, static_value_of

    tr = trace(*(w(f"m{k}", 5 + k, ITEM_TYPES[k % 4], text=t, cost=0.02 * (k % 2))
                 for k, t in enumerate(texts)))  # fmt: skip
    whole = static_value(tr)
    for k in range(tr.n_items):
        one = static_value_of([int(tr.item_type[k])], [texts[k]], [int(tr.item_tokens[k])],
                              [float(tr.item_cost[k])])  # fmt: skip
        assert one.tobytes() == whole[k : k + 1].tobytes()


def test_static_value_of_matches_on_a_trace_large_enough_for_simd_loops():
    from memlens.testing import random_events
    from memlens.trace.features import static_value, static_value_of

    tr = trace_from_events(random_events(np.random.default_rng(0), 3000, 3))
    whole = static_value(tr)
    for k in range(tr.n_items):
        one = static_value_of([int(tr.item_type[k])], [tr.item_text[k]], [int(tr.item_tokens[k])],
                              [float(tr.item_cost[k])])  # fmt: skip
        assert one.tobytes() == whole[k : k + 1].tobytes(), k
