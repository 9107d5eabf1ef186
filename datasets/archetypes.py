"""Synthetic agent workloads with ground-truth needs: support, coding and analysis archetypes.

Each archetype simulates *episodes* (one agent task = one stream) and knows, by construction,
which earlier items every request needs.  Episodes are interleaved ``concurrency`` at a time
and a finished episode's state is dropped, so memory is bounded by ``concurrency x length``
whatever the total number of ``events``: ten million events stream to disk in constant memory.

Shared knobs (all archetypes):

``events``            total events to produce (the last episode is cut where the total is hit)
``length``            mean events per episode (each episode's length is drawn around it)
``concurrency``       episodes interleaved at once (streams active at the same time)
``request_share``     probability that a step is a request (the rest are writes)
``reuse_skew``        Zipf exponent for which items get reused (0 = uniform, larger = few hot)
``long_range_share``  share of a request's needs that reach back to long-lived items
``token_scale``       multiplies every item's mean token size
``token_sigma``       log-normal spread of token sizes (0 = every item of a kind the same size)
``pin_rate``          probability that a long-lived item is pinned when written (simulated user
                      pins; pins are released when the episode ends)

All randomness comes from one ``np.random.Generator(seed)`` drawn in blocks, so one seed is one
trace, byte for byte.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Iterator
from functools import lru_cache

import numpy as np

_BLOCK = 1 << 16


class Draws:
    """Scalar random numbers served from pre-drawn blocks (per-call numpy overhead is the
    bottleneck of a per-event generator; blocks make it ~20x cheaper and stay deterministic)."""

    def __init__(self, seed: int):
        self.rng = np.random.default_rng(seed)
        self._u: list[float] = []
        self._n: list[float] = []
        self._ui = self._ni = 0

    def u(self) -> float:
        if self._ui >= len(self._u):
            self._u = self.rng.random(_BLOCK).tolist()
            self._ui = 0
        self._ui += 1
        return self._u[self._ui - 1]

    def normal(self) -> float:
        if self._ni >= len(self._n):
            self._n = self.rng.standard_normal(_BLOCK).tolist()
            self._ni = 0
        self._ni += 1
        return self._n[self._ni - 1]

    def below(self, n: int) -> int:
        return min(n - 1, int(self.u() * n))

    def exp(self, mean: float) -> float:
        return -mean * math.log(1.0 - self.u())

    def tokens(self, mean: float, sigma: float) -> int:
        # log-normal with the requested *mean* (not median)
        return max(1, int(mean * math.exp(sigma * self.normal() - 0.5 * sigma * sigma)))


class Zipf:
    """Sampler of ranks ``0..n-1`` with P(rank k) proportional to ``1 / (k + 1) ** s``."""

    def __init__(self, n: int, s: float):
        w = 1.0 / np.arange(1, n + 1, dtype=np.float64) ** s
        self.cdf = (np.cumsum(w) / w.sum()).tolist()

    def __call__(self, d: Draws) -> int:
        return min(len(self.cdf) - 1, bisect.bisect_left(self.cdf, d.u()))


@lru_cache(maxsize=4096)
def _zipf(n: int, s: float) -> Zipf:
    return Zipf(n, s)


class Episode:
    """One stream's simulation.  Subclasses implement :meth:`step` (returns a list of events)."""

    prefix = "ep"

    def __init__(self, index: int, d: Draws, p: dict):
        self.d, self.p = d, p
        self.stream = f"{self.prefix}{index}"
        self.task = f"{self.prefix}-task{index}"
        self.k = 0
        self.t = 0.0
        self.length = max(8, int(p["length"] * (0.5 + d.u())))
        self.pinned: list[str] = []

    @property
    def done(self) -> bool:
        return self.k >= self.length

    def _tick(self) -> float:
        self.t = round(self.t + self.d.exp(20.0), 3)
        return self.t

    def write(self, ty: str, mean_tokens: float, text: str, **meta) -> tuple[str, dict]:
        ident = f"{self.stream}/{self.k}"
        self.k += 1
        ev = {"event": "write", "id": ident, "stream": self.stream, "t": self._tick(), "type": ty,
              "tokens": self.d.tokens(mean_tokens * self.p["token_scale"], self.p["token_sigma"]),
              "task": self.task, "text": text}  # fmt: skip
        if meta:
            ev["meta"] = meta
        return ident, ev

    def request(self, needs: list[str], text: str) -> dict:
        ident = f"{self.stream}/r{self.k}"
        self.k += 1
        return {"event": "request", "id": ident, "stream": self.stream, "t": self._tick(),
                "needs": list(dict.fromkeys(needs)), "text": text}  # fmt: skip

    def maybe_pin(self, ident: str) -> list[dict]:
        if self.p["pin_rate"] > 0 and self.d.u() < self.p["pin_rate"]:
            self.pinned.append(ident)
            self.k += 1
            return [{"event": "pin", "target": ident, "stream": self.stream, "t": self.t}]
        return []

    def release(self) -> list[dict]:
        """Unpin everything still pinned (the episode is over)."""
        out = [
            {"event": "unpin", "target": i, "stream": self.stream, "t": self.t} for i in self.pinned
        ]
        self.pinned = []
        return out

    def step(self) -> list[dict]:  # pragma: no cover - interface
        raise NotImplementedError


