"""Functions that fit on a screen: none over 80 lines in memlens/ or policies/ without a reason.

A longer function must say why in its docstring, with the words "long because".
"""

from __future__ import annotations

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
LIMIT = 80


def long_functions(root: Path) -> list[str]:
    found = []
    for path in sorted(root.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            length = node.end_lineno - node.lineno + 1
            doc = ast.get_docstring(node) or ""
            if length > LIMIT and "long because" not in doc:
                found.append(f"{path.relative_to(REPO)}:{node.lineno} {node.name} ({length} lines)")
    return found


def test_no_function_is_over_80_lines_without_a_reason():
    found = long_functions(REPO / "memlens") + long_functions(REPO / "policies")
    assert not found, "split these (or say 'long because ...' in the docstring):\n" + "\n".join(
        found
    )


def test_the_check_finds_a_long_function(tmp_path):
    body = "\n".join(f"    x{i} = {i}" for i in range(LIMIT + 1))
    (tmp_path / "m.py").write_text(f"def f():\n{body}\n\n\ndef g():\n    return 1\n")
    global REPO
    saved, REPO = REPO, tmp_path
    try:
        assert [s.split(" ")[1] for s in long_functions(tmp_path)] == ["f"]
    finally:
        REPO = saved
