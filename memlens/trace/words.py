"""Words of texts as scikit-learn's vectorisers find them, without their per-word Python loops.

Generative Agents' TF-IDF vectors (``CountVectorizer``) and the learned scorer's hashed bags of
words (``HashingVectorizer``) both start from each distinct text's words: the text
lower-cased, then ``re.findall(TOKEN_PATTERN, text)``.  :func:`text_tokens` finds them for a
whole list of texts at once and numbers the distinct words in first-seen order;
:func:`count_matrix` and :func:`hashed_bags` then build the two vectorisers' matrices from those
numbers with numpy, entry for entry and in their order (``tests/trace/test_text_tokens.py``
holds each to scikit-learn's own on hypothesis texts).

An ASCII list (generated and most agent logs) is read by one compiled pass over its bytes
(:func:`_ascii_words`: a word is a run of two or more of ``[0-9A-Za-z_]``, which is what
``\\b\\w\\w+\\b`` matches in ASCII text, and the distinct words are found with a hash table
that compares their bytes); any other list by one regular-expression pass over the texts
joined with NULs.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from numba import njit

#: scikit-learn's default ``token_pattern`` (``CountVectorizer``, ``HashingVectorizer``)
TOKEN_PATTERN = r"(?u)\b\w\w+\b"
_TOKEN = re.compile(TOKEN_PATTERN)
_TOKEN_OR_NUL = re.compile(TOKEN_PATTERN + r"|\x00")


@dataclass(frozen=True)
class Tokens:
    """The words of a list of texts as scikit-learn's vectorisers find them (lower-cased,
    :data:`TOKEN_PATTERN`): the distinct words in first-seen order, and each text's words
    in order as indices into them (CSR: text ``k``'s are ``ids[ptr[k]:ptr[k + 1]]``)."""

    vocabulary: list[str]
    ptr: np.ndarray  # int64, one more than the texts
    ids: np.ndarray  # int64

    def text_of_word(self) -> np.ndarray:
        """The text each entry of ``ids`` belongs to."""
        return np.repeat(np.arange(len(self.ptr) - 1), np.diff(self.ptr))


def text_tokens(texts: Sequence[str] | Sequence[bytes]) -> Tokens:
    """:class:`Tokens` of ``texts``: what ``re.findall(TOKEN_PATTERN, text.lower())`` gives
    for each text.  The texts are joined with NULs (a NUL is neither a word character nor
    cased, so neither the words nor the lower-casing cross it) and read in one pass: compiled
    for ASCII, else one regular expression; texts that hold a NUL themselves are read one at a
    time.  ``texts`` may be UTF-8 ``bytes`` (a packed column's own, ``memlens.trace.features.
    _distinct_bytes``): ASCII ones are read as they are, without decoding each text and
    encoding the joined string back (0.2 s for a 700,000-text column), any other is decoded."""
    n = len(texts)
    if n and isinstance(texts[0], bytes):
        raw = b"\x00".join(texts)
        if raw.count(b"\x00") == n - 1 and raw.isascii():
            return _ascii_tokens(raw, n)
        texts = [t.decode() for t in texts]
    joined = "\x00".join(texts)
    if n and joined.count("\x00") == n - 1:
        if joined.isascii():
            return _ascii_tokens(joined.encode("ascii"), n)
        found = _TOKEN_OR_NUL.findall(joined.lower())
    else:
        per = [_TOKEN.findall(t.lower()) for t in texts]
        found = list(itertools.chain.from_iterable(itertools.chain(p, ("\x00",)) for p in per))
    # each word's first position in ``found`` (setdefault keeps the first count() it is given)
    first: dict[str, int] = {}
    at = np.fromiter(map(first.setdefault, found, itertools.count()), np.int64, len(found))
    nul = first.pop("\x00", -1)
    sep = at == nul
    text = np.cumsum(sep) - sep  # the text each entry is in
    dense = np.zeros(len(found), np.int64)  # first position -> the word's number, first seen 0
    dense[np.fromiter(first.values(), np.int64, len(first))] = np.arange(len(first))
    ptr = np.zeros(n + 1, np.int64)
    np.cumsum(np.bincount(text[~sep], minlength=n)[:n], out=ptr[1:])
    return Tokens(list(first), ptr, dense[at[~sep]])


def _ascii_tokens(raw: bytes, n: int) -> Tokens:
    """:func:`text_tokens` of ``n`` ASCII texts joined with NULs (``raw``)."""
    a = np.frombuffer(raw, np.uint8)
    ids, text, first_start, first_end = _ascii_words(a)
    lowered = raw.lower()
    vocabulary = [lowered[s:e].decode("ascii")
                  for s, e in zip(first_start.tolist(), first_end.tolist())]  # fmt: skip
    ptr = np.zeros(n + 1, np.int64)
    np.cumsum(np.bincount(text, minlength=n)[:n], out=ptr[1:])
    return Tokens(vocabulary, ptr, ids)


@njit(cache=True, nogil=True, inline="always")
def _word_byte(c) -> bool:  # pragma: no cover - compiled
    return (48 <= c <= 57) or (65 <= c <= 90) or (97 <= c <= 122) or c == 95


@njit(cache=True, nogil=True, inline="always")
def _lower(c):  # pragma: no cover - compiled
    return c + 32 if 65 <= c <= 90 else c


@njit(cache=True, nogil=True)
def _rehash(word_hash, distinct, size):  # pragma: no cover - compiled
    """A table of ``size`` slots holding words ``0 .. distinct - 1`` by their hashes."""
    slot_id = np.full(size, -1, np.int64)
    for d in range(distinct):
        j = np.int64(word_hash[d] & np.uint64(size - 1))
        while slot_id[j] >= 0:
            j = (j + 1) & (size - 1)
        slot_id[j] = d
    return slot_id


@njit(cache=True, nogil=True)
def _ascii_words(a):  # pragma: no cover - compiled
    """Words (runs of two or more ``[0-9A-Za-z_]``, compared lower-cased) of NUL-separated
    ASCII texts: per word its number (distinct words numbered in first-seen order) and its
    text; per distinct word the span of its first occurrence.  Distinct words are found with
    an open-addressing table keyed by a 64-bit FNV-1a hash and checked byte for byte (kept
    at most half full, so that it stays small while most words are repeats)."""
    n = a.shape[0]
    count = 0
    k = 0
    while k < n:  # pass 1: how many words
        if _word_byte(a[k]):
            s = k
            while k < n and _word_byte(a[k]):
                k += 1
            if k - s >= 2:
                count += 1
        else:
            k += 1
    size = 1 << 12  # doubled while more than half full: the table stays in the cache
    slot_id = np.full(size, -1, np.int64)
    word_hash = np.empty(count, np.uint64)
    ids = np.empty(count, np.int64)
    text = np.empty(count, np.int64)
    first_start = np.empty(count, np.int64)
    first_end = np.empty(count, np.int64)
    distinct = 0
    w = 0
    t = 0
    k = 0
    prime = np.uint64(1099511628211)
    while k < n:
        c = a[k]
        if c == 0:
            t += 1
            k += 1
            continue
        if not _word_byte(c):
            k += 1
            continue
        s = k
        h = np.uint64(14695981039346656037)
        while k < n and _word_byte(a[k]):
            h = (h ^ np.uint64(_lower(a[k]))) * prime
            k += 1
        if k - s < 2:
            continue
        j = np.int64(h & np.uint64(size - 1))
        while True:
            d = slot_id[j]
            if d < 0:  # a new word
                slot_id[j] = distinct
                word_hash[distinct] = h
                first_start[distinct] = s
                first_end[distinct] = k
                d = distinct
                distinct += 1
                if 2 * distinct > size:
                    size *= 2
                    slot_id = _rehash(word_hash, distinct, size)
                break
            if word_hash[d] == h and first_end[d] - first_start[d] == k - s:
                same = True
                p = first_start[d]
                for q in range(s, k):
                    if _lower(a[q]) != _lower(a[p]):
                        same = False
                        break
                    p += 1
                if same:
                    break
            j = (j + 1) & (size - 1)
        ids[w] = d
        text[w] = t
        w += 1
    return ids, text, first_start[:distinct], first_end[:distinct]


def _distinct_sorted(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``np.unique(values, return_counts=True)`` by one sort (numpy 2's hash-based unique is
    several times slower on millions of keys)."""
    v = np.sort(values)
    if not len(v):
        return v, np.zeros(0, np.int64)
    start = np.flatnonzero(np.concatenate([[True], v[1:] != v[:-1]]))
    return v[start], np.diff(np.append(start, len(v)))


def count_matrix(tokens: Tokens):
    """``CountVectorizer(dtype=np.float64).fit_transform(texts)`` of the texts ``tokens``
    came from (a ``scipy.sparse.csr_matrix``, its entries in the very order scikit-learn
    leaves them: each row's words by first sight in the whole list, numbered alphabetically),
    or None where the vectoriser finds no word at all (its "empty vocabulary" error)."""
    from scipy import sparse

    V, n = len(tokens.vocabulary), len(tokens.ptr) - 1
    if V == 0:
        return None
    key, counts = _distinct_sorted(tokens.text_of_word() * V + tokens.ids)
    rows, word = np.divmod(key, V)
    rank = np.empty(V, np.int64)
    rank[sorted(range(V), key=tokens.vocabulary.__getitem__)] = np.arange(V)
    indptr = np.zeros(n + 1, np.int64)
    np.cumsum(np.bincount(rows, minlength=n), out=indptr[1:])
    dtype = np.int32 if len(key) <= np.iinfo(np.int32).max else np.int64
    return sparse.csr_matrix((counts.astype(np.float64), rank[word].astype(dtype),
                              indptr.astype(dtype)), shape=(n, V))  # fmt: skip


def hashed_bags(tokens: Tokens, n_features: int, stop_words) -> tuple[np.ndarray, np.ndarray]:
    """``HashingVectorizer(n_features=n_features, binary=True, norm=None,
    alternate_sign=False, stop_words=...)`` of the texts ``tokens`` came from, with sorted
    indices, as CSR (pointer, word columns): each distinct word is hashed once
    (:func:`hashed_columns`) instead of at every occurrence.  ``stop_words``: a set of words,
    or ``"english"`` for :data:`ENGLISH_STOP_WORDS`."""
    V, n = len(tokens.vocabulary), len(tokens.ptr) - 1
    ptr = np.zeros(n + 1, np.int64)
    if V == 0:
        return ptr, np.zeros(0, np.int64)
    column = hashed_columns(tokens.vocabulary, n_features)
    stop = frozenset(ENGLISH_STOP_WORDS if stop_words == "english" else stop_words or ())
    kept = np.fromiter((w not in stop for w in tokens.vocabulary), np.bool_, V)[tokens.ids]
    key = _distinct_sorted(tokens.text_of_word()[kept] * n_features + column[tokens.ids[kept]])[0]
    rows, words = np.divmod(key, n_features)
    np.cumsum(np.bincount(rows, minlength=n), out=ptr[1:])
    return ptr, words


#: scikit-learn's ``ENGLISH_STOP_WORDS`` (``sklearn.feature_extraction.text``, 318 words; the
#: test checks they are the same), here so that a replay never imports scikit-learn
ENGLISH_STOP_WORDS = frozenset(
    """
a about above across after afterwards again against all almost alone along already also
although always am among amongst amoungst amount an and another any anyhow anyone anything
anyway anywhere are around as at back be became because become becomes becoming been before
beforehand behind being below beside besides between beyond bill both bottom but by call can
cannot cant co con could couldnt cry de describe detail do done down due during each eg
eight either eleven else elsewhere empty enough etc even ever every everyone everything
everywhere except few fifteen fifty fill find fire first five for former formerly forty
found four from front full further get give go had has hasnt have he hence her here
hereafter hereby herein hereupon hers herself him himself his how however hundred i ie if in
inc indeed interest into is it its itself keep last latter latterly least less ltd made many
may me meanwhile might mill mine more moreover most mostly move much must my myself name
namely neither never nevertheless next nine no nobody none noone nor not nothing now nowhere
of off often on once one only onto or other others otherwise our ours ourselves out over own
part per perhaps please put rather re same see seem seemed seeming seems serious several she
should show side since sincere six sixty so some somehow someone something sometime
sometimes somewhere still such system take ten than that the their them themselves then
thence there thereafter thereby therefore therein thereupon these they thick thin third this
those though three through throughout thru thus to together too top toward towards twelve
twenty two un under until up upon us very via was we well were what whatever when whence
whenever where whereafter whereas whereby wherein whereupon wherever whether which while
whither who whoever whole whom whose why will with within without would yet you your yours
yourself yourselves
""".split()
)


def hashed_columns(words: list[str], n_features: int) -> np.ndarray:
    """The column scikit-learn's ``FeatureHasher(n_features, input_type="string")`` (and so
    ``HashingVectorizer``) gives each word: ``abs(murmurhash3_32(utf-8 bytes, seed 0))
    % n_features``, with its case for the hash -2**31, computed here without scikit-learn."""
    data = "".join(words).encode("utf-8") if words else b""
    if len(data) != sum(map(len, words)):  # not all ASCII: each word's own byte length
        encoded = [w.encode("utf-8") for w in words]
        data = b"".join(encoded)
        lengths = np.fromiter(map(len, encoded), np.int64, len(words))
    else:
        lengths = np.fromiter(map(len, words), np.int64, len(words))
    offsets = np.zeros(len(words) + 1, np.int64)
    np.cumsum(lengths, out=offsets[1:])
    h = _murmur3_32(np.frombuffer(data, np.uint8), offsets).astype(np.int64)
    out = np.abs(h) % n_features
    out[h == -(2**31)] = (2**31 - 1 - (n_features - 1)) % n_features
    return out


@njit(cache=True, nogil=True)
def _murmur3_32(data, offsets):  # pragma: no cover - compiled
    """MurmurHash3 x86 32-bit (Austin Appleby's ``MurmurHash3_x86_32``, seed 0) of each
    span of ``data``, as a signed 32-bit integer (scikit-learn's ``murmurhash3_32``)."""
    n = offsets.shape[0] - 1
    out = np.empty(n, np.int32)
    c1, c2, m32 = np.uint32(0xCC9E2D51), np.uint32(0x1B873593), np.uint32(0xFFFFFFFF)
    for i in range(n):
        s, e = offsets[i], offsets[i + 1]
        length = e - s
        h = np.uint32(0)
        nblocks = length // 4
        for b in range(nblocks):
            q = s + 4 * b
            k = (np.uint32(data[q]) | (np.uint32(data[q + 1]) << np.uint32(8))
                 | (np.uint32(data[q + 2]) << np.uint32(16)) | (np.uint32(data[q + 3]) << np.uint32(24)))  # fmt: skip
            k = np.uint32((k * c1) & m32)
            k = np.uint32(((k << np.uint32(15)) | (k >> np.uint32(17))) & m32)
            k = np.uint32((k * c2) & m32)
            h = np.uint32(h ^ k)
            h = np.uint32(((h << np.uint32(13)) | (h >> np.uint32(19))) & m32)
            h = np.uint32((h * np.uint32(5) + np.uint32(0xE6546B64)) & m32)
        tail = s + 4 * nblocks
        k = np.uint32(0)
        rest = length & 3
        if rest >= 3:
            k = np.uint32(k ^ (np.uint32(data[tail + 2]) << np.uint32(16)))
        if rest >= 2:
            k = np.uint32(k ^ (np.uint32(data[tail + 1]) << np.uint32(8)))
        if rest >= 1:
            k = np.uint32(k ^ np.uint32(data[tail]))
            k = np.uint32((k * c1) & m32)
            k = np.uint32(((k << np.uint32(15)) | (k >> np.uint32(17))) & m32)
            k = np.uint32((k * c2) & m32)
            h = np.uint32(h ^ k)
        h = np.uint32(h ^ np.uint32(length))
        h = np.uint32(h ^ (h >> np.uint32(16)))
        h = np.uint32((h * np.uint32(0x85EBCA6B)) & m32)
        h = np.uint32(h ^ (h >> np.uint32(13)))
        h = np.uint32((h * np.uint32(0xC2B2AE35)) & m32)
        h = np.uint32(h ^ (h >> np.uint32(16)))
        out[i] = np.int32(h)
    return out


def l2_normalize_rows(x) -> None:
    """``sklearn.preprocessing.normalize(x, norm="l2", copy=False)`` of a CSR matrix, in
    place: each row divided by the square root of its squares summed in entry order (a row
    of zeros left as it is), the loop of scikit-learn's ``inplace_csr_row_normalize_l2``."""
    _l2_rows(x.data, np.asarray(x.indptr, np.int64))


@njit(cache=True, nogil=True)
def _l2_rows(data, indptr):  # pragma: no cover - compiled
    for i in range(indptr.shape[0] - 1):
        total = 0.0
        for j in range(indptr[i], indptr[i + 1]):
            total += data[j] * data[j]
        if total == 0.0:
            continue
        total = np.sqrt(total)
        for j in range(indptr[i], indptr[i + 1]):
            data[j] /= total
