"""Commands and code in tool-call arguments split into the values a source could hold."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st
from memlens.datasets.arg_values import kind_of, pieces


@pytest.mark.parametrize(("text", "kind", "values"), [
    ("open src/x.py 120", "shell", ["src/x.py", "120"]),
    ("grep -n foo src/", "shell", ["foo", "src/"]),
    ("python reproduce.py", "shell", ["reproduce.py"]),
    ("cd /repo && git diff HEAD~1 | head -n 50", "shell", ["/repo", "HEAD~1", "50"]),
    ("pytest --maxfail=3 tests/test_a.py::test_b", "shell", ["3", "tests/test_a.py::test_b"]),
    ("src/a/b.py:12:3", "file_line", ["src/a/b.py", "12"]),
    ("SELECT name FROM users WHERE id = 42 AND city = 'Paris'", "sql",
     ["name", "users", "id", "42", "city", "Paris"]),
    ('from pkg.mod import thing\nprint(thing.run(3, "abc"))', "python",
     ["pkg.mod", "thing", "run", "3", "abc"]),
    ("I will cancel reservation ZFA04Y for Mia now", "text", ["ZFA04Y", "Mia"]),
    ("ZFA04Y", "value", ["ZFA04Y"]),
])  # fmt: skip
def test_pieces_by_hand(text, kind, values):
    got_kind, got = pieces(text)
    assert got_kind == kind
    assert sorted(got) == sorted(values)


def test_unclosed_quote_and_bad_code_do_not_raise():
    assert pieces("grep 'foo src/") == ("shell", ["foo", "src/"])  # whitespace words
    assert kind_of("def func(:\n  pass") == "python"
    assert pieces("def func(:\n  pass") == ("python", ["func"])  # tokenize, not ast


@given(st.text(max_size=80))
def test_total_distinct_and_nonempty(text):
    """Any string: no exception, values distinct, each a non-blank piece of length >= 2 or a
    digit, and the program word of a one-command shell line never a value."""
    kind, values = pieces(text)
    assert len(values) == len(set(values)) or kind == "value"
    if kind != "value":
        assert all(v.strip() and (len(v) >= 2 or v.isdigit()) for v in values)
