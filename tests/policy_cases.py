"""Small-trace helpers shared by the per-policy tests (tests/policies/test_policy_*.py).

Not a test module itself: it builds event dicts, replays them and reads the outcome back in
item ids, so that each hand-computed case reads like the story it tells.
"""

from __future__ import annotations

from memlens.analyze.metrics import compute_metrics
from memlens.policy import Policy
from memlens.simulator import MoveKind, simulate
from memlens.testing import annotate, pin, rq, traces, unpin, w
from memlens.trace.io import trace_from_events

__all__ = ["NOTE", "PIN", "R", "UNPIN", "W", "NaiveRescan", "Run", "traces"]


# The per-policy tests read time first: W(item, t, ...).  Thin spellings of memlens.testing's.
def W(item, t, type="llm_thought", tokens=100, cost=0.0, text="", stream="s"):  # noqa: N802
    return w(item, tokens, type, stream=stream, t=t, cost=cost, text=text)


def R(rid, t, needs, text="", stream="s"):  # noqa: N802
    return rq(rid, *needs, stream=stream, t=t, text=text)


def PIN(item, t, stream="s"):  # noqa: N802
    return pin(item, stream=stream, t=t)


def UNPIN(item, t, stream="s"):  # noqa: N802
    return unpin(item, stream=stream, t=t)


def NOTE(item, t, value=None, note=None, stream="s"):  # noqa: N802
    return annotate(item, value=value, note=note, stream=stream, t=t)


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
        return self._ids(MoveKind.EVICT)

    @property
    def bypassed(self) -> list[str]:
        return self._ids(MoveKind.BYPASS)

    def hits(self, rid: str) -> list[bool]:
        r = self.trace.req_id.index(rid)
        lo, hi = self.trace.needs_ptr[r], self.trace.needs_ptr[r + 1]
        return [bool(h) for h in self.result.need_hit[lo:hi]]

    @property
    def moves(self):
        r = self.result
        return list(zip(r.move_event.tolist(), r.move_item.tolist(), r.move_kind.tolist()))


class NaiveRescan(Policy):
    """A naive twin for property tests: every victim choice scans every resident, unpinned
    item (as ``ctx.memory`` shows them) for the smallest ``key(item, t)``.  Subclasses define
    ``key`` and keep the state it reads; ``forget(item)`` is called for each victim."""

    def key(self, item: int, t: float) -> tuple:
        raise NotImplementedError

    def forget(self, item: int) -> None:
        pass

    def insert(self, item: int, now: int) -> None:
        pass

    def victims(self, excess, now):
        t = float(self.ctx.trace.ev_t[now])
        memory, out, freed = self.ctx.memory, [], 0
        while freed < excess:
            cands = [i for i in memory.items() if not memory.is_pinned(i) and i not in out]
            if not cands:
                break
            i = min(cands, key=lambda i: self.key(i, t))
            self.forget(i)
            out.append(i)
            freed += int(self.ctx.trace.item_tokens[i])
        return out
