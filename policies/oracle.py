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

import numpy as np

from memlens.policy import Policy, PolicyContext, PolicyError, compiled_kernel
from memlens.trace.model import PIN, UNPIN, WRITE, Trace


@compiled_kernel("memlens.kernels.oracle:replay")
class Oracle(Policy):
    name = "oracle"

    def __init__(self, plans: list | None = None) -> None:
        """``plans``: per stream an (n, 2) array of (anchor event, item) to keep; None = solve.

        ``plans`` is for programmatic use (``memlens.oracle.solve`` replays its own plan); the
        solver's settings come from the run's ``oracle:`` block through ``use_oracle_settings``.
        """
        self._plans = plans
        self._settings = None

    def use_oracle_settings(self, settings) -> None:
        """The run's ``oracle:`` config (so the replay follows the plan the report used)."""
        self._settings = settings

    def plans_for(self, trace: Trace, budget: int, demand_fetch: bool) -> list:
        """Per stream the (anchor event, item) pairs to keep: the given plans, or the solver's
        with the run's settings (solved once per trace, budget and setting, then cached)."""
        if self._plans is not None:
            return self._plans
        from memlens.oracle import OracleSettings, solve

        return solve(trace, budget, demand_fetch, self._settings or OracleSettings()).plans

    def reset(self, ctx: PolicyContext) -> None:
        super().reset(ctx)
        trace = ctx.trace
        plans = self.plans_for(trace, ctx.budget, ctx.demand_fetch)
        n = trace.n_items
        self._n = n
        plan = plans[ctx.stream]
        self._keep = set((plan[:, 0] * n + plan[:, 1]).tolist()) if len(plan) else set()
        # next use of every item, updated as requests are observed
        if getattr(self, "_first_use_of", None) is not trace:
            first_use = np.full(n, np.iinfo(np.int64).max, dtype=np.int64)
            # every item a need lists counts as used (alternatives too, trace format 1.1)
            np.minimum.at(first_use, trace.group_items, trace.req_event[trace.group_request])
            self._first_use, self._first_use_of = first_use, trace
            self._kinds = trace.ev_kind.tolist()
        self._next: dict[int, int] = {}
        self._never = int(trace.n_events) * 2  # "never needed again"
        self._unpins = _unpin_events(trace, ctx.stream)
        self._unpin_count: dict[int, int] = {}
        self._memory = ctx.memory
        self._linger: set[int] = set()
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
    def insert(self, item: int, now: int) -> None:
        """Every item offered is admitted; the event tells why it enters."""
        kind = self._kinds[now]
        if kind == PIN:
            return  # pinned from now on; its unpin settles it
        if kind == WRITE:
            fu = int(self._first_use[item])
            self._next[item] = fu if fu < self._never else self._never
        self._settle(item, now)

    def observe(self, request: int, now: int) -> None:
        trace = self.ctx.trace
        lo, hi = int(trace.needs_ptr[request]), int(trace.needs_ptr[request + 1])
        if trace.has_alternatives:  # every alternative a need lists is an anchor (format 1.1)
            lo, hi = int(trace.group_ptr[lo]), int(trace.group_ptr[hi])
        items, nxt = trace.group_items, trace.group_next_use
        resident, is_pinned = self._memory.resident, self._memory.is_pinned
        for j in range(lo, hi):
            i = int(items[j])
            n = int(nxt[j])
            self._next[i] = n if n >= 0 else self._never
            if resident(i) and not is_pinned(i):
                self._settle(i, now)

    def victims(self, excess: int, now: int) -> list[int]:
        heap = self._heap
        while heap:
            key, item = heapq.heappop(heap)
            if item in self._linger and -key == self._next.get(item, self._never):
                self._linger.discard(item)
                return [item]
        raise PolicyError(
            f"oracle: stream {self.ctx.stream} over budget at event {now} with only protected "
            "items resident (the plan is infeasible; this is a bug in memlens.oracle)"
        )

    def pin(self, item: int) -> None:
        self._linger.discard(item)

    def unpin(self, item: int) -> None:
        k = self._unpin_count.get(item, 0)
        self._unpin_count[item] = k + 1
        self._settle(item, self._unpins[item][k])


def _unpin_events(trace: Trace, stream: int) -> dict[int, list[int]]:
    """Per item, the events of the stream's unpins that lift a pin (repeats ignored)."""
    events = trace.stream_events[stream]
    unpins: dict[int, list[int]] = {}
    pinned_now: set[int] = set()
    kinds = trace.ev_kind[events].tolist()
    for e, k, x in zip(events.tolist(), kinds, trace.ev_ref[events].tolist(), strict=True):
        if k == PIN and x not in pinned_now:
            pinned_now.add(x)
        elif k == UNPIN and x in pinned_now:
            pinned_now.discard(x)
            unpins.setdefault(x, []).append(e)
    return unpins
