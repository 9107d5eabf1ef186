"""Small builders for hand-written traces in tests (re-exported from ``memlens.testing``), and a
brute-force optimum that the oracle's bounds are checked against."""

from __future__ import annotations

import itertools
import os
import shutil
import subprocess
import sys
from pathlib import Path

from memlens.testing import annotate, pin, random_events, rq, trace, traces, unpin, w
from memlens.trace.model import PIN, REQUEST, UNPIN, WRITE

__all__ = [
    "MEMLENS",
    "Tick",
    "memlens",
    "annotate",
    "pin",
    "random_events",
    "rq",
    "trace",
    "traces",
    "unpin",
    "w",
]


def brute_force(t, budget: int, demand_fetch: bool) -> int:
    """Best hits of any schedule, by dynamic programming over resident sets, written from the
    class definition: after every event the resident unpinned set may be any subset of (what
    was resident + what may enter at this event) that fits ``max(0, budget - pinned)``; a need
    is a hit when any alternative is resident or pinned; with demand fetch, each need's first
    alternative may enter after the request (a superset of what the simulator allows: it
    fetches it only when no alternative is resident)."""
    tok = t.item_tokens.tolist()
    pinned: set[int] = set()
    states = {frozenset(): 0}

    def choose(states, extra, cap):
        out: dict[frozenset, int] = {}
        for s, h in states.items():
            cand = sorted(s | extra)
            for r in range(len(cand) + 1):
                for sub in itertools.combinations(cand, r):
                    if sum(tok[i] for i in sub) <= cap:
                        key = frozenset(sub)
                        out[key] = max(out.get(key, -1), h)
        return out

    for e in range(t.n_events):
        k, x = int(t.ev_kind[e]), int(t.ev_ref[e])
        cap = max(0, budget - sum(tok[i] for i in pinned))
        if k == WRITE:
            states = choose(states, {x} if tok[x] <= budget else set(), cap)
        elif k == REQUEST:
            lo, hi = int(t.needs_ptr[x]), int(t.needs_ptr[x + 1])
            groups = [set(t.alternatives(j).tolist()) for j in range(lo, hi)]
            states = {s: h + sum(bool(g & (s | pinned)) for g in groups)
                      for s, h in states.items()}  # fmt: skip
            first = {int(t.needs[j]) for j in range(lo, hi)}
            fetch = {i for i in first if tok[i] <= budget and i not in pinned}
            states = choose(states, fetch if demand_fetch else set(), cap)
        elif k == PIN and x not in pinned:
            pinned.add(x)
            cap = max(0, budget - sum(tok[i] for i in pinned))
            states = choose({s - {x}: h for s, h in states.items()}, set(), cap)
        elif k == UNPIN and x in pinned:
            pinned.discard(x)
            cap = max(0, budget - sum(tok[i] for i in pinned))
            states = choose(states, {x}, cap)
    return max(states.values())


# ------------------------------------------------ the installed command, as a user runs it
MEMLENS = shutil.which("memlens") or str(Path(sys.executable).parent / "memlens")


def memlens(*args: str, cwd: Path, check: bool = True) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONWARNINGS": "ignore"}
    proc = subprocess.run([MEMLENS, *args], cwd=cwd, capture_output=True, text=True, env=env)
    if check and proc.returncode != 0:
        raise AssertionError(f"memlens {' '.join(args)} failed:\n{proc.stdout}\n{proc.stderr}")
    return proc


class Tick:
    """A live manager's clock that reads 1, 2, 3, ... seconds (deterministic trace times)."""

    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        self.t += 1.0
        return self.t


class PartWay:
    """A live session played on a manager that is closed and reopened from its record before
    event ``split`` (the live tests' restart): :meth:`steps` gives each event of a trace, header
    dropped, with the manager to play it on; ``manager`` is the open one afterwards."""

    def __init__(self, manager, reopen, split: int) -> None:
        self.manager, self._reopen, self._split = manager, reopen, split

    def steps(self, events, clock=None):
        """``(k, event, manager)`` in order; ``clock.t`` set to each event's time if it has one."""
        for k, ev in enumerate(e for e in events if e["event"] != "header"):
            if k == self._split:
                self.manager.close()
                self.manager = self._reopen()
            if clock is not None:
                clock.t = ev.get("t", clock.t)
            yield k, ev, self.manager


def fresh_python(code: str) -> str:
    """What ``code`` prints when run in a new Python process (failing the test if it fails):
    for checks of what a process loads or compiles, which this one has done already."""
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          check=True)  # fmt: skip
    return proc.stdout


def generated_agent_trace(tmp_path_factory, streams: int, events_per_stream: int, seed: int):
    """A generated ``agent`` trace written to a temporary file and loaded back (so it is the
    packed, hashed trace a run reads), for the many-stream oracle tests."""
    from memlens.datasets.archetypes import generate

    from memlens.trace.io import load_trace, write_trace

    path = tmp_path_factory.mktemp("agent") / "agent.jsonl"
    write_trace(path, generate("agent", streams=streams, events_per_stream=events_per_stream,
                               seed=seed), header={"generator": "agent"})  # fmt: skip
    return load_trace(str(path))
