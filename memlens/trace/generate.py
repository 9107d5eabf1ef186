"""Generator knobs (typed, documented, range-checked) and the ``simple`` synthetic archetype.

Every generator is a dataclass of *knobs*: the common ``seed``, ``streams`` and
``events_per_stream`` (:class:`GeneratorKnobs`) plus its own.  Each knob is declared once, with
:func:`knob`: its default, a one-line meaning (shown by ``memlens data generate --help``) and
the range it must lie in (checked when the knobs are built, from Python or from the command
line, where Hydra has already checked names and types).  ``knobs.events()`` yields the trace.

The ``simple`` archetype produces interleaved streams of writes of all four item types and
requests whose needs mix recent items (recency-skewed) with long-range ones, plus occasional
pins; every need is ground truth by construction.  The richer archetypes (support, coding,
data analysis) live in ``memlens.datasets.archetypes``; this one is small and fast enough to
build the bundled default trace and the speed benchmarks.

All randomness flows from one ``np.random.Generator`` seeded by ``seed``, so a seed is a trace.
"""

from __future__ import annotations

import math
import typing
from array import array
from collections.abc import Iterator
from dataclasses import dataclass, field, fields
from functools import cache

import numpy as np

from memlens.trace.model import ITEM_TYPES


@dataclass(frozen=True)
class Range:
    """The values a numeric knob may take: ``lo``..``hi``, each end closed unless ``*_open``."""

    lo: float = -math.inf
    hi: float = math.inf
    lo_open: bool = False
    hi_open: bool = False

    def __contains__(self, v: float) -> bool:
        above = v > self.lo if self.lo_open else v >= self.lo
        below = v < self.hi if self.hi_open else v <= self.hi
        return above and below

    def __str__(self) -> str:
        if self.hi == math.inf:
            return f"{'>' if self.lo_open else '>='} {self.lo:g}"
        return f"in {'(' if self.lo_open else '['}{self.lo:g}, {self.hi:g}{')' if self.hi_open else ']'}"


AT_LEAST_0, AT_LEAST_1 = Range(0), Range(1)
# A log-normal spread above 3 draws items of billions of tokens (beyond the trace format's
# 2**31 - 1): refused as a knob value rather than failing mid-generation.
TOKEN_SIGMA = Range(0, 3)
POSITIVE, SHARE = Range(0, lo_open=True), Range(0, 1)


def knob(default, meaning: str, valid: Range | None = None):
    """A dataclass field with a default, a one-line ``meaning`` and the ``valid`` range."""
    return field(default=default, metadata={"help": meaning, "valid": valid})


_KINDS = {int: "an integer", float: "a number", bool: "true or false"}


@cache
def _types(cls: type) -> dict[str, type]:
    return typing.get_type_hints(cls)


def check_knobs(obj) -> None:
    """Check (and, int -> float, coerce) every knob of dataclass ``obj`` against its type and
    range; raise ``ValueError`` naming the first bad one."""
    types = _types(type(obj))
    for f in fields(obj):
        value, want = getattr(obj, f.name), types[f.name]
        if want is float and isinstance(value, int) and not isinstance(value, bool):
            value = float(value)
            object.__setattr__(obj, f.name, value)
        if want in (int, float, bool) and (
            not isinstance(value, want) or (want is not bool and isinstance(value, bool))
        ):
            raise ValueError(f"{f.name} must be {_KINDS[want]}, got {value!r}")
        if want is float and not math.isfinite(value):  # before the range: say what is wrong
            raise ValueError(f"{f.name} must be a finite number, got {value}")
        valid = f.metadata.get("valid")
        if valid is not None and value not in valid:
            raise ValueError(f"{f.name} must be {valid}, got {value!r}")


