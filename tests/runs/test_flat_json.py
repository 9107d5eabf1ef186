"""compare.json and metrics.json with number lists on one line: the same document (issue 34)."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from memlens._util.atomic import dumps_flat_lists, write_json

scalars = st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False,
                                                                allow_infinity=False) | st.text()  # fmt: skip
documents = st.recursive(scalars, lambda inner: st.lists(inner) | st.dictionaries(st.text(), inner),
                         max_leaves=40)  # fmt: skip


@given(documents)
def test_parses_to_what_json_dumps_writes(doc):
    assert json.loads(dumps_flat_lists(doc)) == json.loads(json.dumps(doc, indent=2))


def test_layout_hand_checked(tmp_path):
    """Lists of scalars on one line; a dictionary of scalars on one line when nested two
    deep (a stream's row), with a line per key at the top (``overall``)."""
    doc = {"a": [1, 2.5, None], "b": {"c": []}, "d": [{"e": 1}], "f": {}, "g": {"h": 1},
           "s": {"x": {"k": 1, "m": "n"}}}  # fmt: skip
    write_json(tmp_path / "x.json", doc, flat_lists=True)
    assert (tmp_path / "x.json").read_text() == (
        '{\n  "a": [1, 2.5, null],\n  "b": {\n    "c": []\n  },\n'
        '  "d": [\n    {"e": 1}\n  ],\n  "f": {},\n  "g": {\n    "h": 1\n  },\n'
        '  "s": {\n    "x": {"k": 1, "m": "n"}\n  }\n}\n'
    )


def test_nan_is_refused_as_before(tmp_path):
    with pytest.raises(ValueError):
        write_json(tmp_path / "x.json", {"a": [float("nan")]}, flat_lists=True)


@given(st.lists(st.floats(allow_nan=False, allow_infinity=False) | st.integers(-(2**70), 2**70)
                | st.booleans(), min_size=1))  # fmt: skip
def test_number_lists_read_back_as_json_writes_them(numbers):
    """Lists of numbers go through orjson (its own float text, ``0.00001`` for ``1e-05``):
    every number reads back as the same number, bit for bit, and of the same type."""
    back = json.loads(dumps_flat_lists({"a": numbers}))["a"]
    assert [(type(x), x) for x in back] == [(type(x), x) for x in json.loads(json.dumps(numbers))]
    assert [math.copysign(1, x) for x in back if isinstance(x, float)] == [
        math.copysign(1, x) for x in numbers if isinstance(x, float)
    ]


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), -float("inf")])
def test_non_finite_numbers_in_a_number_list_are_refused(tmp_path, bad):
    """orjson writes NaN and infinity as null; the list falls back to json, which refuses."""
    with pytest.raises(ValueError):
        write_json(tmp_path / "x.json", {"a": [1.0, 2.5, bad]}, flat_lists=True)


@given(
    hnp.arrays(
        st.sampled_from([np.float64, np.float32, np.int64, np.int32, np.uint8, np.bool_]),
        st.integers(0, 30),
        elements={"allow_nan": False, "allow_infinity": False},
    )
)
def test_an_array_is_written_as_its_list(values):
    """A 1-d array (compare.json's per-stream parts) is written byte for byte as its
    ``tolist()``: orjson reads float64 and integer buffers directly; float32 (whose digits
    orjson writes its own way) goes through the list."""
    doc = {"x": {"num": values, "den": None}}
    listed = {"x": {"num": values.tolist(), "den": None}}
    assert dumps_flat_lists(doc, 1) == dumps_flat_lists(listed, 1)


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_non_finite_numbers_in_an_array_are_refused(tmp_path, bad):
    with pytest.raises(ValueError):
        write_json(tmp_path / "x.json", {"a": np.array([1.0, bad])}, flat_lists=True)


numbers = (
    st.floats(allow_nan=False, allow_infinity=False) | st.integers(-(2**70), 2**70) | st.booleans()
)


@given(st.dictionaries(st.text(), numbers | st.none() | st.text(max_size=3)
                       | st.sampled_from(["exact", "lp", "a b"])
                       | st.lists(numbers, max_size=3), max_size=8))  # fmt: skip
def test_a_row_of_scalars_reads_back_as_json_writes_it(row):
    """A stream's row (a dictionary two deep) goes through orjson when it holds only numbers
    and plain words: keys or strings with ``,:"\\``, a control character or beyond ASCII, and
    any other value, fall back to ``json``; either way the row reads back
    as ``json.dumps`` writes it, number for number and type for type, and a row of scalars is
    on one line."""
    text = dumps_flat_lists({"streams": {"s": row}})
    if all(isinstance(v, (int, float, str, type(None))) for v in row.values()):
        line = text.split("\n")[2].strip()
        assert line.startswith('"s": {') and line.endswith("}")
    back = json.loads(text)["streams"]["s"]
    want = json.loads(json.dumps(row))
    assert list(back) == list(want)
    assert [(type(v), v) for v in back.values()] == [(type(v), v) for v in want.values()]


def test_a_row_of_scalars_is_spaced_as_json_spaces_it():
    row = {"hit_rate": 0.5, "evictions": 3, "ok": True, "p95": 1019.0, "method": "exact"}
    assert dumps_flat_lists(row, 2) == json.dumps(row, separators=(", ", ": "))
    for awkward in (
        {"a,": 1},
        {":a": 1},
        {'a"': 1},
        {"a\\": 1},
        {"a": None},
        {"é": 1},
        {"a": "b,c"},
        {"a": "é"},
        {"a": "\x7f"},
        {"a": "\n"},
    ):
        assert dumps_flat_lists(awkward, 2) == json.dumps(awkward, separators=(", ", ": "))
    lists = {"num": [1.0, 2.0], "den": [3, 4]}  # a row of lists keeps a line per key
    assert dumps_flat_lists(lists, 2) == '{\n      "num": [1.0, 2.0],\n      "den": [3, 4]\n    }'


def _table_as_json_writes_it(table: dict) -> str:
    """A level-1 table of rows in :func:`dumps_flat_lists`' layout, by ``json`` alone."""
    rows = [
        f"    {json.dumps(k)}: {json.dumps(r, separators=(', ', ': '))}" for k, r in table.items()
    ]
    return "{\n" + ",\n".join(rows) + "\n  }" if rows else "{}"


ints_and_words = st.integers(-(2**63), 2**63 - 1) | st.booleans() | st.none() | st.text(max_size=4)


@given(st.dictionaries(st.text(max_size=4), st.dictionaries(st.text(max_size=4), ints_and_words,
                                                            max_size=4), max_size=4))  # fmt: skip
def test_a_table_of_rows_is_written_as_json_writes_it(table):
    """A dictionary of rows (a run's streams) goes through orjson in one call and is split into
    lines between rows; whatever its keys and strings hold (``}, "``, quotes, non-ASCII), the
    text is byte for byte what ``json`` writes in that layout."""
    assert dumps_flat_lists(table, 1) == _table_as_json_writes_it(table)
