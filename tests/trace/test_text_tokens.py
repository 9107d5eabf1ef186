"""One pass over a trace's texts (``memlens.trace.words.text_tokens``)
gives scikit-learn's vectorisers' own matrices, entry for entry and in their order: the
counts ``CountVectorizer`` fits (Generative Agents' TF-IDF) and the bags ``HashingVectorizer``
hashes (the learned scorer's similarity features)."""

from __future__ import annotations

import re

import numpy as np
from hypothesis import given
from hypothesis import strategies as st
from sklearn.feature_extraction.text import ENGLISH_STOP_WORDS as SKLEARN_STOP_WORDS
from sklearn.feature_extraction.text import CountVectorizer, HashingVectorizer

from memlens.trace.words import (
    ENGLISH_STOP_WORDS,
    TOKEN_PATTERN,
    count_matrix,
    hashed_bags,
    hashed_columns,
    l2_normalize_rows,
    text_tokens,
)

# cased and uncased scripts, final sigma, a dotted capital I (lower-cases to two characters),
# NULs inside a text, digits, underscores, stop words, one-letter words, empty texts
WORDS = ["Order", "ord_12", "the", "and", "ΣΑΣ", "ΟΔΟΣ", "İstanbul", "a\x00b", "\x00", "x",
         "Größe", "错误", "7", "42", "snake_case", "—", "", " ", "THE", "Ünïcode", "ǅemal"]  # fmt: skip
texts = st.lists(st.lists(st.sampled_from(WORDS), max_size=6).map(" ".join), max_size=14)
no_nul = st.lists(st.lists(st.sampled_from([w for w in WORDS if "\x00" not in w]),
                           max_size=6).map(" ".join), max_size=14)  # fmt: skip
# ASCII texts take the compiled pass: every byte class at every position (NUL: the fallback)
ascii_texts = st.lists(st.text(alphabet="aAzZ09_ .-\t\n\x7f", max_size=12), max_size=14)


@given(st.one_of(texts, no_nul, ascii_texts))
def test_tokens_are_each_texts_own_findall(docs):
    tok = text_tokens(docs)
    assert len(tok.ptr) == len(docs) + 1
    for k, doc in enumerate(docs):
        got = [tok.vocabulary[i] for i in tok.ids[tok.ptr[k] : tok.ptr[k + 1]].tolist()]
        assert got == re.findall(TOKEN_PATTERN, doc.lower())
    seen = list(dict.fromkeys(re.findall(TOKEN_PATTERN, "\n".join(docs).lower())))
    assert tok.vocabulary == seen  # first seen first


@given(st.one_of(texts, no_nul, ascii_texts))
def test_texts_as_utf8_bytes_give_the_tokens_of_the_texts(docs):
    """A packed column's distinct texts are read as their bytes (ASCII without decoding):
    the same words, vocabulary and order as the decoded texts."""
    want, got = text_tokens(docs), text_tokens([d.encode() for d in docs])
    assert got.vocabulary == want.vocabulary
    assert got.ptr.tolist() == want.ptr.tolist() and got.ids.tolist() == want.ids.tolist()


def same_csr(a, b) -> None:
    assert a.shape == b.shape
    assert np.array_equal(a.indptr, b.indptr)
    assert np.array_equal(a.indices, b.indices)  # the same order within each row too
    assert np.array_equal(a.data, b.data)
    assert a.data.dtype == b.data.dtype


@given(st.one_of(texts, no_nul, ascii_texts))
def test_count_matrix_is_count_vectorizers(docs):
    got = count_matrix(text_tokens(docs))
    try:
        want = CountVectorizer(dtype=np.float64).fit_transform(docs).tocsr()
    except ValueError:  # empty vocabulary (or no document at all)
        assert got is None
        return
    same_csr(got, want)


@given(st.one_of(texts, no_nul, ascii_texts), st.sampled_from([8, 1 << 20]))
def test_hashed_bags_are_hashing_vectorizers(docs, n_features):
    ptr, words = hashed_bags(text_tokens(docs), n_features, "english")
    if not docs:
        assert ptr.tolist() == [0] and len(words) == 0
        return
    vec = HashingVectorizer(n_features=n_features, binary=True, norm=None,
                            alternate_sign=False, stop_words="english", dtype=np.float64)  # fmt: skip
    m = vec.transform(docs).tocsr()
    m.sort_indices()
    assert np.array_equal(ptr, m.indptr.astype(np.int64))
    assert np.array_equal(words, m.indices.astype(np.int64))
    assert ptr.dtype == words.dtype == np.int64


@given(st.lists(st.text(max_size=9), max_size=20), st.sampled_from([1, 7, 1 << 20, 2**31 - 1]))
def test_hashed_columns_are_feature_hashers(words, n_features):
    """MurmurHash3 computed here, for any text (every length modulo 4, any code point), gives
    the columns of scikit-learn's own ``FeatureHasher``."""
    from sklearn.feature_extraction import FeatureHasher
    from sklearn.utils import murmurhash3_32

    got = hashed_columns(words, n_features)
    want = [abs(murmurhash3_32(w, 0)) % n_features if murmurhash3_32(w, 0) != -(2**31)
            else (2**31 - 1 - (n_features - 1)) % n_features for w in words]  # fmt: skip
    assert got.tolist() == want
    if words:
        hasher = FeatureHasher(n_features=n_features, input_type="string", alternate_sign=False)
        m = hasher.transform([[w] for w in words]).tocsr()
        assert got.tolist() == m.indices.tolist()


def test_stop_words_are_scikit_learns():
    assert ENGLISH_STOP_WORDS == SKLEARN_STOP_WORDS


@given(
    st.lists(st.lists(st.floats(-1e6, 1e6, allow_nan=False), max_size=5), min_size=1, max_size=8)
)
def test_l2_rows_are_sklearns_normalize(rows):
    from scipy import sparse
    from sklearn.preprocessing import normalize

    indptr = np.cumsum([0] + [len(r) for r in rows])
    data = np.asarray([v for r in rows for v in r], np.float64)
    x = sparse.csr_matrix((data, np.concatenate([np.arange(len(r)) for r in rows] or [[]]).astype(np.int32),
                           indptr), shape=(len(rows), 5))  # fmt: skip
    want = normalize(x.copy(), norm="l2", copy=False)
    l2_normalize_rows(x)
    assert np.array_equal(x.data, want.data)
