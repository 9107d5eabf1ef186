"""Provenance: the item that introduced a value is its source; repeats are alternatives; an
assistant's repeat is never the sole source; commands in arguments are traced by their parts."""

from __future__ import annotations

from memlens.datasets.needs_derivation import (
    Deriver,
    Earlier,
    NeedsSettings,
    Step,
    args_needs,
)
from memlens.datasets.openai_import import untraced_warning

LOG = [
    Earlier("u0", "Please look at the crash in the parser."),
    Earlier("t1", "src/parse.py\nsrc/util.py\nREADME.md"),  # a listing (tool output)
    Earlier("a2", "Let me open src/parse.py first.", assistant=True),  # a repeat
    Earlier("t3", "src/parse.py:120: def tokenize_line(text):"),  # a grep result
    Earlier("u4", "Also the file src/parse.py is old."),  # the user repeats it too
]


def _derive(method, text, earlier, args=(), **kw):
    d = Deriver(NeedsSettings(method=method, **kw), [e.text for e in earlier], [text])
    return d.derive(Step(text, list(args), row=0), earlier, list(range(len(earlier))))


def test_introducer_first_repeats_alternatives():
    res = args_needs([{"path": "src/parse.py"}], LOG, "alternatives")
    assert res.needs == [["t1", "a2", "t3", "u4"]]  # introducer first, every repeat after
    assert args_needs([{"path": "src/parse.py"}], LOG, "first").needs == ["t1"]
    # the latest holder that is not an assistant's repeat
    assert args_needs([{"path": "src/parse.py"}], LOG, "last").needs == ["u4"]
    assert args_needs([{"path": "src/parse.py"}], LOG[:3], "last").needs == ["t1"]  # not a2
    assert res.sources == [{"values": ["src/parse.py"], "need": ["t1", "a2", "t3", "u4"]}]


def test_shell_command_traced_by_its_parts():
    """``open src/parse.py 120``: no item holds the command, so its path and its line number
    are the values; 120 was introduced by the grep result alone."""
    res = args_needs([{"command": "open src/parse.py 120"}], LOG, "first")
    assert res.values == 2 and res.found == 2 and res.unmatched == []
    assert res.needs == ["t1", "t3"]
    assert [s["values"] for s in res.sources] == [["src/parse.py"], ["120"]]


def test_path_found_by_file_name_and_untraced_counted():
    log = [Earlier("t0", "parse.py  util.py")]
    res = args_needs([{"command": "cat src/parse.py nowhere.txt"}], log, "first")
    assert res.needs == ["t0"]  # ls showed parse.py, the call says src/parse.py
    assert res.values == 2 and res.unmatched == ["command:shell"]


def test_lexical_assistant_repeat_becomes_group():
    """The assistant turn a2 is the best lexical match of a step that mentions the parse.py
    file, but everything a2 shares with the step, t1 introduced: a2 is never the sole source."""
    log = [Earlier("t1", "src/parse.py has 300 lines of code in total"),
           Earlier("a2", "parse.py next", assistant=True)]  # fmt: skip
    res = _derive("bm25", "cat parse.py", log, bm25_top_k=1)
    assert res.needs == [["t1", "a2"]]
    assert res.sources == [{"values": ["parse.py"], "need": ["t1", "a2"]}]
    # an assistant item that introduced a value itself stays the source
    log2 = [Earlier("t1", "nothing relevant here"),
            Earlier("a2", "I will write helper_v2.py and look", assistant=True)]  # fmt: skip
    assert _derive("bm25", "run helper_v2.py", log2).needs == ["a2"]


def test_untraced_warning_only_above_a_fifth():
    head = {"report": {"argument_values": 10, "values_unmatched": 2}}
    assert untraced_warning(head) is None
    head = {"report": {"argument_values": 10, "values_unmatched": 3},
            "untraced_by_tool": {"bash": 2, "edit": 1}}  # fmt: skip
    line = untraced_warning(head)
    assert line.startswith("warning: 3 of 10") and "bash 2, edit 1" in line and "30%" in line
