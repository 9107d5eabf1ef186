"""Content features of items: the cheap, offline signals a value-aware policy reads from text.

A person skimming an agent's memory keeps the error message, the final answer, the line with
the order number and the name of the customer, and drops "let me think".  This module turns
that intuition into a handful of per-item counts, computed once per trace as numpy arrays:

* ``error``        error/failure words (error, failed, exception, timeout, denied, ...),
* ``conclusion``   conclusion words (final, conclusion, answer, therefore, decided, ...),
* ``numbers``      numbers (``42``, ``3.5``, ``#91361``, ``12%``),
* ``identifiers``  code-like identifiers (``order_id``, ``INV-2024``, ``getUser``, ``app.py``),
* ``entities``     named entities, approximated as capitalised words not opening a sentence and
                   acronyms (no NER model: the harness must stay offline and fast),
* ``tokens``       the item's length in tokens.

Replaying a million events cannot afford five regular expressions per item in a Python loop,
so each pattern runs once over the whole trace's text joined with NUL separators and the match
positions are mapped back to items with ``np.searchsorted``.  Results are cached on the
``Trace`` object (``trace.__dict__``), so every policy and every budget of a ``compare`` run
shares one computation.

``static_value`` combines the features with type and cost into the time-independent part of the
rule scorer's value; the retrieval and learned policies may reuse it as a prior.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from memlens.trace.model import ITEM_TYPES
from memlens.trace.packed import PackedStrings

if TYPE_CHECKING:
    from memlens.trace.model import Trace

# Keywords, matched on the lower-cased text.  One pattern per stem, each starting with a
# literal: the regex engine then jumps between occurrences of the literal at memchr speed,
# where a single big alternation would be tried at every byte of the trace (four times slower).
ERROR_WORDS = (
    r"errors?", r"fail(?:s|ed|ure|ures|ing)?", r"exceptions?", r"traceback", r"timeouts?",
    r"timed out", r"crash(?:ed|es)?", r"denied", r"refused", r"invalid", r"fatal", r"panic",
    r"cannot", r"unable", r"not found", r"bugs?", r"broken", r"rejected",
    r"unauthori[sz]ed", r"forbidden",
)  # fmt: skip
CONCLUSION_WORDS = (
    r"final(?:ly)?", r"conclu(?:sion|sions|de|ded)", r"answers?", r"therefore", r"thus",
    r"hence", r"decided", r"decision", r"resolved", r"solution", r"summary", r"in short",
    r"confirmed",
)  # fmt: skip
ERROR_RES = tuple(re.compile(rf"{w}\b".encode()) for w in ERROR_WORDS)
CONCLUSION_RES = tuple(re.compile(rf"{w}\b".encode()) for w in CONCLUSION_WORDS)

FEATURE_NAMES = ("error", "conclusion", "numbers", "identifiers", "entities", "tokens")
_CACHE_KEY = "_memlens_content_features"
#: where ``content_features`` caches on a trace (a sweep keeps it between policies: the rule
#: scorer, Generative Agents' importance and the learned scorer all read it)
CONTENT_FEATURES_KEY = _CACHE_KEY


@dataclass(frozen=True)
class ContentFeatures:
    """Per-text feature counts (int32), aligned with the texts they were computed from."""

    error: np.ndarray
    conclusion: np.ndarray
    numbers: np.ndarray
    identifiers: np.ndarray
    entities: np.ndarray
    tokens: np.ndarray  # int64

    def __len__(self) -> int:
        return int(self.tokens.shape[0])


COUNT_FIELDS = ("error", "conclusion", "numbers", "identifiers", "entities")


def _joined_bytes(texts: Sequence[str] | list[bytes]) -> tuple[bytes, np.ndarray]:
    """All texts (``str``, or already UTF-8 ``bytes``) as one NUL-separated byte string, and
    the positions of the separators; a NUL inside a text counts as a space."""
    as_bytes = len(texts) > 0 and isinstance(texts[0], bytes)
    nul, space = (b"\x00", b" ") if as_bytes else ("\x00", " ")
    joined = nul.join(texts)
    if joined.count(nul) != len(texts) - 1:  # a text contains NUL itself
        joined = nul.join(t.replace(nul, space) for t in texts)
    raw = joined if as_bytes else joined.encode("utf-8", "replace")
    seps = np.flatnonzero(np.frombuffer(raw, dtype=np.uint8) == 0)
    return raw, seps


def _count_at(positions: np.ndarray, seps: np.ndarray, n: int) -> np.ndarray:
    """How many of ``positions`` (byte offsets in the joined text) fall in each text."""
    return np.bincount(np.searchsorted(seps, positions), minlength=n).astype(np.int32)


def _keyword_positions(patterns: tuple[re.Pattern, ...], lowered: bytes) -> np.ndarray:
    """Start offsets of keyword matches that begin a word ("terror" is not an error)."""
    out: list[int] = []
    for pattern in patterns:
        for m in pattern.finditer(lowered):
            s = m.start()
            if s == 0 or not (lowered[s - 1 : s].isalnum() or lowered[s - 1] == 95):
                out.append(s)
    return np.asarray(out, dtype=np.int64)


def text_features(texts: list[str], tokens: np.ndarray | None = None) -> ContentFeatures:
    """Features of arbitrary texts (items, requests, summaries); ``tokens`` default to words.

    Keywords go through one regular expression over the lower-cased bytes.  The character-shape
    signals (numbers, identifiers, entities) are boolean masks over the byte array, shifted
    against each other, which numpy evaluates at memory speed: a regex starting with a letter
    class would try a match at every letter of the trace.
    """
    n = len(texts)
    if tokens is None:
        tokens = np.fromiter((len(t.split()) for t in texts), dtype=np.int64, count=n)
    tokens = np.asarray(tokens, dtype=np.int64)
    if n == 0:
        empty = np.zeros(0, dtype=np.int32)
        return ContentFeatures(empty, empty, empty, empty, empty, tokens)
    raw, seps = _joined_bytes(texts)
    return _joined_features(raw, seps, n, tokens)


def _joined_features(raw: bytes, seps: np.ndarray, n: int, tokens: np.ndarray) -> ContentFeatures:
    """``text_features`` of ``n`` texts already joined with NUL separators (at ``seps``)."""
    lowered = raw.lower()
    error = _count_at(_keyword_positions(ERROR_RES, lowered), seps, n)
    conclusion = _count_at(_keyword_positions(CONCLUSION_RES, lowered), seps, n)
    # byte array padded with two NULs each side so that shifted views line up
    a = np.zeros(len(raw) + 4, dtype=np.uint8)
    a[2:-2] = np.frombuffer(raw, dtype=np.uint8)
    lower = (a >= 97) & (a <= 122)
    upper = (a >= 65) & (a <= 90)
    digit = (a >= 48) & (a <= 57)
    alpha = lower | upper
    word = alpha | digit | (a == 95)

    def at(mask: np.ndarray, shift: int) -> np.ndarray:  # mask[i + shift] for i in text
        return mask[2 + shift : len(mask) - 2 + shift]

    def byte(c: str) -> np.ndarray:
        return a == ord(c)

    sep_like = byte("_") | byte("-")
    numbers = at(digit, 0) & ~at(word | byte("."), -1)
    identifiers = (
        (at(alpha, 0) & at(digit, 1))  # ord123, INV2024
        | (at(alpha, 0) & at(sep_like, 1) & at(digit, 2))  # INV-2024, ord_7
        | (at(lower | digit, 0) & at(byte("_"), 1) & at(lower | digit, 2))  # snake_case
        | (at(lower, 0) & at(upper, 1) & at(lower, 2))  # camelCase
        | (at(alpha, 0) & at(byte("."), 1) & at(alpha, 2))  # dotted.name, app.py
        | (at(byte("/"), 0) & at(word, 1) & ~at(word, -1))  # /a/path
    )
    mid_sentence = at(lower | digit | byte(",") | byte(";") | byte(":") | byte(")"), -2)
    entities = (at(upper, 0) & at(lower, 1) & at(byte(" "), -1) & mid_sentence) | (
        at(upper, 0) & at(upper, 1) & ~at(alpha, -1)
    )
    return ContentFeatures(
        error=error,
        conclusion=conclusion,
        numbers=_count_at(np.flatnonzero(numbers), seps, n),
        identifiers=_count_at(np.flatnonzero(identifiers), seps, n),
        entities=_count_at(np.flatnonzero(entities), seps, n),
        tokens=tokens,
    )


def unique_texts(texts: Sequence[str]) -> tuple[list[str], np.ndarray]:
    """The distinct texts, in first-seen order, and each text's index among them.

    Agent logs repeat themselves (the same tool output, a re-sent instruction, a templated
    reply): a generated 1M-event agent trace has 284k distinct texts among its 824k items, so
    per-text work (features, bags of words) is done once per distinct text and spread back."""
    index: dict[str, int] = {}
    inverse = np.fromiter((index.setdefault(t, len(index)) for t in texts), np.int64,
                          count=len(texts))  # fmt: skip
    return list(index), inverse


_DISTINCT_KEY = "_memlens_distinct_texts"


def distinct_texts(trace: Trace, column: str) -> tuple[list[str], np.ndarray]:
    """``unique_texts`` of the trace's ``item_text`` or ``req_text``, cached on the trace
    (content features, bags of words and TF-IDF vectors all start from it)."""
    cache = trace.__dict__.setdefault(_DISTINCT_KEY, {})
    if column not in cache:
        texts = getattr(trace, column)
        if isinstance(texts, PackedStrings) and len(texts):  # only the distinct ones decoded
            distinct, inverse = _distinct_bytes(trace, column)
            cache[column] = ([b.decode() for b in distinct], inverse)
        else:
            cache[column] = unique_texts(texts)
    return cache[column]


def _distinct_bytes(trace: Trace, column: str) -> tuple[list[bytes], np.ndarray]:
    """The distinct UTF-8 strings of a packed text column, first seen first, and each text's
    number among them, cached on the trace: ``distinct_texts`` decodes them and the content
    features join them as they are, so a worker deduplicates a column once for both.  Equal
    bytes are equal texts (UTF-8), so this is ``unique_texts`` of the decoded column."""
    cache = trace.__dict__.setdefault(_DISTINCT_KEY, {})
    key = ("bytes", column)
    if key not in cache:
        texts = getattr(trace, column)
        first: dict[bytes, int] = {}  # each text's first position (setdefault keeps the first)
        at = np.fromiter(map(first.setdefault, texts.iter_bytes(), itertools.count()), np.int64,
                         count=len(texts))  # fmt: skip
        number = np.empty(len(texts), np.int64)
        number[np.fromiter(first.values(), np.int64, len(first))] = np.arange(len(first))
        cache[key] = (list(first), number[at])
    return cache[key]


def _distinct_features(trace: Trace) -> tuple[ContentFeatures, np.ndarray]:
    """``text_features`` of the distinct item texts and each item's row among them.

    A packed text column (every loaded trace) is deduplicated on its UTF-8 bytes, which are
    then joined as they are: the texts are never decoded to ``str`` and encoded back (a
    million-event record spends a second on that).  The bytes are those ``_joined_bytes``
    would make of the decoded texts, so the counts are the same."""
    texts = trace.item_text
    if not isinstance(texts, PackedStrings) or len(texts) == 0:
        distinct, inverse = distinct_texts(trace, "item_text")
        return text_features(distinct, np.zeros(len(distinct), np.int64)), inverse
    distinct, inverse = _distinct_bytes(trace, "item_text")
    raw, seps = _joined_bytes(distinct)
    n = len(distinct)
    return _joined_features(raw, seps, n, np.zeros(n, np.int64)), inverse


def content_features(trace: Trace) -> ContentFeatures:
    """The features of every item of ``trace``, computed once per distinct text and cached on
    the trace (a text's counts depend on that text alone: ``text_features`` is per text)."""
    cached = trace.__dict__.get(_CACHE_KEY)
    if cached is None:
        once, inverse = _distinct_features(trace)
        counts = [getattr(once, k)[inverse] for k in COUNT_FIELDS]
        cached = ContentFeatures(*counts, tokens=np.asarray(trace.item_tokens, np.int64))
        trace.__dict__[_CACHE_KEY] = cached
    return cached


def content_boost(
    features: ContentFeatures,
    error: float = 0.2,
    conclusion: float = 0.15,
    numbers: float = 0.05,
    identifiers: float = 0.05,
    entities: float = 0.05,
    length: float = 0.05,
    length_ref_tokens: int = 1000,
) -> np.ndarray:
    """The content part of an item's value.

    Each signal counts once however often it occurs (an error message that says "error" three
    times is no more an error); length adds up to ``length`` on a log scale, reaching it at
    ``length_ref_tokens``.
    """
    boost = (
        error * (features.error > 0)
        + conclusion * (features.conclusion > 0)
        + numbers * (features.numbers > 0)
        + identifiers * (features.identifiers > 0)
        + entities * (features.entities > 0)
    ).astype(np.float64)
    if length:
        ref = np.log1p(max(1, int(length_ref_tokens)))
        boost += length * np.minimum(1.0, np.log1p(features.tokens) / ref)
    return boost


_STATIC_KEY = "_memlens_static_values"  # trace.__dict__: static_value per parameter set
_STATIC_KEEP = 4  # parameter sets kept per trace
DEFAULT_TYPE_BASE = {"user_input": 0.7, "tool_result": 0.6, "agent_state": 0.5, "llm_thought": 0.4}


def type_array(per_type: dict[str, float], what: str = "type value") -> np.ndarray:
    """A per-type mapping as an array indexed by type code; every type must be given."""
    missing = [t for t in ITEM_TYPES if t not in per_type]
    extra = [t for t in per_type if t not in ITEM_TYPES]
    if missing or extra:
        raise ValueError(
            f"{what}: need exactly the types {list(ITEM_TYPES)}; missing {missing}, unknown {extra}"
        )
    return np.asarray([float(per_type[t]) for t in ITEM_TYPES], dtype=np.float64)


def static_value(
    trace: Trace,
    type_base: dict[str, float] | None = None,
    boosts: dict[str, float] | None = None,
    cost_threshold: float = 0.01,
    cost_boost: float = 0.15,
) -> np.ndarray:
    """Time-independent value of every item: type base + content boosts + expensive-to-make.

    ``boosts`` are keyword arguments of :func:`content_boost`.  An item whose ``cost`` exceeds
    ``cost_threshold`` (e.g. a paid API call, a long tool run) gets ``cost_boost``: losing it
    means paying again.  The result is cached on the trace per parameter set, read-only.
    """
    per_type = type_array(type_base or DEFAULT_TYPE_BASE, "type_base")
    key = (per_type.tobytes(), tuple(sorted((boosts or {}).items())), float(cost_threshold),
           float(cost_boost))  # fmt: skip
    cache = trace.__dict__.setdefault(_STATIC_KEY, {})
    if key not in cache:  # every policy x budget job of a sweep asks again: computed once
        value = _static(per_type, trace.item_type, content_features(trace), trace.item_cost,
                        boosts, cost_threshold, cost_boost)  # fmt: skip
        value.flags.writeable = False  # shared by every caller
        if len(cache) >= _STATIC_KEEP:  # a tuner tries many parameter sets: keep the latest
            cache.pop(next(iter(cache)))
        cache[key] = value
    return cache[key]


def _static(per_type, types, features, costs, boosts, cost_threshold, cost_boost) -> np.ndarray:
    """The formula of :func:`static_value`, shared with :func:`static_value_of`."""
    value = per_type[np.asarray(types, np.int64)] + content_boost(features, **(boosts or {}))
    value += cost_boost * (np.asarray(costs, np.float64) > cost_threshold)
    return value


def static_value_of(
    types: Sequence[int],
    texts: list[str],
    tokens: Sequence[int],
    costs: Sequence[float],
    type_base: dict[str, float] | None = None,
    boosts: dict[str, float] | None = None,
    cost_threshold: float = 0.01,
    cost_boost: float = 0.15,
) -> np.ndarray:
    """:func:`static_value` of items given as columns rather than a trace: the live manager's
    new items (``memlens.live``).  A text's features depend on that text alone, so the values
    are those the items get in the trace their record loads as, bit for bit."""
    per_type = type_array(type_base or DEFAULT_TYPE_BASE, "type_base")
    if len(texts) == 1:  # the live manager's case: one write, no numpy per byte class
        counts = [np.asarray([c], np.int32) for c in text_presence(texts[0])]
    else:
        once = text_features(texts, np.zeros(len(texts), np.int64))
        counts = [getattr(once, k) for k in COUNT_FIELDS]
    features = ContentFeatures(*counts, tokens=np.asarray(tokens, np.int64))
    return _static(per_type, types, features, costs, boosts, cost_threshold, cost_boost)


# The byte-class masks of ``text_features`` as regular expressions over one text's bytes (a
# position outside the text reads as the NUL that pads or separates texts there: no class).
_NUMBER = re.compile(rb"(?<![A-Za-z0-9_.])[0-9]")
_IDENTIFIER = re.compile(rb"[A-Za-z][0-9]|[A-Za-z][_-][0-9]|[a-z0-9]_[a-z0-9]|[a-z][A-Z][a-z]"
                         rb"|[A-Za-z]\.[A-Za-z]|(?<![A-Za-z0-9_])/[A-Za-z0-9_]")  # fmt: skip
_ENTITY = re.compile(rb"(?<=[a-z0-9,;:)] )[A-Z][a-z]|(?<![A-Za-z])[A-Z][A-Z]")


def text_presence(text: str) -> tuple[int, int, int, int, int]:
    """Whether each of ``COUNT_FIELDS`` occurs in ``text`` (1/0): ``text_features([text])``'s
    counts > 0, which is all ``content_boost`` reads, without its fixed numpy cost (hundreds of
    microseconds for one short text).  ``tests/trace/test_features_content.py`` checks the two
    agree."""
    if "\x00" in text:
        text = text.replace("\x00", " ")
    raw = text.encode("utf-8", "replace")
    lowered = raw.lower()

    def keyword(patterns) -> int:
        for pattern in patterns:
            for m in pattern.finditer(lowered):
                s = m.start()
                if s == 0 or not (lowered[s - 1 : s].isalnum() or lowered[s - 1] == 95):
                    return 1
        return 0

    return (keyword(ERROR_RES), keyword(CONCLUSION_RES), int(bool(_NUMBER.search(raw))),
            int(bool(_IDENTIFIER.search(raw))), int(bool(_ENTITY.search(raw))))  # fmt: skip