# --------------------------------------------------------------------------- support
class SupportEpisode(Episode):
    """Customer support: the user states constraints early (order number, budget, dates) and
    they are needed throughout; chit-chat turns are noise nobody needs again; account lookups
    (tool results) are needed by the next few requests."""

    prefix = "support"
    TOPICS = ("order", "refund", "delivery date", "budget", "address", "plan", "device", "account")

    def __init__(self, index, d, p):
        super().__init__(index, d, p)
        self.constraints: list[str] = []
        self.n_constraints = 2 + d.below(p["constraints"])
        self.recent: list[str] = []  # recent tool results and user asks (short-lived needs)
        self.zipf = _zipf(self.n_constraints, p["reuse_skew"])

    def step(self) -> list[dict]:
        d, p = self.d, self.p
        if len(self.constraints) < self.n_constraints:
            topic = self.TOPICS[d.below(len(self.TOPICS))]
            ident, ev = self.write("user_input", 40, f"constraint: my {topic} is #{d.below(99999)}",
                                   role="constraint")  # fmt: skip
            self.constraints.append(ident)
            return [ev, *self.maybe_pin(ident)]
        if self.recent and d.u() < p["request_share"]:
            needs = [self.recent[-1 - min(len(self.recent) - 1, int(d.exp(1.0)))]]
            if d.u() < p["long_range_share"]:
                needs.append(self.constraints[self.zipf(d)])
            return [self.request(needs, "answer the customer")]
        roll = d.u()
        if roll < p["noise_share"]:
            ty = "user_input" if d.u() < 0.5 else "llm_thought"
            _, ev = self.write(ty, 25, "thanks, that's great to hear!", role="chit-chat")
            return [ev]
        rest = (roll - p["noise_share"]) / max(1e-12, 1.0 - p["noise_share"])
        if rest < 0.45:
            ident, ev = self.write("tool_result", 250, "account lookup: status ok", role="lookup")
        elif rest < 0.85:
            ident, ev = self.write("user_input", 60, "can you check where my order is?", role="ask")
        else:
            ident, ev = self.write("agent_state", 50, "state: verified identity", role="state")
        self.recent.append(ident)
        if len(self.recent) > 8:
            self.recent.pop(0)
        return [ev]


# ---------------------------------------------------------------------------- coding
class CodingEpisode(Episode):
    """Coding assistant: file reads and test outputs reused with Zipf popularity; an edit of a
    file supersedes earlier reads of it (later needs point at the edit or a re-read)."""

    prefix = "coding"

    def __init__(self, index, d, p):
        super().__init__(index, d, p)
        self.n_files = max(2, p["files"])
        self.zipf = _zipf(self.n_files, p["reuse_skew"])
        self.perm = list(range(self.n_files))  # which file is hot differs per episode
        for i in range(self.n_files - 1, 0, -1):
            j = d.below(i + 1)
            self.perm[i], self.perm[j] = self.perm[j], self.perm[i]
        self.latest: dict[int, str] = {}  # file -> id of its current version (read or edit)
        self.test_out: str | None = None
        self.goal: str | None = None

    def step(self) -> list[dict]:
        d, p = self.d, self.p
        if self.goal is None:
            self.goal, ev = self.write("user_input", 80, "task: fix the failing test", role="goal")
            return [ev, *self.maybe_pin(self.goal)]
        f = self.perm[self.zipf(d)]
        if self.latest and d.u() < p["request_share"]:
            if f not in self.latest:
                f = next(iter(self.latest))
            needs = [self.latest[f]]
            if self.test_out is not None and d.u() < 0.5:
                needs.append(self.test_out)
            if d.u() < p["long_range_share"]:
                needs.append(self.goal)
            return [self.request(needs, f"change src/mod{f}.py")]
        roll = d.u()
        if roll < 0.45 or f not in self.latest:
            ident, ev = self.write("tool_result", 700, f"read src/mod{f}.py", role="read", file=f)
            self.latest[f] = ident
        elif roll < 0.6:
            ident, ev = self.write("tool_result", 300, "pytest: 1 failed", role="test")
            self.test_out = ident
        elif roll < 0.8:
            ident, ev = self.write("agent_state", 200, f"edit src/mod{f}.py", role="edit", file=f)
            self.latest[f] = ident  # supersedes every earlier read of f
        else:
            _, ev = self.write("llm_thought", 120, "plan: narrow down the bug", role="thought")
        return [ev]


