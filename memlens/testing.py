"""One toolkit for testing policies and tools: event builders, random traces, a trace strategy.

* Builders for hand-written traces: ``w`` (write), ``rq`` (request), ``pin``, ``unpin``,
  ``annotate``, and ``trace(*events)`` to turn them into a :class:`memlens.trace.model.Trace`::

      tr = trace(w("a", 4), w("b", 4), rq("r1", "a"), pin("b"), annotate("a", value=0.9))

* ``random_events(rng, ...)``: a random valid event list (numpy generator), used by
  :func:`memlens.checker.check_policy`.
* ``traces(...)``: a hypothesis strategy for valid event lists exercising every event kind over
  a few streams (hypothesis is a development dependency, imported only when it is called).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from memlens.simulator import SimResult, simulate
from memlens.trace.io import trace_from_events
from memlens.trace.limits import ALTERNATIVES_VERSION
from memlens.trace.model import ITEM_TYPES, Trace

if TYPE_CHECKING:
    from hypothesis.strategies import SearchStrategy

WORDS = ("error", "final", "answer", "rows", "Alice", "IBM", "order_7", "42", "maybe", "plan")

#: The fields of a ``SimResult`` that two replays of one policy must agree on, bit for bit.
RESULT_FIELDS = (
    "need_hit",
    "context_tokens",
    "pinned_tokens",
    "evictions",
    "false_evictions",
    "move_event",
    "move_item",
    "move_kind",
)


def same_result(a: SimResult, b: SimResult) -> str | None:
    """None if the two results are identical, else the first field that differs."""
    for f in RESULT_FIELDS:
        if not np.array_equal(getattr(a, f), getattr(b, f)):
            return f
    return None


def with_alternatives(events: list[dict], rng: np.random.Generator, share: float = 0.5) -> list:
    """``events`` as a format 1.1 trace (header first): each need becomes, with probability
    ``share``, a group of 1-3 alternatives (itself and other earlier writes of its stream, in
    random order, so the need is not always listed first)."""
    written: dict[str, list[str]] = {}
    out: list[dict] = [{"event": "header", "version": ALTERNATIVES_VERSION}]
    for ev in events:
        stream = ev.get("stream", "")
        if ev["event"] == "write":
            written.setdefault(stream, []).append(ev["id"])
        elif ev["event"] == "request":
            have, needs = written[stream], []
            for need in ev["needs"]:
                if rng.random() >= share:
                    needs.append(need)
                    continue
                k = int(rng.integers(1, min(3, len(have)) + 1))
                drawn = dict.fromkeys(have[int(i)] for i in rng.integers(len(have), size=k))
                others = [x for x in drawn if x != need]  # O(k), however long the trace
                group = [need, *others[: k - 1]]
                rng.shuffle(group)
                needs.append(group)
            ev = {**ev, "needs": needs}
        out.append(ev)
    return out


# ----------------------------------------------------------------- builders
def w(ident: str, tokens: int, type_: str = "llm_thought", stream: str = "", **kw) -> dict:
    """A write of item ``ident`` (``t``, ``cost``, ``text`` ... as keywords)."""
    return {"event": "write", "id": ident, "tokens": tokens, "type": type_, "stream": stream, **kw}


def rq(ident: str, *needs: str, stream: str = "", **kw) -> dict:
    """A request ``ident`` needing the items ``needs``."""
    return {"event": "request", "id": ident, "needs": list(needs), "stream": stream, **kw}


def pin(target: str, **kw) -> dict:
    return {"event": "pin", "target": target, **kw}


def unpin(target: str, **kw) -> dict:
    return {"event": "unpin", "target": target, **kw}


def annotate(target: str, value: float | None = None, note: str | None = None, **kw) -> dict:
    """A person's annotation: a value and/or a note (at least one of them)."""
    ev = {"event": "annotate", "target": target, **kw}
    if value is not None:
        ev["value"] = value
    if note is not None:
        ev["note"] = note
    return ev


def trace(*events: dict, source: str = "<test>") -> Trace:
    return trace_from_events(list(events), source=source)


