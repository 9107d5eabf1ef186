"""The command line ends without its modules' teardown (memlens._util.exits.exit_now), but
after everything the interpreter's own exit would do that anyone can observe."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

SCRIPT = textwrap.dedent("""
    import atexit, sys, threading, time
    from pathlib import Path
    from memlens._util.exits import exit_now

    out = Path(sys.argv[1])
    atexit.register(lambda: out.with_suffix(".atexit").write_text("ran"))
    def late():
        time.sleep(0.3)
        out.with_suffix(".thread").write_text("done")
    threading.Thread(target=late).start()  # not a daemon: the exit waits for it
    log = open(out.with_suffix(".log"), "w")  # noqa: SIM115 - flushed by logging's atexit handler
    import logging
    handler = logging.StreamHandler(log)
    logging.getLogger("t").addHandler(handler)
    logging.getLogger("t").warning("kept")
    print("printed", end="")
    exit_now(CODE)
""")


@pytest.mark.parametrize(("code", "status"), [(0, 0), (3, 3), (None, 0), ("'a message'", 1)])
def test_exit_now_waits_runs_atexit_flushes_and_keeps_the_status(tmp_path, code, status):
    script = SCRIPT.replace("CODE", str(code))
    proc = subprocess.run([sys.executable, "-c", script, str(tmp_path / "x")],
                          capture_output=True, text=True)  # fmt: skip
    assert proc.returncode == status
    assert proc.stdout == "printed"
    assert (proc.stderr == "a message\n") == (status == 1)
    assert (tmp_path / "x.thread").read_text() == "done"
    assert (tmp_path / "x.atexit").read_text() == "ran"
    assert (tmp_path / "x.log").read_text() == "kept\n"


def test_the_command_line_keeps_its_exit_codes(tmp_path):
    """``python -m memlens`` (and the console script, the same ``run``): 0 for help, 2 for a
    bad setting, with its message."""
    ok = subprocess.run([sys.executable, "-m", "memlens", "--help"], capture_output=True,
                        text=True)  # fmt: skip
    assert ok.returncode == 0 and ok.stdout.startswith("usage: memlens")
    bad = subprocess.run([sys.executable, "-m", "memlens", "nosuchcommand"],
                         capture_output=True, text=True, cwd=tmp_path)  # fmt: skip
    assert bad.returncode == 2 and "unknown command 'nosuchcommand'" in bad.stderr


def test_a_profiled_command_keeps_its_profile(tmp_path):
    """Under ``python -m cProfile -o``, the command exits as Python does, so the profiler
    writes its file (``os._exit`` would skip it)."""
    out = tmp_path / "help.prof"
    proc = subprocess.run([sys.executable, "-m", "cProfile", "-o", str(out), "-m", "memlens",
                           "--help"], capture_output=True, text=True)  # fmt: skip
    assert proc.returncode == 0 and proc.stdout.startswith("usage: memlens")
    import pstats

    assert pstats.Stats(str(out)).total_calls > 0