@dataclass
class GeneratorKnobs:
    """Knobs every generator accepts (subclasses change defaults and meanings, add their own)."""

    seed: int = knob(0, "seed of the one random generator: same knobs, same trace", AT_LEAST_0)
    streams: int = knob(4, "number of streams", AT_LEAST_1)
    events_per_stream: int = knob(500, "events per stream", AT_LEAST_1)

    def __post_init__(self) -> None:
        check_knobs(self)

    @classmethod
    def make(cls, **knobs) -> GeneratorKnobs:
        """``cls(**knobs)``, with a ``ValueError`` listing the known knobs for an unknown one."""
        known = [f.name for f in fields(cls)]
        unknown = sorted(set(knobs) - set(known))
        if unknown:
            raise ValueError(f"unknown knob(s) {', '.join(unknown)} (known: {', '.join(known)})")
        return cls(**knobs)

    def recorded(self) -> dict:
        """What a trace header records: the common knobs and every knob set off its default
        (regenerating with exactly these reproduces the trace, header included)."""
        common = {f.name for f in fields(GeneratorKnobs)}
        return {
            f.name: getattr(self, f.name)
            for f in fields(self)
            if f.name in common or getattr(self, f.name) != f.default
        }

    def events(self) -> Iterator[dict]:  # pragma: no cover - interface
        raise NotImplementedError


TYPE_WEIGHTS = (0.2, 0.3, 0.35, 0.15)  # user_input, llm_thought, tool_result, agent_state
MEAN_TOKENS = (60, 120, 400, 80)
TOPICS = (
    "invoice refund shipping order account password flight booking baggage seat payment "
    "database query schema index error timeout retry config deploy test build cache memory "
    "report chart revenue forecast customer region quarter budget latency user session"
).split()
CONTENT = {
    "user_input": ("please", "I need", "can you", "my", "constraint:"),
    "llm_thought": ("maybe", "let me think", "perhaps", "plan:", "next I will"),
    "tool_result": ("result:", "returned", "error: failed", "rows", "status"),
    "agent_state": ("state:", "step", "goal", "final answer", "conclusion:"),
}


@dataclass
class SimpleKnobs(GeneratorKnobs):
    """interleaved generic agent streams (builds the bundled default trace)"""

    streams: int = knob(4, "streams, interleaved event by event", AT_LEAST_1)
    events_per_stream: int = knob(
        500, "events in every stream (the trace has streams x events_per_stream)", AT_LEAST_1
    )
    request_share: float = knob(
        0.3,
        "probability that an event is a request (else a write, pin or unpin)",
        Range(0, 1, hi_open=True),
    )
    max_needs: int = knob(3, "a request needs 1 to max_needs earlier items", AT_LEAST_1)
    long_range_share: float = knob(
        0.2, "probability that a need is any earlier item (else a recent one)", SHARE
    )
    recency_p: float = knob(
        0.15, "geometric p of how far back a recent need is (larger = more recent)",
        Range(0, 1, lo_open=True),
    )  # fmt: skip
    pin_rate: float = knob(
        0.004, "probability that an event pins a user input or unpins one", SHARE
    )
    max_pins: int = knob(2, "user inputs pinned at once per stream (at most)", AT_LEAST_1)
    token_sigma: float = knob(0.6, "log-normal spread of item token sizes", TOKEN_SIGMA)

    def events(self) -> Iterator[dict]:
        return _simple_events(self)


def generate_simple(**knobs) -> Iterator[dict]:
    """Yield the events (dicts in trace format v1) of a ``simple`` trace (knobs: SimpleKnobs).

    Pins go to user inputs (at most ``max_pins`` held per stream), as a person would pin a
    stated constraint.
    """
    return SimpleKnobs.make(**knobs).events()


