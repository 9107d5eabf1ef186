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
so the trace's distinct texts are joined with NUL separators and read whole: the keywords by a
compiled pass that finds where each keyword's literal occurs (the regular expression is then
tried there only), the character shapes by a compiled pass that classifies every byte by its
neighbours.  Results are cached on the ``Trace`` object (``trace.__dict__``), so every policy
and every budget of a ``compare`` run shares one computation.  Both passes are compiled on
first use, by numba, into the kernel cache (``memlens.kernels.warm`` compiles them before a run
fans out, in the stages of the policies that read these features).

``static_value`` combines the features with type and cost into the time-independent part of the
rule scorer's value; the retrieval and learned policies may reuse it as a prior.
"""

from __future__ import annotations

import functools
import itertools
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from memlens.trace.derived import check_lengths, kept_arrays
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


def text_features(texts: list[str], tokens: np.ndarray | None = None) -> ContentFeatures:
    """Features of arbitrary texts (items, requests, summaries); ``tokens`` default to words.

    The texts are joined with NULs and read in two compiled passes (:func:`keyword_counts`,
    :func:`shape_counts`); a text's counts depend on that text alone.
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
    error, conclusion = keyword_counts(raw.lower(), seps, n)
    numbers, identifiers, entities = shape_counts(raw, seps, n)
    return ContentFeatures(error=error, conclusion=conclusion, numbers=numbers,
                           identifiers=identifiers, entities=entities, tokens=tokens)  # fmt: skip


# ------------------------------------------------------------------------------- keywords
def _literal_prefix(word: str) -> bytes:
    """The literal every match of keyword pattern ``word`` starts with: its leading letters and
    spaces, less the last one when a quantifier follows it ("errors?" starts with "error").
    A pattern with a ``|`` outside parentheses has none ("error|fail")."""
    top = word
    while (inner := re.sub(r"\([^()]*\)", "", top)) != top:  # drop groups, innermost first
        top = inner
    head = re.match(r"[a-z ]*", word).group()
    if word[len(head) : len(head) + 1] in ("?", "*", "+", "{"):
        head = head[:-1]
    if len(head) < 2 or "|" in top:  # the scan finds literals by their first two bytes
        raise ValueError(f"keyword pattern {word!r} must start with two literal characters")
    return head.encode()


_KEYWORD_RES = ERROR_RES + CONCLUSION_RES


def _literal_index(words: tuple[str, ...]) -> tuple[np.ndarray, ...]:
    """What :func:`_literal_scan` reads of the patterns' literals: their bytes end to end, where
    each begins (one more entry than literals), and the literals by their first two bytes
    (CSR: those beginning with bytes ``x, y`` are ``ids[ptr[k]:ptr[k + 1]]``, ``k = x | y << 8``)."""
    literals = [_literal_prefix(w) for w in words]
    flat = np.frombuffer(b"".join(literals), np.uint8)
    begins = np.zeros(len(literals) + 1, np.int64)
    np.cumsum([len(lit) for lit in literals], out=begins[1:])
    keys = np.asarray([lit[0] | lit[1] << 8 for lit in literals], np.int64)
    ptr = np.zeros(65537, np.int64)
    np.cumsum(np.bincount(keys, minlength=65536), out=ptr[1:])
    return flat, begins, ptr, np.argsort(keys, kind="stable").astype(np.int64)


_LITERALS = _literal_index(ERROR_WORDS + CONCLUSION_WORDS)


def keyword_counts(lowered: bytes, seps: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray]:
    """Per text, the ``error`` and ``conclusion`` keyword matches that begin a word ("terror"
    is no error) in the lower-cased joined texts: what ``pattern.finditer`` finds, pattern by
    pattern, with each match's start counted for its text.

    A regular expression scans 1 to 2 GB/s, thirty-three of them 0.6 s on a 30 MB trace.  So
    one compiled pass (:func:`_literal_scan`) finds where each pattern's literal occurs, and the
    pattern is tried there only, left to right from the end of its last match: ``finditer``
    tries every position that way, and one where the literal does not start cannot match."""
    at, which = _literal_positions(lowered)
    order = np.argsort(which, kind="stable")  # by pattern, each in the order of the text
    bounds = np.searchsorted(which[order], np.arange(len(_KEYWORD_RES) + 1)).tolist()
    at = at[order]
    starts = [_word_starts(pattern, lowered, at[bounds[k] : bounds[k + 1]].tolist())
              for k, pattern in enumerate(_KEYWORD_RES)]  # fmt: skip
    split = len(ERROR_RES)
    return (_count_at(np.fromiter(itertools.chain(*starts[:split]), np.int64), seps, n),
            _count_at(np.fromiter(itertools.chain(*starts[split:]), np.int64), seps, n))  # fmt: skip


