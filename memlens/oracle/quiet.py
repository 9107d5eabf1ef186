"""Keep HiGHS off the user's terminal: its C++ code writes to file descriptors 1 and 2.

scipy's ``milp`` and ``linprog`` run HiGHS with its log off, yet the MIP solver still prints
lines such as ``HighsMipSolverData::transformNewIntegerFeasibleSolution tmpSolver.run();``
straight from C++ (issue 34: 37 of them in one compare).  Python's ``sys.stdout`` never sees
them, so :func:`silenced` points the process's descriptors 1 and 2 at a log file (or
``/dev/null``) while the oracle solves, flushing C's buffers before it gives them back.  The
oracle runs in the main process between progress-bar updates, or in a worker process, so no
other output is hidden meanwhile.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import sys
from collections.abc import Iterator


def _flush_c() -> None:
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None).fflush(None)


@contextlib.contextmanager
def silenced(log: str | None = None) -> Iterator[None]:
    """Descriptors 1 and 2 go to ``log`` (appended; ``None``: discarded) inside the block."""
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(AttributeError, ValueError, OSError):
            stream.flush()
    try:
        target = os.open(log or os.devnull, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    except OSError as exc:
        raise OSError(f"oracle.solver_log: cannot write {log}: {exc.strerror}") from None
    saved = [os.dup(1), os.dup(2)]
    try:
        os.dup2(target, 1)
        os.dup2(target, 2)
        yield
    finally:
        _flush_c()
        os.dup2(saved[0], 1)
        os.dup2(saved[1], 2)
        for fd in (*saved, target):
            os.close(fd)