# ------------------------------------------------------------ random traces
def random_events(rng: np.random.Generator, n_events: int = 120, n_streams: int = 2) -> list[dict]:
    """A random valid trace exercising every event kind (the checker's workload)."""
    events: list[dict] = []
    written: list[list[str]] = [[] for _ in range(n_streams)]
    pinned: list[set[str]] = [set() for _ in range(n_streams)]
    words = ["error", "final", "answer", "flight", "refund", "42", "ID-7", "Alice", "maybe"]
    for k in range(n_events):
        s = int(rng.integers(n_streams))
        name = f"s{s}"
        t = float(k)
        roll = rng.random()
        have = written[s]
        if not have or roll < 0.45:
            ident = f"{name}-w{k}"
            have.append(ident)
            text = " ".join(rng.choice(words, size=int(rng.integers(1, 5))).tolist())
            events.append(w(ident, int(rng.integers(1, 40)), ITEM_TYPES[int(rng.integers(4))],
                            stream=name, t=t, cost=float(rng.choice([0.0, 0.001, 0.5])),
                            text=text))  # fmt: skip
        elif roll < 0.85:
            n = int(rng.integers(0, min(4, len(have)) + 1))
            needs = rng.choice(have, size=n).tolist() if n else []
            text = " ".join(rng.choice(words, size=2).tolist())
            events.append(rq(f"{name}-r{k}", *needs, stream=name, t=t, text=text))
        elif roll < 0.92:
            target = have[int(rng.integers(len(have)))]
            builder = unpin if target in pinned[s] else pin
            (pinned[s].discard if builder is unpin else pinned[s].add)(target)
            events.append(builder(target, t=t))
        else:
            target = have[int(rng.integers(len(have)))]
            events.append(annotate(target, value=float(rng.random()), note="checked", t=t))
    return events


def traces(max_events: int = 40, streams: tuple[str, ...] = ("a", "b")) -> SearchStrategy:
    """A hypothesis strategy for valid event lists: writes of every type and a few sizes,
    requests needing 1-3 written items, pins and unpins, annotations with a value or a note,
    over ``streams`` with clocks that sometimes stand still and sometimes jump an hour."""
    from hypothesis import strategies as st

    @st.composite
    def event_lists(draw) -> list[dict]:
        n = draw(st.integers(1, max_events))
        events: list[dict] = []
        written: dict[str, list[str]] = {s: [] for s in streams}
        pinned: dict[str, set[str]] = {s: set() for s in streams}
        clock = dict.fromkeys(streams, 0.0)
        for k in range(n):
            s = draw(st.sampled_from(streams))
            clock[s] += draw(st.sampled_from([0.0, 1.0, 7.0, 60.0, 600.0, 3600.0]))
            t, have = clock[s], written[s]
            roll = draw(st.integers(0, 9))
            if have and roll <= 2:
                needs = draw(st.lists(st.sampled_from(have), min_size=1, max_size=3, unique=True))
                text = " ".join(draw(st.lists(st.sampled_from(WORDS), max_size=3)))
                events.append(rq(f"{s}r{k}", *needs, stream=s, t=t, text=text))
            elif have and roll == 3:
                item = draw(st.sampled_from(have))
                builder = unpin if item in pinned[s] else pin
                (pinned[s].discard if builder is unpin else pinned[s].add)(item)
                events.append(builder(item, stream=s, t=t))
            elif have and roll == 4:
                item = draw(st.sampled_from(have))
                value = draw(st.one_of(st.none(), st.sampled_from([0.0, 0.3, 0.55, 1.0])))
                note = "n" if value is None else None
                events.append(annotate(item, value=value, note=note, stream=s, t=t))
            else:
                have.append(f"{s}{k}")
                text = " ".join(draw(st.lists(st.sampled_from(WORDS), max_size=4)))
                type_ = draw(st.sampled_from(ITEM_TYPES))
                tokens = draw(st.sampled_from([1, 5, 20, 50, 120]))
                cost = draw(st.sampled_from([0.0, 0.0, 0.5]))
                events.append(w(f"{s}{k}", tokens, type_, stream=s, t=t, cost=cost, text=text))
        return events

    return event_lists()


def timed_events(rng: np.random.Generator, n_events: int, n_streams: int, alternatives: bool,
                 gaps: list[float]) -> list[dict]:  # fmt: skip
    """``random_events`` with irregular, non-decreasing times (each gap drawn from ``gaps``:
    clocks that stand still, tick and jump), optionally in format 1.1."""

    events = random_events(rng, n_events, n_streams)
    t = np.cumsum(rng.choice(gaps, size=len(events)))
    for ev, ti in zip(events, t.tolist()):
        ev["t"] = ti
    return with_alternatives(events, rng) if alternatives else events


def assert_kernel_matches(trace: Trace, make, budget: int, demand_fetch: bool) -> None:
    """A fresh ``make()`` replayed by its compiled kernel gives the reference engine's result
    exactly (every field, the move log included)."""

    ref = simulate(trace, make(), budget, demand_fetch, engine="reference", progress=False)
    fast = simulate(trace, make(), budget, demand_fetch, engine="fast", progress=False)
    assert fast.engine == "fast"
    assert same_result(ref, fast) is None, same_result(ref, fast)