def _word_starts(pattern: re.Pattern, lowered: bytes, candidates: list[int]) -> list[int]:
    """The starts of ``pattern.finditer(lowered)``'s matches that begin a word, given every
    position where a match could start (in increasing order)."""
    out: list[int] = []
    end = 0
    for s in candidates:
        if s < end:  # inside the last match: finditer goes on from its end
            continue
        m = pattern.match(lowered, s)  # finditer's attempt at s: the string is not sliced
        if m is None:
            continue
        end = m.end()
        if s == 0 or not (lowered[s - 1 : s].isalnum() or lowered[s - 1] == 95):
            out.append(s)
    return out


_FOUND_ROOM = 1 << 16  # occurrences one call of the literal scan may report


def _literal_positions(lowered: bytes) -> tuple[np.ndarray, np.ndarray]:
    """Where the keywords' literals begin in ``lowered`` and which literal (int64 each), in the
    order of the positions: :func:`_literal_scan`, called again while it fills its room."""
    low = np.frombuffer(lowered, np.uint8)
    scan = _compiled(_literal_scan)
    parts = []
    begin = 0
    while begin < low.shape[0]:
        at, which = np.empty(_FOUND_ROOM, np.int64), np.empty(_FOUND_ROOM, np.int64)
        found, begin = scan(low, begin, at, which, *_LITERALS)
        parts.append((at[:found], which[:found]))
    if not parts:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    return np.concatenate([p[0] for p in parts]), np.concatenate([p[1] for p in parts])


def _literal_scan(low, begin, at, which, flat, begins, ptr, ids):  # pragma: no cover - compiled
    """The positions of ``low`` from ``begin`` on where a literal of :func:`_literal_index`
    begins (overlapping ones too), in order, into ``at``, with the literal's number into
    ``which``; returns how many, and the position to go on from (the end when done).  It stops
    while a position's every literal still fits: arrays that grew would cost twice the time."""
    size, room = low.shape[0], at.shape[0] - (begins.shape[0] - 1)
    found = 0
    for i in range(begin, size - 1):
        if found > room:
            return found, i
        key = np.int64(low[i]) | (np.int64(low[i + 1]) << 8)
        for j in range(ptr[key], ptr[key + 1]):
            k = ids[j]
            first, length = begins[k], begins[k + 1] - begins[k]
            if i + length > size:
                continue
            same = True
            for m in range(2, length):
                if low[i + m] != flat[first + m]:
                    same = False
                    break
            if same:
                at[found], which[found] = i, k
                found += 1
    return found, size


# --------------------------------------------------------------------------------- shapes
# The character shapes behind ``numbers``, ``identifiers`` and ``entities``, read at each byte
# from the classes of the two bytes before it and the two after (a byte outside the joined
# text, like the NUL between two texts, has no class):
#
#   numbers      a digit after a byte that is no word byte and no "."       42, #91361, 12%
#   identifiers  a letter then a digit                                       ord123, v2
#                a letter, "_" or "-", a digit                               INV-2024, ord_7
#                [a-z0-9], "_", [a-z0-9]                                     snake_case
#                [a-z], [A-Z], [a-z]                                         camelCase
#                a letter, ".", a letter                                     app.py
#                "/" then a word byte, after no word byte                    /usr/bin
#   entities     [A-Z][a-z] after a space after [a-z0-9,;:)]                 "... for Alice"
#                [A-Z][A-Z] after no letter                                  IBM
#
# A byte that starts a shape counts once per feature, for the text it is in.  Word bytes are
# [A-Za-z0-9_]; the bytes of non-ASCII characters are none of the classes.
_LOWER, _UPPER, _DIGIT, _UNDERSCORE, _HYPHEN, _DOT, _SLASH, _SPACE, _CLAUSE_END = (
    1 << k for k in range(9))  # fmt: skip
_ALPHA = _LOWER | _UPPER
_WORD = _ALPHA | _DIGIT | _UNDERSCORE
_STARTS = _ALPHA | _DIGIT | _SLASH  # the classes a shape can start with
_AFTER_LOWER = _DIGIT | _UNDERSCORE | _HYPHEN | _DOT | _UPPER  # [a-z] starts a shape only before


