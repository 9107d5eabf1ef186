"""Who left this behind, and is it still running?  A process named by host, pid and start time.

A run that is killed with kill -9 cannot clean up after itself: its MLflow run stays RUNNING and
its staging folder stays on disk.  The next start cleans up only what a *dead* process left,
never the work of a run still going: the leftovers carry the host, the pid and the pid's start
time (a pid is reused after a while; its start time tells the new process from the old one).
"""

from __future__ import annotations

import os
import socket
from dataclasses import dataclass


def start_time(pid: int) -> str | None:
    """The process's start time in clock ticks since boot (Linux ``/proc``), or None."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            fields = f.read().rsplit(b")", 1)[1].split()
    except (OSError, IndexError):
        return None
    if fields[0] == b"Z":  # a zombie has finished; only its parent has not collected it yet
        return "zombie"
    return fields[19].decode()  # field 22 of stat(5); fields[0] is field 3


@dataclass(frozen=True)
class Process:
    host: str
    pid: int
    started: str | None = None

    @classmethod
    def current(cls) -> Process:
        return cls(socket.gethostname(), os.getpid(), start_time(os.getpid()))

    def is_local(self) -> bool:
        return self.host == socket.gethostname()

    def is_dead(self) -> bool:
        """True only when sure: a process of this host that no longer runs (False when unsure)."""
        if not self.is_local():
            return False
        try:
            os.kill(self.pid, 0)
        except ProcessLookupError:
            return True
        except PermissionError:
            pass  # it exists, under another user
        now = start_time(self.pid)
        if now == "zombie":
            return True
        return self.started is not None and now is not None and now != self.started
