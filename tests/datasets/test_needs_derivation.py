"""Need derivation: each method on hand-made logs, the grouping rules, settings, invariants."""

from __future__ import annotations

import re

import pytest
from hypothesis import given
from hypothesis import strategies as st
from memlens.datasets.needs_derivation import (
    METHODS,
    Deriver,
    Earlier,
    NeedsSettings,
    Step,
    args_needs,
    salient_terms,
    simplify,
    terms,
)

LOG = [
    Earlier("s", "Policy: refunds need an order number. Cabin economy.", pinned=True),
    Earlier("m1", "My order is A-1042 and my name is Mia."),
    Earlier("m2", "Thanks, looking it up."),
    Earlier("m3", '{"order_id": "A-1042", "total": 59.90, "status": "delivered"}'),
    Earlier("m4", "The parcel arrived broken, the glass teapot shattered."),
]


def _derive(method: str, text: str, arguments=(), earlier=LOG, **kw) -> list:
    s = NeedsSettings(method=method, **kw)
    d = Deriver(s, [e.text for e in earlier], [text])
    return d.derive(Step(text, list(arguments), row=0), earlier, list(range(len(earlier)))).needs


# ------------------------------------------------------------------------------ args
def test_args_alternatives_first_last():
    args = [{"order_id": "A-1042"}]
    assert args_needs(args, LOG, "alternatives").needs == [["m1", "m3"]]
    assert args_needs(args, LOG, "first").needs == ["m1"]
    assert args_needs(args, LOG, "last").needs == ["m3"]


def test_args_pinned_only_as_fallback_and_unmatched_counted():
    res = args_needs([{"cabin": "economy", "order": "A-1042", "x": "nowhere", "ok": True}], LOG,
                     "alternatives")  # fmt: skip
    assert res.needs == ["s", ["m1", "m3"]]
    assert (res.values, res.found, res.system_only, res.unmatched) == (3, 1, 1, ["x"])


def test_args_whole_tokens_only():
    earlier = [Earlier("a", "flight HAT136"), Earlier("b", "flight HAT13 today")]
    assert args_needs([{"f": "HAT13"}], earlier, "alternatives").needs == ["b"]


@pytest.mark.parametrize(
    "needs, want",
    [
        (["a", "a", "b"], ["a", "b"]),
        ([["a", "b"], "b"], ["b"]),  # the group is met whenever b is
        ([["a", "b"], ["b", "a"]], [["a", "b"]]),  # the same group once
        ([["a", "b", "c"], ["a", "b"]], [["a", "b"]]),  # met whenever the smaller one is
        ([["a", "b"], ["c", "d"]], [["a", "b"], ["c", "d"]]),
        ([["a"]], ["a"]),
    ],
)
def test_simplify_cases(needs, want):
    assert simplify(needs) == want


_ids = st.sampled_from(list("abcdef"))
_need = st.one_of(_ids, st.lists(_ids, min_size=1, max_size=4, unique=True))


@given(st.lists(_need, max_size=8))
def test_simplify_keeps_exactly_what_is_required(needs):
    """Any resident set meeting every simplified need meets every original need, and no
    simplified need is implied by another one."""
    out = simplify(needs)
    as_sets = [frozenset([n]) if isinstance(n, str) else frozenset(n) for n in out]
    for n in needs:  # every original need is implied by some kept one
        s = frozenset([n]) if isinstance(n, str) else frozenset(n)
        assert any(k <= s for k in as_sets)
    for i, a in enumerate(as_sets):
        assert not any(b <= a for j, b in enumerate(as_sets) if j != i)


_word = st.text(alphabet="abcXYZ019_-", min_size=1, max_size=6).filter(lambda w: w[0].isalnum())


@given(st.lists(st.lists(_word, min_size=1, max_size=5), min_size=1, max_size=6), _word,
       st.sampled_from(["first", "last"]))  # fmt: skip