def _byte_classes() -> np.ndarray:
    """Each byte value's class bits (int32, 256 entries)."""
    table = np.zeros(256, np.int32)
    table[ord("a") : ord("z") + 1] = _LOWER
    table[ord("A") : ord("Z") + 1] = _UPPER
    table[ord("0") : ord("9") + 1] = _DIGIT
    for char, bit in (("_", _UNDERSCORE), ("-", _HYPHEN), (".", _DOT), ("/", _SLASH),
                      (" ", _SPACE), (",", _CLAUSE_END), (";", _CLAUSE_END),
                      (":", _CLAUSE_END), (")", _CLAUSE_END)):  # fmt: skip
        table[ord(char)] = bit
    return table


_BYTE_CLASSES = _byte_classes()


def shape_counts(raw: bytes, seps: np.ndarray, n: int) -> tuple[np.ndarray, ...]:
    """Per text, how many ``numbers``, ``identifiers`` and ``entities`` (int32 each) the ``n``
    texts joined in ``raw`` hold, their NUL separators at ``seps``.

    One compiled pass over the bytes (:func:`_shape_scan`): the shapes look at most two bytes
    either side, so a sliding window of five byte classes decides each byte, where numpy needed
    some forty full-size masks shifted against each other: 0.07 s instead of 0.85 s for the
    30 MB of a 5,800-stream trace's distinct texts."""
    seps = np.ascontiguousarray(seps, np.int64)
    if n < 1 or seps.shape[0] != n - 1:  # the kernel writes without bounds checks
        raise ValueError(f"{n} texts need {max(n - 1, 0)} separators, not {seps.shape[0]}")
    return _compiled(_shape_scan)(np.frombuffer(raw, np.uint8), seps, n, _BYTE_CLASSES)


@functools.cache
def _compiled(kernel):
    """``kernel`` compiled (``numba.njit(cache=True, nogil=True)``), on first use: the UI and
    the analysis modules import this module for its constants and would otherwise pay numba's
    import (0.3 s) for nothing.  So a kernel here calls no other compiled function."""
    import numba

    return numba.njit(cache=True, nogil=True)(kernel)


def _shape_scan(a, seps, n, classes):  # pragma: no cover - compiled (_compiled)
    """The shapes of the table above in the NUL-joined texts ``a``: per text, the bytes that
    start a number, an identifier, an entity.  Byte ``i`` is in text ``k`` when ``k`` of the
    separators lie before it (what ``np.searchsorted(seps, i)`` says); no shape starts at a
    separator."""
    numbers = np.zeros(n, np.int32)
    identifiers = np.zeros(n, np.int32)
    entities = np.zeros(n, np.int32)
    size, n_seps, text = a.shape[0], seps.shape[0], 0
    b2 = b1 = 0  # the classes of the bytes two and one before byte i
    c0 = classes[a[0]] if size > 0 else 0  # byte i's, then the next two
    c1 = classes[a[1]] if size > 1 else 0
    for i in range(size):
        c2 = classes[a[i + 2]] if i + 2 < size else 0
        # most bytes are [a-z] before [a-z] or a space: decided by the first test or two
        if (c0 & _STARTS) != 0 and (c0 != _LOWER or (c1 & _AFTER_LOWER) != 0):
            number = (c0 & _DIGIT) != 0 and (b1 & (_WORD | _DOT)) == 0
            letter_first = (c0 & _ALPHA) != 0 and (
                (c1 & _DIGIT) != 0
                or ((c1 & (_UNDERSCORE | _HYPHEN)) != 0 and (c2 & _DIGIT) != 0)
                or ((c1 & _DOT) != 0 and (c2 & _ALPHA) != 0))  # fmt: skip
            identifier = (
                letter_first
                or ((c0 & (_LOWER | _DIGIT)) != 0 and (c1 & _UNDERSCORE) != 0
                    and (c2 & (_LOWER | _DIGIT)) != 0)
                or ((c0 & _LOWER) != 0 and (c1 & _UPPER) != 0 and (c2 & _LOWER) != 0)
                or ((c0 & _SLASH) != 0 and (c1 & _WORD) != 0 and (b1 & _WORD) == 0))  # fmt: skip
            entity = (c0 & _UPPER) != 0 and (
                ((c1 & _LOWER) != 0 and (b1 & _SPACE) != 0
                 and (b2 & (_LOWER | _DIGIT | _CLAUSE_END)) != 0)
                or ((c1 & _UPPER) != 0 and (b1 & _ALPHA) == 0))  # fmt: skip
            if number or identifier or entity:
                while text < n_seps and seps[text] < i:
                    text += 1
                numbers[text] += number
                identifiers[text] += identifier
                entities[text] += entity
        b2, b1, c0, c1 = b1, c0, c1, c2
    return numbers, identifiers, entities


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


