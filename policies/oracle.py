"""The offline oracle as a policy: replays the schedule behind ``oracle_lower``.

It is the only policy allowed to read the future (``ctx.trace.needs``): at ``reset`` it takes
the stream's plan from ``memlens.oracle.solve`` (solved once per trace, budget and demand-fetch
setting, then cached), a set of (anchor event, item) pairs meaning "keep this item from this
anchor until its next use".

Every item the simulator offers is admitted.  Items the plan keeps are *protected*; all others
*linger* until room is needed and are then evicted furthest-next-use first (Belady).  The
plan's kept items plus the pinned ones fit the budget at every event, so ``victims`` never has
to touch a protected item; lingering items only add hits.  With an empty plan the policy is
Belady-Size (admit everything, evict the item needed furthest in the future).
"""

from __future__ import annotations

import heapq
from dataclasses import replace

import numpy as np

from memlens.policy import ADMIT_WRITE, Policy, PolicyContext, PolicyError
from memlens.trace import PIN, UNPIN


class Oracle(Policy):
    name = "oracle"

    def __init__(self, plans: list[np.ndarray] | None = None, **settings) -> None:
        """``plans``: per stream an (n, 2) array of (anchor event, item) to keep; None = solve.

        ``settings`` override ``memlens.oracle.OracleSettings`` (``method``, ...) when solving.
        """
        self._plans = plans
        self._overrides = settings
        self._settings = None

    def use_oracle_settings(self, settings) -> None:
        """The run's ``oracle:`` config (so the replay follows the plan the report used)."""
        self._settings = settings

    def reset(self, ctx: PolicyContext) -> None:
        super().reset(ctx)
        trace = ctx.trace
        plans = self._plans
        if plans is None:
            from memlens.oracle import OracleSettings, solve

            base = self._settings or OracleSettings()
            settings = replace(base, **self._overrides) if self._overrides else base
            plans = solve(trace, ctx.budget, ctx.demand_fetch, settings).plans
        n = trace.n_items
        self._n = n
        plan = plans[ctx.stream]
        self._keep = set((plan[:, 0] * n + plan[:, 1]).tolist()) if len(plan) else set()
        events = trace.stream_events[ctx.stream]
        # next use of every item, updated as requests are observed
        if getattr(self, "_first_use_of", None) is not trace:
            first_use = np.full(n, np.iinfo(np.int64).max, dtype=np.int64)
            np.minimum.at(first_use, trace.needs, trace.req_event[trace.need_request])
            self._first_use, self._first_use_of = first_use, trace
        self._next: dict[int, int] = {}
        self._never = int(trace.n_events) * 2  # "never needed again"
        unpins: dict[int, list[int]] = {}
        pinned_now: set[int] = set()
        kinds = trace.ev_kind[events]
        for e, k, x in zip(
            events.tolist(), kinds.tolist(), trace.ev_ref[events].tolist(), strict=True
        ):
            if k == PIN and x not in pinned_now:
                pinned_now.add(x)
            elif k == UNPIN and x in pinned_now:
                pinned_now.discard(x)
                unpins.setdefault(x, []).append(e)
        self._unpins = unpins
        self._unpin_count: dict[int, int] = {}
        self._resident: set[int] = set()
        self._linger: set[int] = set()
        self._pinned: set[int] = set()
        self._heap: list[tuple[int, int]] = []

    # ---------------------------------------------------------------- helpers
    def _settle(self, item: int, anchor: int) -> None:
        """The item is resident and unpinned after ``anchor``: protect it or let it linger."""
        if anchor * self._n + item in self._keep:
            self._linger.discard(item)
        else:
            self._linger.add(item)
            heapq.heappush(self._heap, (-self._next.get(item, self._never), item))

    # -------------------------------------------------------------- interface
    def admit(self, item: int, now: int, reason: int) -> bool:
        if reason == ADMIT_WRITE:
            fu = int(self._first_use[item])
            self._next[item] = fu if fu < self._never else self._never
        self._resident.add(item)
        self._settle(item, now)
        return True

    def insert(self, item: int, now: int) -> None:  # only pins insert without admit
        self._resident.add(item)

    def observe(self, request: int, now: int) -> None:
        trace = self.ctx.trace
        lo, hi = int(trace.needs_ptr[request]), int(trace.needs_ptr[request + 1])
        nxt = trace.need_next_use
        for j in range(lo, hi):
            i = int(trace.needs[j])
            n = int(nxt[j])
            self._next[i] = n if n >= 0 else self._never
            if i in self._resident and i not in self._pinned:
                self._settle(i, now)

    def victims(self, excess: int, now: int) -> list[int]:
        heap = self._heap
        while heap:
            key, item = heapq.heappop(heap)
            if item in self._linger and -key == self._next.get(item, self._never):
                self._linger.discard(item)
                self._resident.discard(item)
                return [item]
        raise PolicyError(
            f"oracle: stream {self.ctx.stream} over budget at event {now} with only protected "
            "items resident (the plan is infeasible; this is a bug in memlens.oracle)"
        )

    def pin(self, item: int) -> None:
        self._pinned.add(item)
        self._linger.discard(item)

    def unpin(self, item: int) -> None:
        self._pinned.discard(item)
        k = self._unpin_count.get(item, 0)
        self._unpin_count[item] = k + 1
        self._settle(item, self._unpins[item][k])
