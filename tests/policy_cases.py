"""Small-trace helpers shared by the per-policy tests (tests/test_policy_*.py).

Not a test module itself: it builds event dicts, replays them and reads the outcome back in
item ids, so that each hand-computed case reads like the story it tells.
"""

from __future__ import annotations

from hypothesis import strategies as st

from memlens.metrics import compute_metrics
from memlens.simulator import MOVE_BYPASS, MOVE_EVICT, simulate
from memlens.trace import ITEM_TYPES
from memlens.trace_io import trace_from_events


def W(item, t, type="llm_thought", tokens=100, cost=0.0, text="", stream="s"):  # noqa: N802
    return {"event": "write", "id": item, "stream": stream, "t": t, "type": type,
            "tokens": tokens, "cost": cost, "text": text}  # fmt: skip


def R(rid, t, needs, text="", stream="s"):  # noqa: N802
    return {"event": "request", "id": rid, "stream": stream, "t": t, "needs": needs,
            "text": text}  # fmt: skip


def PIN(item, t, stream="s"):  # noqa: N802
    return {"event": "pin", "target": item, "stream": stream, "t": t}


def UNPIN(item, t, stream="s"):  # noqa: N802
    return {"event": "unpin", "target": item, "stream": stream, "t": t}


def NOTE(item, t, value=None, note=None, stream="s"):  # noqa: N802
    ev = {"event": "annotate", "target": item, "stream": stream, "t": t}
    if value is not None:
        ev["value"] = value
    if note is not None:
        ev["note"] = note
    return ev


class Run:
    """One replay, read back in item ids."""

    def __init__(self, events, policy, budget, demand_fetch=False, seed=0):
        self.trace = trace_from_events(events)
        self.policy = policy
        self.result = simulate(self.trace, policy, budget, demand_fetch=demand_fetch,
                               seed=seed, engine="reference", progress=False)  # fmt: skip
        self.metrics = compute_metrics(self.trace, self.result)["overall"]

    def _ids(self, kind):
        ids = self.trace.item_id
        r = self.result
        return [ids[i] for i, k in zip(r.move_item.tolist(), r.move_kind.tolist()) if k == kind]

    @property
    def evicted(self) -> list[str]:
        return self._ids(MOVE_EVICT)

    @property
    def bypassed(self) -> list[str]:
        return self._ids(MOVE_BYPASS)

    def hits(self, rid: str) -> list[bool]:
        r = self.trace.req_id.index(rid)
        lo, hi = self.trace.needs_ptr[r], self.trace.needs_ptr[r + 1]
        return [bool(h) for h in self.result.need_hit[lo:hi]]

    @property
    def moves(self):
        r = self.result
        return list(zip(r.move_event.tolist(), r.move_item.tolist(), r.move_kind.tolist()))


WORDS = ["error", "final", "answer", "rows", "Alice", "IBM", "order_7", "42", "maybe", "plan"]


@st.composite
def random_events(draw, max_events=40, streams=("a", "b")):
    """A random valid trace: writes, requests, pins/unpins and annotations over a few streams."""
    n = draw(st.integers(1, max_events))
    events = []
    written: dict[str, list[str]] = {s: [] for s in streams}
    pinned: dict[str, set] = {s: set() for s in streams}
    clock = {s: 0.0 for s in streams}
    for k in range(n):
        s = draw(st.sampled_from(streams))
        clock[s] += draw(st.sampled_from([0.0, 1.0, 7.0, 60.0, 600.0, 3600.0]))
        t = clock[s]
        have = written[s]
        roll = draw(st.integers(0, 9))
        if have and roll <= 2:
            needs = draw(st.lists(st.sampled_from(have), min_size=1, max_size=3, unique=True))
            text = " ".join(draw(st.lists(st.sampled_from(WORDS), max_size=3)))
            events.append(R(f"{s}r{k}", t, needs, text=text, stream=s))
        elif have and roll == 3:
            item = draw(st.sampled_from(have))
            if item in pinned[s]:
                pinned[s].discard(item)
                events.append(UNPIN(item, t, stream=s))
            else:
                pinned[s].add(item)
                events.append(PIN(item, t, stream=s))
        elif have and roll == 4:
            item = draw(st.sampled_from(have))
            value = draw(st.one_of(st.none(), st.sampled_from([0.0, 0.3, 0.55, 1.0])))
            events.append(NOTE(item, t, value=value, note="n" if value is None else None,
                               stream=s))  # fmt: skip
        else:
            item = f"{s}{k}"
            have.append(item)
            text = " ".join(draw(st.lists(st.sampled_from(WORDS), max_size=4)))
            events.append(W(item, t, type=draw(st.sampled_from(ITEM_TYPES)),
                            tokens=draw(st.sampled_from([1, 5, 20, 50, 120])),
                            cost=draw(st.sampled_from([0.0, 0.0, 0.5])), text=text,
                            stream=s))  # fmt: skip
    return events
