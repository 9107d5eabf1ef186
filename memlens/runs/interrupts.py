"""SIGTERM and SIGINT while a run is active: an exception, so that every record is closed.

Python's default for SIGTERM is to die on the spot: the MLflow run stays RUNNING forever and a
half-written run folder stays behind.  Inside :func:`interruptible` both signals raise
:class:`Interrupted` in the main thread instead; it unwinds through the run's context managers
(the MLflow run ends as KILLED, the staged run folder is dropped, see ``memlens.runs.writers``) and
the process exits with the shell's convention, 128 + the signal number (130 for SIGINT, 143
for SIGTERM).  Inside a call into MLflow or a folder swap (:func:`signals_held`) the signal
waits until the call returns, so a SQLite session is never left half-done holding its lock.
A second signal while a call or the cleanup runs ends the process at once (it could be waiting
on an unreachable tracking server).  kill -9 cannot be caught at all, which is why the next
start ends runs left RUNNING by dead processes (``memlens.runs.mlflow_store``).
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
from collections.abc import Iterator

SIGNALS = (signal.SIGTERM, signal.SIGINT)


class Interrupted(KeyboardInterrupt):
    """A stop signal arrived; a KeyboardInterrupt so code that handles Ctrl-C handles it too."""

    def __init__(self, signum: int):
        super().__init__(signal.Signals(signum).name)
        self.signum = signum

    @property
    def exit_code(self) -> int:
        return 128 + self.signum


_held: dict[str, int | None] = {"depth": 0, "pending": None}


def _raise(signum: int, frame) -> None:
    if _held["depth"]:
        if _held["pending"] is not None:  # a second signal: no more waiting
            os._exit(128 + signum)
        _held["pending"] = signum  # raised when the held block is done
        return
    for sig in SIGNALS:  # a second signal during the cleanup: no more waiting
        signal.signal(sig, lambda s, f: os._exit(128 + s))
    raise Interrupted(signum)


@contextlib.contextmanager
def interruptible() -> Iterator[None]:
    """SIGTERM/SIGINT raise :class:`Interrupted` inside; it leaves as ``SystemExit(128+n)``.

    Outside the main thread (where Python cannot install handlers) this does nothing.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {sig: signal.signal(sig, _raise) for sig in SIGNALS}
    try:
        yield
    except Interrupted as exc:
        print(f"error: interrupted by {exc.args[0]}", file=sys.stderr)
        raise SystemExit(exc.exit_code) from None
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


@contextlib.contextmanager
def signals_held() -> Iterator[None]:
    """Delay a SIGTERM/SIGINT caught by :func:`interruptible` until the block is done: a call
    into MLflow (stopped halfway, it would leave a database session holding its lock) or the
    renames that swap a run folder in.  A second signal meanwhile ends the process at once."""
    _held["depth"] += 1
    try:
        yield
    finally:
        _held["depth"] -= 1
        if not _held["depth"] and _held["pending"] is not None:
            pending, _held["pending"] = _held["pending"], None
            _raise(pending, None)
