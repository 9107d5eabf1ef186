"""The content features' compiled passes (``memlens.trace.features``: ``keyword_counts``,
``shape_counts``, ``distinct_packed``) against the implementation they replaced, kept here as
the reference: the keywords by ``finditer`` pattern by pattern, the shapes by numpy masks over
the padded byte array shifted against each other, the distinct texts by a dictionary.  Same
results, bit for bit, on arbitrary texts; and the passes are compiled by the warm-up stages of
the policies that read them."""

from __future__ import annotations

import json
import os

import numpy as np
import pytest
from helpers import fresh_python
from hypothesis import given, settings
from hypothesis import strategies as st

from memlens.trace import features
from memlens.trace.features import (
    CONCLUSION_RES,
    CONCLUSION_WORDS,
    COUNT_FIELDS,
    ERROR_RES,
    ERROR_WORDS,
    text_features,
)


# ---------------------------------------------------------------------------- the reference
def reference_join(texts: list[str] | list[bytes]) -> tuple[bytes, np.ndarray]:
    """The texts joined with NULs, a NUL inside a text made a space; the separators' offsets."""
    if texts and isinstance(texts[0], bytes):
        raw = b"\x00".join(t.replace(b"\x00", b" ") for t in texts)
    else:
        raw = "\x00".join(t.replace("\x00", " ") for t in texts).encode("utf-8", "replace")
    return raw, np.flatnonzero(np.frombuffer(raw, np.uint8) == 0)


def reference_counts(raw: bytes, seps: np.ndarray, n: int) -> dict[str, np.ndarray]:
    """The five counts as the numpy implementation computed them."""

    def count_at(positions) -> np.ndarray:
        positions = np.asarray(positions, np.int64)
        return np.bincount(np.searchsorted(seps, positions), minlength=n).astype(np.int32)

    lowered = raw.lower()
    return {"error": count_at(reference_keywords(ERROR_RES, lowered)),
            "conclusion": count_at(reference_keywords(CONCLUSION_RES, lowered)),
            **{k: count_at(np.flatnonzero(m)) for k, m in reference_masks(raw).items()}}  # fmt: skip


def reference_keywords(patterns, lowered: bytes) -> list[int]:
    out = []
    for pattern in patterns:
        for m in pattern.finditer(lowered):
            s = m.start()
            if s == 0 or not (lowered[s - 1 : s].isalnum() or lowered[s - 1] == 95):
                out.append(s)
    return out


def reference_masks(raw: bytes) -> dict[str, np.ndarray]:
    """Per byte of ``raw``, whether a number, an identifier, an entity starts there."""
    a = np.zeros(len(raw) + 4, dtype=np.uint8)  # two NULs each side: shifted views line up
    a[2:-2] = np.frombuffer(raw, dtype=np.uint8)
    lower = (a >= 97) & (a <= 122)
    upper = (a >= 65) & (a <= 90)
    digit = (a >= 48) & (a <= 57)
    alpha = lower | upper
    word = alpha | digit | (a == 95)

    def at(mask, shift):  # mask[i + shift] for i in the text
        return mask[2 + shift : len(mask) - 2 + shift]

    def byte(c):
        return a == ord(c)

    sep_like = byte("_") | byte("-")
    numbers = at(digit, 0) & ~at(word | byte("."), -1)
    identifiers = (
        (at(alpha, 0) & at(digit, 1))
        | (at(alpha, 0) & at(sep_like, 1) & at(digit, 2))
        | (at(lower | digit, 0) & at(byte("_"), 1) & at(lower | digit, 2))
        | (at(lower, 0) & at(upper, 1) & at(lower, 2))
        | (at(alpha, 0) & at(byte("."), 1) & at(alpha, 2))
        | (at(byte("/"), 0) & at(word, 1) & ~at(word, -1))
    )
    mid_sentence = at(lower | digit | byte(",") | byte(";") | byte(":") | byte(")"), -2)
    entities = (at(upper, 0) & at(lower, 1) & at(byte(" "), -1) & mid_sentence) | (
        at(upper, 0) & at(upper, 1) & ~at(alpha, -1)
    )
    return {"numbers": numbers, "identifiers": identifiers, "entities": entities}


def assert_same(got, want: dict[str, np.ndarray]) -> None:
    for k in COUNT_FIELDS:
        g = getattr(got, k)
        assert g.dtype == np.int32 and g.tobytes() == want[k].tobytes(), (k, g, want[k])


