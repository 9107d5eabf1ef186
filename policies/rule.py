"""The rule scorer: evict the memory that is worth least, and do not admit what is worth little.

An item's value at trace time ``t`` is::

    B_i     = type_base[type] + content boosts + cost boost        (memlens.features.static_value)
              + min(use_cap, use_boost * uses_i)                  (how often requests needed it)
    value_i = max(floor[type], B_i * 2 ** (-(t - a_i) / half_life[type]))

where ``a_i`` is the last time the item entered working memory or a request needed it (how
recently it was used), and the half-life is per type: a user's words fade slowly, a passing
thought fast.  A person's word overrides all of this: a pinned item is never evicted, and an
``annotate`` event with a value fixes the item's value (no decay, no use boost) until the next
annotation that carries a value; a note-only annotation leaves the value alone.

Eviction takes the lowest value first, ties by recency (least recently written or used first),
then by item index.  Admission: an item whose value at its write is below ``admit_threshold``
goes straight to the short-term cache, so the scorer may hold less than the budget when the
rest is worth little; demand-fetched items are admitted (a request just needed them) unless
``admit_fetched`` is false.

Keeping the order without rescanning.  Within one type every item decays by the same factor, so
``log value = log B_i + lam * a_i - lam * t``: the key ``k_i = log B_i + lam * a_i`` orders the
items of a type once and for all, and only changes when the item is used (then it is pushed
again and its old heap entry is invalidated lazily by a version number).  Items of a type reach
the floor in key order, so at eviction time the heap's smallest keys are moved, once each, into
a per-type "floored" heap ordered by recency.  A victim is then the best of at most nine heap
tops (four decaying, four floored, one annotated), and every event costs O(log n) in the items
held; stale entries are compacted away when they outnumber live ones.
"""

from __future__ import annotations

import math
from heapq import heapify, heappop, heappush

import numpy as np

from memlens.features import static_value, type_array
from memlens.policy import ADMIT_FETCH, Policy, PolicyContext
from memlens.trace import ITEM_TYPES

ABSENT, ACTIVE, PINNED = 0, 1, 2