def test_args_against_a_plain_scan(texts, value, pick):
    """A second, plain implementation: split each text into tokens, find the value's tokens."""
    earlier = [Earlier(f"m{i}", " ".join(ws)) for i, ws in enumerate(texts)]
    res = args_needs([{"v": value}], earlier, pick)
    holders = [e.id for e in earlier if re.search(
        r"(?<![0-9a-z_])" + re.escape(value.lower()) + r"(?![0-9a-z_])", e.text.lower())]  # fmt: skip
    if not holders:
        assert res.needs == [] and res.unmatched == ["v"]
    else:
        assert res.needs == [holders[0] if pick == "first" else holders[-1]]
        alt = args_needs([{"v": value}], earlier, "alternatives").needs
        assert alt == ([holders] if len(holders) > 1 else holders)


# --------------------------------------------------------------------------- overlap
def test_salient_terms_kinds():
    df = {"parcel": 1, "order": 50}
    got = salient_terms("Where is order A-1042 for Mia, 59 euros? The parcel?", df, 100, 0.01)
    # identifier, number, name, rare word; "order" is common, "where"/"the" are stopwords
    assert got == {"a-1042", "59", "mia", "parcel", "euros"}
    assert "where" not in terms("Where now")


def test_overlap_finds_items_sharing_salient_terms_not_pins():
    assert _derive("overlap", "Refund A-1042 now") == ["m3", "m1"]  # m3 most recent on a tie
    assert _derive("overlap", "Refund A-1042 now", overlap_top_k=1) == ["m3"]
    assert _derive("overlap", "What about the teapot?") == ["m4"]
    assert _derive("overlap", "economy") == []  # only the pinned prompt has it


def test_overlap_min_terms():
    assert _derive("overlap", "A-1042 teapot", overlap_min_terms=2) == []
    assert _derive("overlap", "Mia A-1042", overlap_min_terms=2) == ["m1"]


# ------------------------------------------------------------------------- embedding
@pytest.mark.parametrize("dim", [0, 4])
def test_embedding_most_similar_above_threshold(dim):
    text = "The parcel arrived broken, the glass teapot shattered."
    got = _derive("embedding", text, embedding_dim=dim, embedding_top_k=1)
    assert got == ["m4"]
    assert _derive("embedding", "zzz qqq", embedding_dim=dim) == []  # nothing similar


def test_embedding_never_names_a_pin():
    text = LOG[0].text
    assert "s" not in _derive("embedding", text, embedding_threshold=-1.0, embedding_top_k=9)


# ------------------------------------------------------------------------ union, all
def test_union_is_every_method_together():
    text, args = "Refund order A-1042: the teapot", [{"order_id": "A-1042"}]
    parts = [set(map(str, _derive(m, text, args))) for m in ("args", "overlap", "embedding")]
    union = _derive("union", text, args)
    members = {x for n in union for x in ([n] if isinstance(n, str) else n)}
    assert set().union(*[{x for x in p if not x.startswith("[")} for p in parts]) <= members


def test_describe_records_the_method_and_its_settings():
    assert NeedsSettings().describe() == {"method": "args", "pick": "alternatives",
                                          "commands": True, "evidence": "derived"}  # fmt: skip
    # whole values only (the shipped tau-bench trace's derivation): the header says as before
    assert NeedsSettings(commands=False).describe() == {"method": "args", "pick": "alternatives",
                                                        "evidence": "derived"}  # fmt: skip
    assert NeedsSettings(method="bm25", calibration="x").describe()["calibration"] == "x"
    d = NeedsSettings(method="overlap", overlap_top_k=5).describe()
    assert d["overlap_top_k"] == 5 and "pick" not in d and d["evidence"] == "derived"
    assert set(NeedsSettings(method="union").describe()) > {"pick", "overlap_top_k",
                                                            "embedding_threshold"}  # fmt: skip


@pytest.mark.parametrize(
    "kw, message",
    [
        ({"method": "magic"}, "needs.method must be one of"),
        ({"pick": "middle"}, "needs.pick"),
        ({"overlap_top_k": 0}, "needs.overlap_top_k must be at least 1"),
        ({"rare_share": 0.0}, "needs.rare_share"),
        ({"embedding_threshold": 2.0}, "needs.embedding_threshold"),
        ({"embedding_dim": -1}, "needs.embedding_dim must be at least 0"),
    ],
)
def test_bad_settings(kw, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        NeedsSettings(**kw)


@pytest.mark.parametrize("method", METHODS)
def test_same_input_same_needs(method):
    text, args = "Refund order A-1042: the teapot", [{"order_id": "A-1042"}]
    assert _derive(method, text, args) == _derive(method, text, args)