# ----------------------------------------------------------------------------- the texts
KEYWORDS = [w.encode() for w in ("error", "Errors", "ERROR", "failed", "failures", "fail",
            "timed out", "Timed Out", "timeout", "not found", "bug", "debug", "unauthorised",
            "unauthorizedly", "final", "Finally", "conclu", "conclusions", "concluded", "answer",
            "answers", "thus", "in short", "confirmed", "denied", "deniedenied",
            "timed outimed out", "errorerror", "exceptions")]  # fmt: skip
PIECES = KEYWORDS + [bytes([c]) for c in b"aAzZ09_-./ ,;:)(#%\n\x00\xff"] + [
    "é".encode(), "—".encode(), "Ü".encode(), b"IBM", b"Alice", b"v2", b"INV-2024", b"getUser",
    b"app.py", b"/usr/bin", b"x_1", b"3.5", b"#91361",
]  # fmt: skip
composed = st.lists(st.sampled_from(PIECES), max_size=12).map(b"".join)
byte_texts = st.one_of(composed, st.binary(max_size=16), st.sampled_from([b"", b"a", b"1", b"A"]))
str_texts = st.one_of(composed.map(lambda b: b.decode("utf-8", "replace")), st.text(max_size=16))


@settings(max_examples=300)
@given(st.lists(byte_texts, min_size=1, max_size=8))
def test_the_joined_bytes_count_as_the_numpy_reference(texts):
    """At the level where the joined bytes and separators are given (what ``content_features``
    does with a trace's packed texts); a NUL inside a text is a space, as the join makes it."""
    raw, seps = reference_join(texts)
    n = len(texts)
    got = features._joined_features(raw, seps, n, np.zeros(n, np.int64))
    assert_same(got, reference_counts(raw, seps, n))


@settings(max_examples=300)
@given(st.lists(str_texts, min_size=1, max_size=8))
def test_text_features_count_as_the_numpy_reference(texts):
    """Arbitrary ``str`` texts: non-ASCII, NULs, empty texts, one-character texts."""
    raw, seps = reference_join(texts)
    assert_same(text_features(texts), reference_counts(raw, seps, len(texts)))


EDGES = [
    [""],
    ["", "", ""],
    ["1"],
    ["A", "B"],  # one byte each: a shape would need the separator as its neighbour
    ["ord", "123", "x"],  # ord|123: no identifier across the separator, a number after it
    ["a", "_1"],
    ["x ", "Ab"],  # the space before "Ab" is in the other text: no entity
    ["err", "or", "error"],  # no keyword across a separator; one at the very end
    ["error", ""],  # at the very start
    ["über 12", "Größe", "Ünïcode AB—CD"],  # non-ASCII bytes have no class
    ["IBM" * 50, "v2 " * 40 + "Final"],
]


@pytest.mark.parametrize("texts", EDGES)
def test_edge_cases_count_as_the_numpy_reference(texts):
    raw, seps = reference_join(texts)
    assert_same(text_features(texts), reference_counts(raw, seps, len(texts)))


def test_hand_counted_across_separators():
    f = text_features(["v2", "2", "", "IBM", "see Alice", "x", "/usr", "ord", "123 error"])
    assert f.numbers.tolist() == [0, 1, 0, 0, 0, 0, 0, 0, 1]  # "v2" is no number
    assert f.identifiers.tolist() == [1, 0, 0, 0, 0, 0, 1, 0, 0]  # v2; /usr; not ord|123
    assert f.entities.tolist() == [0, 0, 0, 1, 1, 0, 0, 0, 0]  # IBM (once); Alice
    assert f.error.tolist() == [0, 0, 0, 0, 0, 0, 0, 0, 1]
    assert f.conclusion.tolist() == [0] * 9


# ------------------------------------------------------------------- the keywords' literals
def _parsed_prefix(word: str) -> bytes:
    """The leading literal characters of ``word`` as Python's own regex parser reads them."""
    from re import _parser

    out = []
    for op, arg in _parser.parse(word):
        if op is not _parser.LITERAL:
            break
        out.append(arg)
    return bytes(out)


def test_each_keyword_starts_with_the_literal_the_scan_looks_for():
    """Every match of a keyword pattern starts with its literal: the scan may then try the
    pattern only where the literal occurs."""
    for word in ERROR_WORDS + CONCLUSION_WORDS:
        assert features._literal_prefix(word) == _parsed_prefix(word), word
    assert features._literal_prefix("errors?") == b"error"
    for word in ("error|fail", "x", "(?:a|b)c", "ab{2}", r"\d+"):
        with pytest.raises(ValueError, match="two literal characters"):
            features._literal_prefix(word)


