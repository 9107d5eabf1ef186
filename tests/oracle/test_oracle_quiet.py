"""The solver's C-level output stays off the terminal (issue 34), and its log can be kept."""

from __future__ import annotations

import subprocess
import sys
import textwrap


def _run(log: str | None) -> subprocess.CompletedProcess:
    # a child process: what C code writes to descriptor 1 is what the terminal would show
    code = textwrap.dedent(f"""
        import ctypes, os
        from memlens.oracle.quiet import silenced
        libc = ctypes.CDLL(None)
        print("before", flush=True)
        with silenced({log!r}):
            libc.printf(b"from C printf\\n")  # buffered in C's stdout: flushed on the way out
            os.write(2, b"from fd 2\\n")
            print("from python")
        print("after", flush=True)
    """)
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          check=True)  # fmt: skip


def test_solver_output_is_discarded_by_default():
    out = _run(None)
    assert out.stdout.split() == ["before", "after"]
    assert out.stderr == ""


def test_solver_output_goes_to_the_log_when_asked(tmp_path):
    log = tmp_path / "solver.log"
    out = _run(str(log))
    assert out.stdout.split() == ["before", "after"]
    assert sorted(log.read_text().splitlines()) == ["from C printf", "from fd 2", "from python"]