def distinct_encoded(trace: Trace, column: str) -> tuple[list[str] | list[bytes], np.ndarray]:
    """:func:`distinct_texts`, but a packed column's texts as their UTF-8 ``bytes``, not
    decoded: for passes that read bytes anyway (``memlens.trace.words.text_tokens``)."""
    texts = getattr(trace, column)
    if isinstance(texts, PackedStrings) and len(texts):
        return _distinct_bytes(trace, column)
    return distinct_texts(trace, column)


def _distinct_bytes(trace: Trace, column: str) -> tuple[list[bytes], np.ndarray]:
    """The distinct UTF-8 strings of a packed text column, first seen first, and each text's
    number among them, cached on the trace: ``distinct_texts`` decodes them and the content
    features join them as they are, so a worker deduplicates a column once for both.  Equal
    bytes are equal texts (UTF-8), so this is ``unique_texts`` of the decoded column."""
    cache = trace.__dict__.setdefault(_DISTINCT_KEY, {})
    key = ("bytes", column)
    if key not in cache:
        texts = getattr(trace, column)
        number, first = distinct_packed(texts)
        view, bounds = memoryview(texts.data), texts.offsets
        starts, ends = bounds[first].tolist(), bounds[first + 1].tolist()
        cache[key] = ([view[a:b].tobytes() for a, b in zip(starts, ends)], number)
    return cache[key]


def distinct_packed(texts: PackedStrings) -> tuple[np.ndarray, np.ndarray]:
    """Each string's number among the distinct ones (first seen first) and where each
    distinct one is first seen: what a dictionary from bytes to first position gives, in one
    compiled pass over the buffer (a hash table whose probes compare the bytes themselves,
    so equal numbers mean equal strings), not a Python object per string (0.7 s per column
    of 700,000 texts, computed by several policies' preparations of a compare)."""
    n = len(texts)
    size = 1 << max(4, (2 * n).bit_length())  # at most half full
    return _compiled(_distinct_scan)(texts.data, texts.offsets, n, size)


def _distinct_scan(data, offsets, n, size):  # pragma: no cover - compiled (_compiled)
    """Open addressing with linear probing over FNV-1a-style hashes of the strings' bytes
    (eight at a time)."""
    table = np.full(size, -1, np.int64)  # the number of the distinct string in each slot
    number = np.empty(n, np.int64)
    first = np.empty(n, np.int64)
    found = 0
    for i in range(n):
        a, b = offsets[i], offsets[i + 1]
        h = np.uint64(14695981039346656037)
        k = a
        while k + 8 <= b:  # eight bytes a step (the multiplications are the pass's chain)
            w = np.uint64(0)
            for q in range(8):
                w |= np.uint64(data[k + q]) << np.uint64(8 * q)
            h = (h ^ w) * np.uint64(1099511628211)
            k += 8
        while k < b:
            h = (h ^ np.uint64(data[k])) * np.uint64(1099511628211)
            k += 1
        h ^= h >> np.uint64(29)  # the low bits pick the slot: mix the high ones in
        slot = np.int64(h & np.uint64(size - 1))
        while True:
            d = table[slot]
            if d < 0:  # a new string
                table[slot] = found
                first[found] = i
                number[i] = found
                found += 1
                break
            j = first[d]
            c, e = offsets[j], offsets[j + 1]
            same = e - c == b - a
            k = 0
            while same and k < b - a:
                same = data[c + k] == data[a + k]
                k += 1
            if same:
                number[i] = d
                break
            slot = (slot + 1) & (size - 1)
    return number, first[:found].copy()


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

        def build() -> dict[str, np.ndarray]:
            once, inverse = _distinct_features(trace)
            return {k: getattr(once, k)[inverse] for k in COUNT_FIELDS}

        def check(arrays: dict[str, np.ndarray]) -> None:
            check_lengths(arrays, dict.fromkeys(COUNT_FIELDS, trace.n_items), np.int32)

        counts = kept_arrays(trace, "content-features", build, check)  # memlens.trace.derived
        cached = ContentFeatures(*[counts[k] for k in COUNT_FIELDS],
                                 tokens=np.asarray(trace.item_tokens, np.int64))  # fmt: skip
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


# The shapes of ``shape_counts`` (the table above it) as regular expressions over one text's
# bytes (a position outside the text reads as the NUL that separates texts there: no class).
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
