"""Synthetic agent workloads with ground-truth needs: support, coding and analysis archetypes.

Each archetype simulates *episodes* (one agent task = one stream) and knows, by construction,
which earlier items every request needs.  Episodes are interleaved ``concurrency`` at a time
and a finished episode's state is dropped, so memory is bounded by ``concurrency x length``
whatever the total number of events: ten million events stream to disk in constant memory.

Every archetype's knobs are a dataclass (:class:`ArchetypeKnobs` and one subclass per
archetype; each knob's default, meaning and range are declared once, there): the common
``seed``, ``streams`` and ``events_per_stream`` of every generator (the trace has
``streams x events_per_stream`` events; episode lengths vary around ``events_per_stream``, so
the number of streams is about ``streams``), the knobs all three share (``concurrency``,
``request_share``, ``reuse_skew``, ``long_range_share``, ``token_scale``, ``token_sigma``,
``pin_rate``) and the archetype's own.  :data:`GENERATORS` maps every generator's name,
``simple`` included, to its knobs class; :func:`generate` is the one-call entry point.

All randomness comes from one ``np.random.Generator(seed)`` drawn in blocks, so one seed is one
trace, byte for byte.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Iterator
from dataclasses import dataclass
from functools import lru_cache
from typing import ClassVar

import numpy as np

from memlens.generate import (
    AT_LEAST_0,
    AT_LEAST_1,
    SHARE,
    TOKEN_SIGMA,
    GeneratorKnobs,
    Range,
    SimpleKnobs,
    knob,
)

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

    def __init__(self, index: int, d: Draws, p: ArchetypeKnobs):
        self.d, self.p = d, p
        self.stream = f"{self.prefix}{index}"
        self.task = f"{self.prefix}-task{index}"
        self.k = 0
        self.t = 0.0
        self.length = max(8, int(p.events_per_stream * (0.5 + d.u())))
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
              "tokens": self.d.tokens(mean_tokens * self.p.token_scale, self.p.token_sigma),
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
        if self.p.pin_rate > 0 and self.d.u() < self.p.pin_rate:
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
        self.n_constraints = 2 + d.below(p.constraints)
        self.recent: list[str] = []  # recent tool results and user asks (short-lived needs)
        self.zipf = _zipf(self.n_constraints, p.reuse_skew)

    def step(self) -> list[dict]:
        d, p = self.d, self.p
        if len(self.constraints) < self.n_constraints:
            topic = self.TOPICS[d.below(len(self.TOPICS))]
            ident, ev = self.write("user_input", 40, f"constraint: my {topic} is #{d.below(99999)}",
                                   role="constraint")  # fmt: skip
            self.constraints.append(ident)
            return [ev, *self.maybe_pin(ident)]
        if self.recent and d.u() < p.request_share:
            needs = [self.recent[-1 - min(len(self.recent) - 1, int(d.exp(1.0)))]]
            if d.u() < p.long_range_share:
                needs.append(self.constraints[self.zipf(d)])
            return [self.request(needs, "answer the customer")]
        roll = d.u()
        if roll < p.noise_share:
            ty = "user_input" if d.u() < 0.5 else "llm_thought"
            _, ev = self.write(ty, 25, "thanks, that's great to hear!", role="chit-chat")
            return [ev]
        rest = (roll - p.noise_share) / max(1e-12, 1.0 - p.noise_share)
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
        self.n_files = max(2, p.files)
        self.zipf = _zipf(self.n_files, p.reuse_skew)
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
        if self.latest and d.u() < p.request_share:
            if f not in self.latest:
                f = next(iter(self.latest))
            needs = [self.latest[f]]
            if self.test_out is not None and d.u() < 0.5:
                needs.append(self.test_out)
            if d.u() < p.long_range_share:
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
        self.report_from = int(self.length * (1.0 - p.report_share))

    def step(self) -> list[dict]:
        d, p = self.d, self.p
        if self.question is None:
            self.question, ev = self.write("user_input", 60, "question: why did revenue drop?",
                                           role="question")  # fmt: skip
            return [ev, *self.maybe_pin(self.question)]
        reporting = self.k >= self.report_from
        if self.last_output is not None and d.u() < p.request_share * (2.0 if reporting else 1.0):
            needs = []
            if reporting and self.keys:
                # the report needs key numbers from long ago, skewed to the most important
                z = _zipf(len(self.keys), p.reuse_skew)
                needs += [self.keys[z(d)] for _ in range(1 + d.below(3))]
            elif self.keys and d.u() < p.long_range_share:
                needs.append(self.keys[d.below(len(self.keys))])
            else:
                needs.append(self.last_output)
            if d.u() < 0.2:
                needs.append(self.question)
            return [self.request(needs, "write the summary" if reporting else "next query")]
        roll = d.u()
        if roll < 0.55:
            key = d.u() < p.key_share
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


# ----------------------------------------------------------------------------- knobs
@dataclass
class ArchetypeKnobs(GeneratorKnobs):
    """Knobs of every episodic archetype (each archetype adds its own)."""

    episode: ClassVar[type[Episode]]

    streams: int = knob(
        25, "episodes, one stream each (about: lengths vary, the last ones are cut)", AT_LEAST_1
    )
    events_per_stream: int = knob(
        400, "mean episode length (drawn in 0.5x-1.5x); trace = streams x this", AT_LEAST_1
    )
    concurrency: int = knob(4, "episodes interleaved at once", AT_LEAST_1)
    request_share: float = knob(0.3, "probability that a step is a request (else a write)", SHARE)
    reuse_skew: float = knob(
        1.1, "Zipf exponent of which items are reused (0 = uniform, larger = few hot)", AT_LEAST_0
    )
    long_range_share: float = knob(0.3, "share of needs that reach back to long-lived items", SHARE)
    token_scale: float = knob(
        1.0, "multiplies every item's mean token size", Range(0, 1000, lo_open=True)
    )
    token_sigma: float = knob(
        0.5, "log-normal spread of token sizes (0 = one size per kind of item)", TOKEN_SIGMA
    )
    pin_rate: float = knob(
        0.0, "probability a long-lived item is pinned when written (till episode end)",
        SHARE,
    )  # fmt: skip

    def events(self) -> Iterator[dict]:
        return _run(self)


@dataclass
class SupportKnobs(ArchetypeKnobs):
    """customer support: early constraints needed throughout, chit-chat, lookups"""

    episode = SupportEpisode
    constraints: int = knob(4, "an episode states 2 to constraints+1 user constraints", AT_LEAST_1)
    noise_share: float = knob(0.3, "share of writes that are chit-chat nobody needs again", SHARE)


@dataclass
class CodingKnobs(ArchetypeKnobs):
    """coding assistant: reads and test outputs reused (Zipf), edits supersede reads"""

    episode = CodingEpisode
    files: int = knob(30, "files in the repository (at least 2 are used)", AT_LEAST_1)


@dataclass
class AnalysisKnobs(ArchetypeKnobs):
    """data analysis: long query outputs, key numbers needed late (in the report)"""

    episode = AnalysisEpisode
    key_share: float = knob(0.1, "share of query outputs that hold key numbers", SHARE)
    report_share: float = knob(0.2, "final share of an episode spent writing the report", SHARE)


ARCHETYPES: dict[str, type[ArchetypeKnobs]] = {
    "support": SupportKnobs,
    "coding": CodingKnobs,
    "analysis": AnalysisKnobs,
}
GENERATORS: dict[str, type[GeneratorKnobs]] = {"simple": SimpleKnobs, **ARCHETYPES}


def generate(archetype: str, **knobs) -> Iterator[dict]:
    """Yield the events of a synthetic ``archetype`` trace (any of :data:`GENERATORS`)."""
    if archetype not in GENERATORS:
        raise ValueError(f"unknown archetype {archetype!r} ({', '.join(GENERATORS)})")
    return GENERATORS[archetype].make(**knobs).events()


def _run(p: ArchetypeKnobs) -> Iterator[dict]:
    d = Draws(p.seed)
    total = p.streams * p.events_per_stream
    active: list[Episode] = []
    started = n = 0
    while n < total:
        while len(active) < p.concurrency:
            active.append(p.episode(started, d, p))
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
