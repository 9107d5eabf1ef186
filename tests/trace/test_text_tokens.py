"""One pass over a trace's texts (``memlens.trace.words.text_tokens``)
gives scikit-learn's vectorisers' own matrices, entry for entry and in their order: the
counts ``CountVectorizer`` fits (Generative Agents' TF-IDF) and the bags ``HashingVectorizer``
hashes (the learned scorer's similarity features)."""

from __future__ import annotations

import re

import numpy as np
from hypothesis import given
from hypothesis import strategies as st
from sklearn.feature_extraction.text import (
    ENGLISH_STOP_WORDS,
    CountVectorizer,
    HashingVectorizer,
)

from memlens.trace.words import TOKEN_PATTERN, count_matrix, hashed_bags, text_tokens

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
    ptr, words = hashed_bags(text_tokens(docs), n_features, ENGLISH_STOP_WORDS)
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