# -------------------------------------------------------------------------- analysis
class AnalysisEpisode(Episode):
    """Data-analysis agent: long tool outputs (queries, tables); a few hold key numbers that
    are needed much later, when the report is written; the rest matter only briefly."""

    prefix = "analysis"

    def __init__(self, index, d, p):
        super().__init__(index, d, p)
        self.question: str | None = None
        self.keys: list[str] = []
        self.last_output: str | None = None
        self.report_from = int(self.length * (1.0 - p["report_share"]))

    def step(self) -> list[dict]:
        d, p = self.d, self.p
        if self.question is None:
            self.question, ev = self.write("user_input", 60, "question: why did revenue drop?",
                                           role="question")  # fmt: skip
            return [ev, *self.maybe_pin(self.question)]
        reporting = self.k >= self.report_from
        if self.last_output is not None and d.u() < p["request_share"] * (
            2.0 if reporting else 1.0
        ):
            needs = []
            if reporting and self.keys:
                # the report needs key numbers from long ago, skewed to the most important
                z = _zipf(len(self.keys), p["reuse_skew"])
                needs += [self.keys[z(d)] for _ in range(1 + d.below(3))]
            elif self.keys and d.u() < p["long_range_share"]:
                needs.append(self.keys[d.below(len(self.keys))])
            else:
                needs.append(self.last_output)
            if d.u() < 0.2:
                needs.append(self.question)
            return [self.request(needs, "write the summary" if reporting else "next query")]
        roll = d.u()
        if roll < 0.55:
            key = d.u() < p["key_share"]
            ident, ev = self.write("tool_result", 1500, "query result: 2,000 rows",
                                   role="key-output" if key else "output")  # fmt: skip
            self.last_output = ident
            if key:
                self.keys.append(ident)
                return [ev, *self.maybe_pin(ident)]
            return [ev]
        if roll < 0.8:
            _, ev = self.write("llm_thought", 150, "plan: group by region", role="thought")
        else:
            _, ev = self.write("agent_state", 60, "note: drop is in Q3", role="note")
        return [ev]


ARCHETYPES = {"support": SupportEpisode, "coding": CodingEpisode, "analysis": AnalysisEpisode}
COMMON = {
    "events": 10_000, "length": 400, "concurrency": 4, "request_share": 0.3, "reuse_skew": 1.1,
    "long_range_share": 0.3, "token_scale": 1.0, "token_sigma": 0.5, "pin_rate": 0.0,
}  # fmt: skip
SPECIFIC = {
    "support": {"constraints": 4, "noise_share": 0.3},
    "coding": {"files": 30},
    "analysis": {"key_share": 0.1, "report_share": 0.2},
}


def generate(archetype: str, seed: int = 0, **knobs) -> Iterator[dict]:
    """Yield the events of a synthetic ``archetype`` trace (see module docstring for knobs)."""
    if archetype not in ARCHETYPES:
        raise ValueError(f"unknown archetype {archetype!r} ({', '.join(ARCHETYPES)})")
    p = {**COMMON, **SPECIFIC[archetype]}
    unknown = set(knobs) - set(p)
    if unknown:
        raise ValueError(
            f"unknown knob(s) for archetype {archetype!r}: {', '.join(sorted(unknown))} "
            f"(known: {', '.join(sorted(p))})"
        )
    p.update(knobs)
    for name in ("events", "length", "concurrency", "constraints", "files"):
        if name in p:
            p[name] = int(p[name])  # "events=1e7" on a command line arrives as a float
    for name in ("request_share", "long_range_share", "pin_rate"):
        if not 0.0 <= float(p[name]) <= 1.0:
            raise ValueError(f"{name} must be in [0, 1], got {p[name]!r}")
    for name in ("events", "length", "concurrency"):
        if int(p[name]) < 1:
            raise ValueError(f"{name} must be >= 1, got {p[name]!r}")
    if p["reuse_skew"] < 0 or p["token_scale"] <= 0 or p["token_sigma"] < 0:
        raise ValueError("reuse_skew and token_sigma must be >= 0 and token_scale > 0")
    return _run(ARCHETYPES[archetype], int(seed), p)


def _run(cls, seed: int, p: dict) -> Iterator[dict]:
    d = Draws(seed)
    total = int(p["events"])
    active: list[Episode] = []
    started = n = 0
    while n < total:
        while len(active) < p["concurrency"]:
            active.append(cls(started, d, p))
            started += 1
        ep = active[d.below(len(active))]
        batch = ep.step()
        if ep.done:
            batch += ep.release()
            active.remove(ep)
        for ev in batch:
            if ev["event"] == "unpin" or n < total:
                yield ev
                n += ev["event"] != "unpin"
    for ep in active:  # the cut-off episodes release their pins too
        yield from ep.release()


def make_generator(archetype: str):
    """A ``generate(seed=..., **knobs)`` callable for the ``memlens data generate`` registry."""

    def gen(seed: int = 0, **knobs) -> Iterator[dict]:
        return generate(archetype, seed=seed, **knobs)

    gen.__name__ = f"generate_{archetype}"
    gen.__doc__ = (ARCHETYPES[archetype].__doc__ or "").strip()
    return gen
