"""End the ``memlens`` process without tearing its modules down.

A command's work is done when its files are written; what Python does after that (freeing
every module: numba's and LLVM's state, Hydra's, the thousand modules a run imports) took
0.35 s of every command, measured on a 5,800-stream ``compare`` (0.2 s for numba alone).
:func:`exit_now` does what the interpreter does at exit that anyone could observe, in its
order, and then ends the process: it waits for the threads still running (``threading``'s
own shutdown, which also joins the worker pool's manager thread), runs the ``atexit``
handlers (logging's flush and close, MLflow's, ``weakref.finalize``'s), flushes standard
output and error, and exits with the code ``sys.exit`` would give.  Only the command line
calls it (:func:`memlens.cli.main.run`): ``main`` itself, which tests call in process,
returns as before.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import sys
import threading


def exit_code(code: object) -> int:
    """The status ``sys.exit(code)`` gives (a message is printed to stderr: status 1)."""
    if code is None:
        return 0
    if isinstance(code, int):
        return code
    print(code, file=sys.stderr)
    return 1


def watched() -> bool:
    """Whether a profiler, tracer or debugger is attached (``sys.setprofile``/``settrace``):
    such a tool writes what it gathered after the program returns, which ``os._exit`` would
    skip (``python -m cProfile -o out -m memlens ...`` left no ``out``)."""
    return sys.getprofile() is not None or sys.gettrace() is not None


def exit_now(code: object = 0) -> None:
    """Wait for threads, run ``atexit`` handlers, flush, and end with ``exit_code(code)``."""
    os._exit(wound_down(code))


def wound_down(code: object = 0) -> int:
    """What :func:`exit_now` does before the process ends (threads, ``atexit`` handlers,
    flushes); returns the status to end with."""
    status = exit_code(code)
    _flush()
    shutdown = getattr(threading, "_shutdown", None)  # the interpreter's own first step
    if shutdown is not None:
        shutdown()
    atexit._run_exitfuncs()
    _flush()
    return status


def _flush() -> None:
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):  # a closed pipe: nothing left to say
            stream.flush()
