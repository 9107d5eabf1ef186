"""Per-trace preparation done once per distinct text, and the learned scorer's one-pass forest:
each gives bit for bit what the plain computation over every text (or every row) gives."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st
from memlens.policies.generative_agents import tfidf_rows
from scipy import sparse
from sklearn.feature_extraction.text import HashingVectorizer, TfidfVectorizer

from memlens.policy import announce_budgets
from memlens.scorer.decision_features import _shared_words, context
from memlens.scorer.model import CompiledForest, ValueScorer
from memlens.testing import rq, trace, traces, w
from memlens.trace.features import COUNT_FIELDS, content_features, text_features, unique_texts
from memlens.trace.io import trace_from_events
from memlens.trace.packed import PackedStrings

WORDS = ["Order", "ord_12", "error", "the", "failed", "INV-2024", "x", "Paris", "a.b", "7", ""]
texts = st.lists(st.lists(st.sampled_from(WORDS), max_size=6).map(" ".join), min_size=1,
                 max_size=12)  # fmt: skip


def test_unique_texts_first_seen_order_and_inverse():
    distinct, inverse = unique_texts(["b", "a", "b", "c", "a"])
    assert distinct == ["b", "a", "c"]
    assert inverse.tolist() == [0, 1, 0, 2, 1]


def trace_of(item_texts: list[str], request_texts: list[str] | None = None):
    events = [w(f"i{k}", 1 + k % 3, text=t) for k, t in enumerate(item_texts)]
    for k, t in enumerate(request_texts or []):
        events.append(rq(f"r{k}", f"i{k % len(item_texts)}", text=t))
    return trace(*events)


@given(texts)
def test_content_features_per_distinct_text_equal_the_features_of_every_text(item_texts):
    tr = trace_of(item_texts)
    got, want = content_features(tr), text_features(tr.item_text, tr.item_tokens)
    for name in (*COUNT_FIELDS, "tokens"):
        assert np.array_equal(getattr(got, name), getattr(want, name)), name
        assert getattr(got, name).dtype == getattr(want, name).dtype, name


ODD_WORDS = ["a\x00b", "\x00", "Größe", "Ünïcode", "—", "错误 error", "FINAL", "x"]


@given(st.lists(st.lists(st.sampled_from(ODD_WORDS + WORDS), max_size=4).map(" ".join),
                min_size=1, max_size=30))  # fmt: skip
def test_distinct_texts_of_a_packed_column_equal_unique_texts_of_the_decoded_ones(item_texts):
    """A loaded trace's text columns are deduplicated on their UTF-8 bytes (once for the
    content features and the distinct texts): the same distinct texts, in first-seen order,
    and the same inverse as ``unique_texts`` of the decoded column."""
    from memlens.trace.features import distinct_texts

    tr = trace_of(item_texts, item_texts[::-1])
    content_features(tr)  # deduplicates the items' bytes first, as a sweep worker does
    for column in ("item_text", "req_text"):
        texts = getattr(tr, column)
        assert isinstance(texts, PackedStrings)
        distinct, inverse = distinct_texts(tr, column)
        want, want_inverse = unique_texts(list(texts))
        assert distinct == want
        assert np.array_equal(inverse, want_inverse) and inverse.dtype == want_inverse.dtype


@given(st.lists(st.lists(st.sampled_from(ODD_WORDS), max_size=4).map(" ".join), min_size=1,
                max_size=10))  # fmt: skip
def test_content_features_from_packed_bytes_equal_those_of_the_decoded_texts(item_texts):
    """A loaded trace's texts are deduplicated and joined as UTF-8 bytes, never decoded: NULs
    inside a text and multi-byte characters must count as they do in the decoded texts."""
    tr = trace_of(item_texts)
    assert isinstance(tr.item_text, PackedStrings)
    got, want = content_features(tr), text_features(item_texts, tr.item_tokens)
    for name in COUNT_FIELDS:
        assert np.array_equal(getattr(got, name), getattr(want, name)), name


@given(texts, texts)
def test_shared_words_equal_the_sparse_dot_of_hashed_bags(item_texts, request_texts):
    tr = trace_of(item_texts, request_texts)
    items, reqs = context(tr).bags
    vec = HashingVectorizer(n_features=1 << 20, binary=True, norm=None, alternate_sign=False,
                            stop_words="english")  # fmt: skip
    a = sparse.csr_matrix(vec.transform(list(tr.item_text)))
    b = sparse.csr_matrix(vec.transform(list(tr.req_text)))
    rng = np.random.default_rng(len(item_texts))
    ta = rng.integers(0, a.shape[0], 20)
    tb = rng.integers(0, b.shape[0], 20)
    want = np.asarray(a[ta].multiply(b[tb]).sum(axis=1)).ravel()
    assert np.array_equal(_shared_words(items, ta, reqs, tb), want)
    assert np.array_equal(items.sizes(ta), np.diff(a.indptr)[ta].astype(float))


@settings(max_examples=60)
@given(texts, texts)
def test_tfidf_of_distinct_texts_is_the_vectoriser_s_bit_for_bit(item_texts, request_texts):
    tr = trace_of(item_texts, request_texts)
    got = [list(row.items()) for part in tfidf_rows(tr) for row in part]
    all_texts = list(tr.item_text) + list(tr.req_text)
    try:
        x = TfidfVectorizer(sublinear_tf=True).fit_transform(all_texts).tocsr()
    except ValueError:  # no vocabulary: every row empty
        assert got == [[] for _ in all_texts]
        return
    want = [list(zip(x.indices[a:b].tolist(), x.data[a:b].tolist()))
            for a, b in zip(x.indptr[:-1], x.indptr[1:])]  # fmt: skip
    assert got == want


def small_model():
    """A small model of the real feature columns, trained on random rows (cached)."""
    global _SMALL
    if _SMALL is None:
        from memlens.scorer.decision_features import FEATURE_NAMES
        from memlens.scorer.model import LearnedModel

        rng = np.random.default_rng(0)
        X = rng.normal(size=(600, len(FEATURE_NAMES)))
        y = (X[:, 0] + X[:, -1] > 0).astype(float)
        est = ValueScorer(n_estimators=15, num_leaves=7, random_state=0).fit(X, y)
        _SMALL = LearnedModel(est.booster_.model_to_string(), {}, "<test>")
    return _SMALL


_SMALL = None


def toy_forest(seed: int = 0) -> tuple[CompiledForest, np.ndarray, ValueScorer]:
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(800, 8))
    X[:, 2] = rng.integers(0, 3, 800)  # a "tier" column some trees split on
    X[::9, 5] = np.nan
    y = (X[:, 0] + 0.3 * X[:, 2] + rng.normal(scale=0.5, size=800) > 0.3).astype(float)
    est = ValueScorer(n_estimators=30, num_leaves=7, random_state=seed)
    est.fit(X, y, feature_names=[f"f{k}" for k in range(8)])
    return CompiledForest.from_dump(est.booster_.dump_model()), X, est


def test_one_pass_pair_equals_two_evaluations_and_lightgbm():
    forest, X, est = toy_forest()
    moved = np.zeros(len(X), bool)
    moved[::3] = True
    main, other = forest.raw_pair(X, moved, 2, 2.0)
    X2 = X.copy()
    X2[moved, 2] = 2.0
    assert np.array_equal(main, forest.raw(X))
    assert np.array_equal(main, est.decision_function(X))
    assert np.array_equal(other, est.decision_function(X2))
    assert forest.splits_on(2).any() and not forest.splits_on(2).all()


@settings(max_examples=25, deadline=None)
@given(traces(max_events=40), st.integers(1, 9))
def test_learned_scores_built_a_block_at_a_time_for_announced_budgets_equal_the_whole(
    events, block
):
    """Keys from features built ``block`` anchors at a time, for two announced budgets in one
    pass, equal the keys of the whole feature matrix scored one budget at a time."""
    import memlens.policies.learned as learned

    tr = trace_from_events(events)
    model = small_model()
    announce_budgets(tr, [64, 8])
    old = learned.FEATURE_BLOCK
    learned.FEATURE_BLOCK = block
    try:
        got = {b: learned.anchor_key_arrays(tr, model, b, 0.01, 0.5) for b in (8, 64)}
    finally:
        learned.FEATURE_BLOCK = old
    table = learned.AnchorTable(tr)  # a fresh table: its whole X, the Python evaluator
    for b in (8, 64):
        main, miss = table.raw(model.raw, b)
        assert np.array_equal(got[b], learned._keys(table, main, miss, 0.01, 0.5))


@settings(max_examples=25, deadline=None)
@given(st.integers(1, 20), st.integers(0, 2**32 - 1), st.sampled_from([[0, 5], [5], [1, 3, 7]]))
def test_forest_at_many_budgets_in_one_pass_equals_one_pair_per_budget(n_budgets, seed, columns):
    """``raw_budgets`` walks each tree once for every budget (the budgets part only below the
    nodes reading the budget columns); each budget's scores equal ``raw_pair`` of the rows with
    that budget's columns set, bit for bit (NaN and zero values too, more budgets than one pass
    takes)."""
    forest, X, _ = toy_forest()
    rng = np.random.default_rng(seed)
    moved = rng.random(len(X)) < 0.4
    values = rng.normal(size=(n_budgets, len(X), len(columns)))
    values[:, ::7] = np.nan
    values[:, ::11] = 0.0
    values[1::2, ::5] = values[0, ::5]  # budgets that agree on some rows
    main, miss = forest.raw_budgets(X, moved, 2, 2.0, columns, values)
    assert main.shape == miss.shape == (n_budgets, len(X))
    for k in range(n_budgets):
        Xk = X.copy()
        Xk[:, columns] = values[k]
        want_main, want_miss = forest.raw_pair(Xk, moved, 2, 2.0)
        assert np.array_equal(main[k], want_main, equal_nan=True)
        assert np.array_equal(miss[k], want_miss, equal_nan=True)