def test_a_scan_that_fills_its_room_goes_on_where_it_stopped(monkeypatch):
    """Room for a few occurrences per call: the scan is called again and again, and the counts
    (and every occurrence, in order) are those of one call."""
    texts = ["error final " * 30, "bug thus answers " * 20, "", "Timed out, not found. " * 9]
    raw, seps = reference_join(texts)
    lowered = raw.lower()
    at, which = features._literal_positions(lowered)
    monkeypatch.setattr(features, "_FOUND_ROOM", len(ERROR_WORDS + CONCLUSION_WORDS) + 5)
    small_at, small_which = features._literal_positions(lowered)
    assert np.array_equal(at, small_at) and np.array_equal(which, small_which)
    assert len(at) > 100
    assert_same(text_features(texts), reference_counts(raw, seps, len(texts)))


def test_the_shapes_refuse_separators_that_do_not_fit_the_texts():
    raw, seps = reference_join(["a1", "b2"])
    with pytest.raises(ValueError, match="2 texts need 1 separators, not 0"):
        features.shape_counts(raw, seps[:0], 2)


# ----------------------------------------------------------------------------- compiled once
def test_the_stages_of_the_policies_that_read_the_features_compile_them(monkeypatch):
    """A kernel stage whose warm-up computes content features compiles their passes there,
    before a run fans out, and follows ``trace/features.py`` (a change there warms it again
    instead of leaving it to the workers); the stages of the other policies do neither."""
    from memlens.cli.replay import composed_policy
    from memlens.config.schema import build_policy
    from memlens.config.store import registered_policies
    from memlens.kernels.warm import kernel_stage

    compiled = features._compiled
    asked: list[str] = []

    def recording(kernel):
        asked.append(kernel.__name__)
        return compiled(kernel)

    monkeypatch.setattr(features, "_compiled", recording)
    readers = []
    for name in registered_policies():
        stage = kernel_stage(build_policy(composed_policy(name, [])), False, 0)
        if stage is None:
            continue
        asked.clear()
        stage.run()
        reads = {"_shape_scan", "_literal_scan", "_distinct_scan"} <= set(asked)
        assert reads == ("trace/features.py" in stage.sources), name
        readers += [name] * reads
    assert {"rule", "generative_agents", "learned"} <= set(readers)


@pytest.mark.skipif(os.environ.get("MEMLENS_TEST_WARM", "1") == "0", reason="no session warm-up")
def test_a_new_process_loads_the_passes_and_compiles_nothing():
    """The session warm-up (tests/conftest.py) ran the rule scorer's stage: a new process, as a
    sweep worker, loads both passes from the kernel cache."""
    code = (
        "import json\n"
        "from memlens.kernels.warm import tiny_trace\n"
        "from memlens.trace import features as f\n"
        "f.content_features(tiny_trace())\n"
        "s = [f._compiled(k).stats for k in (f._shape_scan, f._literal_scan, f._distinct_scan)]\n"
        "print(json.dumps({'misses': sum(sum(x.cache_misses.values()) for x in s),"
        " 'hits': [sum(x.cache_hits.values()) for x in s]}))\n"
    )
    got = json.loads(fresh_python(code).strip().splitlines()[-1])
    assert got["misses"] == 0 and min(got["hits"]) >= 1


# ----------------------------------------------------------------------------- distinct texts
def reference_distinct(texts: list[str]) -> tuple[list[bytes], np.ndarray]:
    """Each text's number among the distinct ones, first seen first, by a dictionary."""
    first: dict[bytes, int] = {}
    number = [first.setdefault(t.encode(), len(first)) for t in texts]
    return list(first), np.asarray(number, np.int64)


@settings(max_examples=300)
@given(st.lists(st.sampled_from(["", "a", "ab", "ba", "é", "a" * 9, "a" * 8 + "b", "x\x00y"])
                | str_texts, max_size=60))  # fmt: skip
def test_distinct_texts_number_as_a_dictionary_does(texts):
    """Duplicates, empty strings, non-ASCII, strings one byte apart past the first eight: the
    compiled hash table numbers them as a dictionary from bytes does (with up to 60 strings in
    a table of 128 slots, probes collide and walk on)."""
    from memlens.trace.packed import PackedStrings

    packed = PackedStrings.from_strings(texts)
    number, first = features.distinct_packed(packed)
    distinct, want = reference_distinct(texts)
    assert np.array_equal(number, want)
    assert [texts[i].encode() for i in first.tolist()] == distinct


def test_distinct_texts_of_a_trace_column_by_hand():
    from memlens.trace.packed import PackedStrings

    number, first = features.distinct_packed(PackedStrings.from_strings(["b", "a", "b", "", "a"]))
    assert number.tolist() == [0, 1, 0, 2, 1] and first.tolist() == [0, 1, 3]