class RuleScorer(Policy):
    name = "rule"

    def __init__(
        self,
        type_base: dict[str, float] | None = None,
        boosts: dict[str, float] | None = None,
        cost_threshold: float = 0.01,
        cost_boost: float = 0.15,
        use_boost: float = 0.1,
        use_cap: float = 0.3,
        half_life_hours: dict[str, float] | None = None,
        floor: dict[str, float] | None = None,
        admit_threshold: float = 0.5,
        admit_fetched: bool = True,
    ):
        self.type_base = dict(type_base or {"user_input": 0.7, "tool_result": 0.6,
                                            "agent_state": 0.5, "llm_thought": 0.4})  # fmt: skip
        self.boosts = dict(boosts or {})
        self.cost_threshold = float(cost_threshold)
        self.cost_boost = float(cost_boost)
        self.use_boost = float(use_boost)
        self.use_cap = float(use_cap)
        half = type_array(half_life_hours or {"user_input": 0.5, "tool_result": 1 / 6,
                                              "agent_state": 1 / 6, "llm_thought": 1 / 30},
                          "half_life_hours")  # fmt: skip
        if (half <= 0).any():
            raise ValueError("half_life_hours must be positive for every type")
        floors = type_array(floor or {"user_input": 0.05, "tool_result": 0.02,
                                      "agent_state": 0.02, "llm_thought": 0.01}, "floor")  # fmt: skip
        if (floors <= 0).any():
            raise ValueError("floor must be positive for every type (values decay towards it)")
        self.lam = (math.log(2.0) / (half * 3600.0)).tolist()  # per second
        self.floor = floors.tolist()
        self.log_floor = np.log(floors).tolist()
        self.admit_threshold = float(admit_threshold)
        self.admit_fetched = bool(admit_fetched)
        self._trace_key = None

    # ------------------------------------------------------------------ setup
    def _per_trace(self, trace) -> None:
        """Per-trace arrays as Python lists (list indexing is what the hot path does)."""
        if self._trace_key is trace:
            return
        self._trace_key = trace
        base = static_value(trace, self.type_base, self.boosts, self.cost_threshold,
                            self.cost_boost)  # fmt: skip
        self._base = base.tolist()
        self._log_base = np.log(np.maximum(base, 1e-300)).tolist()
        self._type = trace.item_type.tolist()
        self._lam_item = np.asarray(self.lam)[trace.item_type].tolist()
        self._tok = trace.item_tokens.tolist()
        self._t = trace.ev_t.tolist()
        self._needs_ptr = trace.needs_ptr.tolist()
        self._needs = trace.needs.tolist()

    def reset(self, ctx: PolicyContext) -> None:
        super().reset(ctx)
        self._per_trace(ctx.trace)
        n = ctx.trace.n_items
        self._uses = [0] * n
        self._anchor = [0.0] * n  # trace time the decay counts from
        self._last = [0] * n  # event of the last write/use (recency, for ties)
        self._ver = [0] * n  # a heap entry is live iff its version is the item's version
        self._state = bytearray(n)
        self._override: dict[int, float] = {}
        self._active: list[list] = [[] for _ in ITEM_TYPES]  # per type: (k, last, item, ver)
        self._static: list = []  # floored or annotated: (value, last, item, ver)
        # per type: (its heap, lam, log floor, floor); heaps are compacted in place
        self._lanes = list(zip(self._active, self.lam, self.log_floor, self.floor))
        self._live = 0  # resident unpinned items
        self._entries = 0  # heap entries, live or stale

    # ------------------------------------------------------------ the value
    def _boosted(self, item: int) -> float:
        return self._base[item] + min(self.use_cap, self.use_boost * self._uses[item])

    def value(self, item: int, t: float) -> float:
        """The item's value at trace time ``t`` (what eviction and admission compare)."""
        ov = self._override.get(item)
        if ov is not None:
            return ov
        ty = self._type[item]
        b = self._boosted(item)
        return max(self.floor[ty], b * math.exp(-self.lam[ty] * (t - self._anchor[item])))

    def _push(self, item: int) -> None:
        """(Re)enter ``item`` in the eviction order with its current parameters."""
        v = self._ver[item] + 1
        self._ver[item] = v
        ov = self._override.get(item) if self._override else None
        if ov is not None:
            heappush(self._static, (ov, self._last[item], item, v))
        else:
            if self._uses[item]:
                b = self._boosted(item)
                k = math.log(b) if b > 1e-300 else -690.0
            else:
                k = self._log_base[item]
            heappush(self._active[self._type[item]],
                     (k + self._lam_item[item] * self._anchor[item], self._last[item], item, v))  # fmt: skip
        self._entries += 1
        if self._entries > 2 * self._live + 4096:
            self._compact()

    def _compact(self) -> None:
        """Drop stale entries (in place: the lanes hold the heap lists)."""
        ver = self._ver
        for heap in (*self._active, self._static):
            heap[:] = [e for e in heap if ver[e[2]] == e[3]]
            heapify(heap)
        self._entries = sum(map(len, self._active)) + len(self._static)

    # ------------------------------------------------------------- interface
    def admit(self, item: int, now: int, reason: int) -> bool:
        if reason == ADMIT_FETCH:
            if not self.admit_fetched and self.value(item, self._t[now]) < self.admit_threshold:
                return False
        elif self._override:
            ov = self._override.get(item)
            if (self._base[item] if ov is None else ov) < self.admit_threshold:
                return False
        elif self._base[item] < self.admit_threshold:  # a fresh write: no use, no decay yet
            return False
        self.insert(item, now)
        return True

    def insert(self, item: int, now: int) -> None:
        t = self._t[now]
        self._anchor[item] = t
        self._last[item] = now
        self._state[item] = ACTIVE
        self._live += 1
        if self._uses[item] or self._override:
            self._push(item)
            return
        # the common case (a fresh write), _push inlined: the replay's hottest path
        v = self._ver[item] + 1
        self._ver[item] = v
        heappush(self._active[self._type[item]],
                 (self._log_base[item] + self._lam_item[item] * t, now, item, v))  # fmt: skip
        self._entries += 1
        if self._entries > 2 * self._live + 4096:
            self._compact()

    def observe(self, request: int, now: int) -> None:
        t = self._t[now]
        uses, anchor, last, state = self._uses, self._anchor, self._last, self._state
        needs = self._needs
        for j in range(self._needs_ptr[request], self._needs_ptr[request + 1]):
            i = needs[j]
            n = uses[i] + 1
            uses[i] = n
            anchor[i] = t
            last[i] = now
            if state[i] == ACTIVE:
                if self._override:
                    self._push(i)
                    continue
                v = self._ver[i] + 1  # _push inlined
                self._ver[i] = v
                b = self._base[i] + min(self.use_cap, self.use_boost * n)
                k = math.log(b) if b > 1e-300 else -690.0
                heappush(self._active[self._type[i]], (k + self._lam_item[i] * t, now, i, v))
                self._entries += 1
        if self._entries > 2 * self._live + 4096:
            self._compact()

    def victims(self, excess: int, now: int) -> list[int]:
        t = self._t[now]
        ver, tok, state = self._ver, self._tok, self._state
        static = self._static
        out: list[int] = []
        freed = 0
        stale = 0
        while freed < excess:
            # best decaying candidate, compared in the log domain: log value = k - lam * t
            best_heap = None
            best_lv = math.inf
            best_last = best_i = 0
            for heap, lam, log_floor, floor in self._lanes:
                while heap:
                    k, last, i, v = heap[0]
                    if ver[i] != v:  # stale
                        heappop(heap)
                        stale += 1
                        continue
                    lv = k - lam * t
                    if lv <= log_floor:  # reached the floor: from now on a constant value
                        heappop(heap)
                        heappush(static, (floor, last, i, v))
                        continue
                    if lv < best_lv or (lv == best_lv and (last, i) < (best_last, best_i)):
                        best_lv, best_last, best_i, best_heap = lv, last, i, heap
                    break
            while static:  # floored or annotated: constant values
                value, last, i, v = static[0]
                if ver[i] != v:
                    heappop(static)
                    stale += 1
                    continue
                if best_heap is None:
                    best_heap, best_i = static, i
                else:
                    best_v = math.exp(best_lv)
                    if value < best_v or (value == best_v and (last, i) < (best_last, best_i)):
                        best_heap, best_i = static, i
                break
            if best_heap is None:
                break  # only pinned items left: the simulator will not ask
            heappop(best_heap)
            ver[best_i] += 1
            state[best_i] = ABSENT
            out.append(best_i)
            freed += tok[best_i]
        self._live -= len(out)
        self._entries -= stale + len(out)
        return out

    def pin(self, item: int) -> None:
        if self._state[item] == ACTIVE:
            self._live -= 1
        self._state[item] = PINNED
        self._ver[item] += 1  # its heap entry is now stale

    def unpin(self, item: int) -> None:
        if self._state[item] == PINNED:
            self._state[item] = ACTIVE
            self._live += 1
            self._push(item)

    def annotate(self, item: int, value: float | None, note: str | None, now: int) -> None:
        if value is None:
            return
        self._override[item] = float(value)
        if self._state[item] == ACTIVE:
            self._push(item)