def _simple_events(k: SimpleKnobs) -> Iterator[dict]:
    """The ``simple`` generator's loop: one sequence of random draws (their order is the trace).

    A need may be any earlier item of its stream, so the generator remembers every item, but
    compactly (``_SimpleStream``: a few bytes per item, no Python object per event), and yields
    each event as it is drawn: nine million events take tens of MB, not gigabytes.
    """
    streams, request_share, pin_rate, max_pins = k.streams, k.request_share, k.pin_rate, k.max_pins
    rng = np.random.default_rng(k.seed)
    code = "i" if k.events_per_stream < 2**31 else "q"  # counters fit int32: 4 bytes each
    state = [_SimpleStream(f"s{s}", code) for s in range(streams)]
    clock = np.zeros(streams)
    for n in range(streams * k.events_per_stream):
        s = n % streams
        st = state[s]
        clock[s] += float(rng.exponential(30.0))
        t = round(float(clock[s]), 3)
        c = st.counter
        st.counter += 1
        roll = rng.random()
        if st.written and roll < pin_rate:
            event = _simple_pin(st, rng, max_pins, t)
            if event is not None:
                yield event
            continue
        if st.written and roll < pin_rate + request_share:
            yield _simple_request(st, k, rng, c, t)
            continue
        yield _simple_write(st, k, rng, c, t)


class _SimpleStream:
    """One stream's memory in the ``simple`` generator: for every item written so far its
    event counter (its id is ``<stream>-m<counter>``) and its two topic words (as indices into
    TOPICS); the counters of its user inputs; the user inputs pinned now."""

    def __init__(self, name: str, code: str = "q"):
        self.name = name
        self.counter = 0
        self.written = array(code)  # counter of every item, in write order
        self.topics = array("B")  # two TOPICS indices per item
        self.user_inputs = array(code)  # counters of the user inputs (pins go to them)
        self.pinned: list[str] = []

    def item(self, j: int) -> str:
        return f"{self.name}-m{self.written[j]}"


def _simple_pin(st: _SimpleStream, rng, max_pins: int, t: float) -> dict | None:
    """A pin of a random user input, or an unpin of the oldest pin (None: nothing to do)."""
    pinned = st.pinned
    if pinned and (len(pinned) >= max_pins or rng.random() < 0.5):
        return {"event": "unpin", "target": pinned.pop(0), "t": t}
    users = st.user_inputs
    target = f"{st.name}-m{users[int(rng.integers(len(users)))]}" if users else None
    if target is not None and target not in pinned:
        pinned.append(target)
        return {"event": "pin", "target": target, "t": t}
    return None


def _simple_request(st: _SimpleStream, k: SimpleKnobs, rng, c: int, t: float) -> dict:
    n_have = len(st.written)
    picks = []
    for _ in range(int(rng.integers(1, k.max_needs + 1))):
        if rng.random() < k.long_range_share:
            picks.append(int(rng.integers(n_have)))
        else:
            picks.append(n_have - 1 - min(n_have - 1, int(rng.geometric(k.recency_p)) - 1))
    picks = list(dict.fromkeys(picks))  # a repeated need once (positions are ids one to one)
    topics = st.topics
    text = " ".join(TOPICS[topics[2 * j + w]] for j in picks for w in (0, 1)) or "continue"
    return {
        "event": "request",
        "id": f"{st.name}-r{c}",
        "stream": st.name,
        "t": t,
        "needs": [st.item(j) for j in picks],
        "text": f"use {text}",
    }


def _simple_write(st: _SimpleStream, k: SimpleKnobs, rng, c: int, t: float) -> dict:
    ty = int(rng.choice(4, p=TYPE_WEIGHTS))
    type_name = ITEM_TYPES[ty]
    tokens = max(1, int(rng.lognormal(np.log(MEAN_TOKENS[ty]), k.token_sigma)))
    topic = [int(i) for i in rng.integers(len(TOPICS), size=2)]
    lead = CONTENT[type_name][int(rng.integers(len(CONTENT[type_name])))]
    number = int(rng.integers(1000, 99999))
    cost = round(float(rng.lognormal(-5.0, 1.0)), 6) if type_name == "tool_result" else 0.0
    st.written.append(c)
    st.topics.extend(topic)
    if type_name == "user_input":
        st.user_inputs.append(c)
    name = st.name
    return {
        "event": "write",
        "id": f"{name}-m{c}",
        "stream": name,
        "t": t,
        "type": type_name,
        "tokens": tokens,
        "cost": cost,
        "task": f"task-{name}",
        "text": f"{lead} {TOPICS[topic[0]]} {TOPICS[topic[1]]} #{number}",
    }
