"""The placement-policy interface: the one thing every memory policy implements.

A policy decides, for one stream at a time, which items sit in working memory.  The simulator
owns the facts (what is resident, the token budget, pins, the move log); the policy owns only
its ordering state.  The interface is deliberately small, in the spirit of Gymnasium's ``Env``
and cachetools' ``Cache``:

``reset(ctx)``                  a new stream begins; forget everything.
``admit(item, now, reason)``    an item may enter working memory (at its write or, with demand
                                fetch, after a request missed it); return False to decline
                                (it then goes straight to the short-term cache).
``insert(item, now)``           the item *is* entering working memory (forced by a pin, or after
                                ``admit`` said yes); record it as the newest item.
``touch(item, now)``            a resident item was needed by a request.
``victims(excess, now)``        working memory is ``excess`` tokens over budget: return resident,
                                unpinned items to evict, in order.  The policy forgets them.
``observe(request, now)``       a request was evaluated; its needs are ``ctx.trace.needs_of(r)``.
``pin(item)`` / ``unpin(item)`` a person marked the item must-keep / lifted that.  A pinned item
                                must never be returned by ``victims``.
``annotate(item, value, note)`` a person set a value and/or note on an item.

``now`` is always the event index being replayed; the trace time is ``ctx.trace.ev_t[now]``.
Items and requests are integer indices into the trace's columnar arrays (``memlens.trace``).
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass

import numpy as np

from memlens.trace import Trace

ADMIT_WRITE = 0
ADMIT_FETCH = 1


class PolicyError(RuntimeError):
    """A policy broke the interface contract (evicted a pinned or absent item, ...)."""


@dataclass
class PolicyContext:
    """What a policy is told when a stream starts."""

    trace: Trace
    stream: int
    budget: int
    demand_fetch: bool
    rng: np.random.Generator


class Policy:
    """Base class for placement policies.  Subclasses override what they need.

    ``fast_kernel`` may name a compiled kernel ("fifo" or "lru") that replays this policy
    event for event identically (checked by the test suite); the simulator then uses it when
    ``engine`` is ``auto`` or ``fast``.
    """

    name: str = "policy"
    fast_kernel: str | None = None
    #: Tokens the policy itself keeps in working memory beyond resident items (e.g. a summary).
    extra_tokens: int = 0
    #: Whether the policy can bring items into working memory outside writes, pins and demand
    #: fetch; if so, the oracle's bounds do not apply to it.
    outside_oracle_class: bool = False

    def reset(self, ctx: PolicyContext) -> None:
        self.ctx = ctx

    def admit(self, item: int, now: int, reason: int) -> bool:
        self.insert(item, now)
        return True

    def insert(self, item: int, now: int) -> None:
        raise NotImplementedError

    def touch(self, item: int, now: int) -> None:
        pass

    def victims(self, excess: int, now: int) -> list[int]:
        raise NotImplementedError

    def observe(self, request: int, now: int) -> None:
        pass

    def pin(self, item: int) -> None:
        pass

    def unpin(self, item: int) -> None:
        pass

    def annotate(self, item: int, value: float | None, note: str | None, now: int) -> None:
        pass


class OrderedPolicy(Policy):
    """A policy whose eviction order is a queue (oldest first): FIFO, LRU and friends.

    Pinned items keep their place in the queue and are skipped when choosing victims.
    """

    def reset(self, ctx: PolicyContext) -> None:
        super().reset(ctx)
        self._order: OrderedDict[int, None] = OrderedDict()
        self._pinned: set[int] = set()

    def insert(self, item: int, now: int) -> None:
        self._order[item] = None

    def victims(self, excess: int, now: int) -> list[int]:
        order = self._order
        if self._pinned:
            for item in order:
                if item not in self._pinned:
                    del order[item]
                    return [item]
            return []
        if not order:
            return []
        return [order.popitem(last=False)[0]]

    def pin(self, item: int) -> None:
        self._pinned.add(item)

    def unpin(self, item: int) -> None:
        self._pinned.discard(item)
