"""The rule scorer: evict the memory that is worth least, and do not admit what is worth little.

An item's value at trace time ``t`` is::

    B_i     = type_base[type] + content boosts + cost boost        (memlens.trace.features.static_value)
              + min(use_cap, use_boost * uses_i)                  (how often requests needed it)
    value_i = max(floor[type], B_i * 2 ** (-(t - a_i) / half_life[type]))

where ``a_i`` is the last time the item entered working memory or a request needed it (how
recently it was used), and the half-life is per type: a user's words fade slowly, a passing
thought fast.  A person's word overrides all of this: a pinned item is never evicted, and an
``annotate`` event with a value fixes the item's value (no decay, no use boost) until the next
annotation that carries a value; a note-only annotation leaves the value alone.

Eviction takes the lowest value first, ties by recency (least recently written or used first),
then by item index.  Admission: an item worth at least ``admit_threshold`` at its write is
admitted.  One worth less is admitted too while working memory has room for it, and when it
is full, if every item eviction would take to make room for it (lowest value first) is worth
no more than the newcomer; it goes straight to the short-term cache only when admitting it
would evict something worth more.  (An earlier version declined every such write even with
room to spare, so with the defaults a plain thought, 0.4 < 0.5, was never admitted and the
scorer missed requests with budget left over.)  What the threshold still changes: without
it, a cheap item whose room would cost something worth more is admitted, then evicted at once
as the least valuable, possibly after cheaper items were evicted for it in vain; with it, the
item bypasses and they stay.  Demand-fetched items are admitted (a request just needed them)
unless ``admit_fetched`` is false; then they are judged like a write, by their value at the
fetch.

Keeping the order without rescanning.  Within one type every item decays by the same factor, so
``log value = log B_i + lam * a_i - lam * t``: the key ``k_i = log B_i + lam * a_i`` orders the
items of a type once and for all, and only changes when the item is used (then it is pushed
again and its old heap entry is invalidated lazily by a version number).  Items of a type reach
the floor in key order, so at eviction time the heap's smallest keys are moved, once each, into
one "static" heap of constant values (floored and annotated items, by value then recency).  A
victim is then the best of at most five heap tops (four decaying, one static), and every event
costs O(log n) in the items held; stale entries are compacted away when they outnumber live
ones.  ``benchmarks/bench_policies.py`` measures it.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from heapq import heapify, heappop, heappush

import numpy as np

from memlens.policy import ADMIT_FETCH, Policy, PolicyContext, compiled_kernel
from memlens.trace.features import DEFAULT_TYPE_BASE, static_value, static_value_of, type_array
from memlens.trace.model import ITEM_TYPES

ABSENT, ACTIVE, PINNED = 0, 1, 2  # an item's state: whether it has a live heap entry
STATIC = len(ITEM_TYPES)  # heap lane of constant values (lanes 0..3: the types' decaying heaps)
COMPACT_MIN = 4096  # a heap is compacted when longer than twice its live entries plus this
TIE_RTOL = 1e-9  # admission: a victim is "worth more" only beyond this relative float noise


@compiled_kernel("memlens.kernels.rule:replay")
class RuleScorer(Policy):
    name = "rule"
    grows = True  # live use: ``grow`` extends the per-item lists (memlens.live)

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
    ) -> None:
        self.type_base = dict(type_base or DEFAULT_TYPE_BASE)
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
        # every item a need lists counts a use, alternatives too (trace format 1.1)
        self._needs_ptr = trace.request_items_ptr.tolist()
        self._needs = trace.group_items.tolist()

    #: the per-trace lists ``_per_trace`` makes (read-only but for ``grow``, which extends them)
    _TRACE_LISTS = ("_base", "_log_base", "_type", "_lam_item", "_tok", "_t", "_needs_ptr",
                    "_needs")  # fmt: skip

    def share_trace_state(self, other: Policy) -> None:
        """Live use: take ``other``'s per-trace lists instead of making them again at ``reset``
        (a live session runs one instance per stream, all on one trace: a reopened record of a
        million items made them once per stream, most of the rule scorer's reopen time)."""
        if type(other) is not type(self) or other._trace_key is None:
            return
        if self._parameters() != other._parameters():
            return
        self._trace_key = other._trace_key
        for name in self._TRACE_LISTS:
            setattr(self, name, getattr(other, name))

    def _parameters(self) -> tuple:
        """What the per-trace lists depend on besides the trace."""
        return (self.type_base, self.boosts, self.cost_threshold, self.cost_boost, self.lam)

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
        self._heaps = [*self._active, self._static]  # by lane: the types, then STATIC
        self._limits = [COMPACT_MIN] * len(self._heaps)  # compact a heap longer than this
        self._bind()

    def grow(self, columns) -> None:
        """Live use: extend the per-trace and per-stream lists to the grown trace, in place
        (the closures of ``_bind`` hold these very lists).  New items get the static value the
        loaded record gives them (``static_value_of``).  The per-trace lists may be shared
        with other streams' instances (``share_trace_state``): each list grows once, to the
        columns' length, whichever instance gets there first."""
        n0, n = len(self._base), len(columns.item_tokens)
        if n > n0:
            types = columns.item_type[n0:]
            base = static_value_of(types, columns.item_text[n0:], columns.item_tokens[n0:],
                                   columns.item_cost[n0:], self.type_base, self.boosts,
                                   self.cost_threshold, self.cost_boost)  # fmt: skip
            self._base.extend(base.tolist())
            self._log_base.extend(np.log(np.maximum(base, 1e-300)).tolist())
            self._type.extend(types)
            self._lam_item.extend(self.lam[ty] for ty in types)
            self._tok.extend(columns.item_tokens[n0:])
        k = n - len(self._uses)  # this stream's own lists
        if k > 0:
            self._uses.extend([0] * k)
            self._anchor.extend([0.0] * k)
            self._last.extend([0] * k)
            self._ver.extend([0] * k)
            self._state.extend(bytes(k))
        self._t.extend(columns.ev_t[len(self._t) :])
        ptr = self._needs_ptr
        if len(ptr) < len(columns.request_items_ptr):
            ptr.extend(columns.request_items_ptr[len(ptr) :])
            self._needs.extend(columns.group_items[len(self._needs) :])

    def restore(self, replayed) -> None:
        """Live use, just after ``reset``: the state this stream's replay left (a reopened
        record replayed by the compiled kernel).  What the handlers would have made of it:

        * ``uses`` counts every listing by a request (``observe``);
        * ``last`` is the latest event that inserted or observed the item (an unpin or an
          annotation re-inserts at ``last``, moving nothing), ``anchor`` its time;
        * a person's last value wins (``annotate``);
        * the heaps: each resident, unpinned item inserted once as of ``last``, through
          ``insert`` itself, so its key is the one the replay computed.  The replay's heaps
          may also hold stale entries and items moved to the static heap at their floor;
          neither changes a decision (``lowest`` skips the first and moves the second on its
          way), so the eviction order is the replay's.  Pinned items are PINNED, outside the
          heaps.
        The lists are the ones ``_bind``'s closures hold: they are filled in place."""
        items = replayed.items
        last = np.maximum(replayed.last_enter[items], replayed.last_need[items])
        seen = last >= 0
        t = self.ctx.trace.ev_t  # what ``_t`` lists
        for name, values in (("_uses", replayed.n_listed[items]),
                             ("_last", np.where(seen, last, 0)),
                             ("_anchor", np.where(seen, t[np.maximum(last, 0)], 0.0))):  # fmt: skip
            column = getattr(self, name)
            for i, v in zip(items.tolist(), values.tolist()):
                column[i] = v
        for _e, item, value, _note in replayed.annotations:
            if value is not None:
                self._override[item] = float(value)
        pins = replayed.pins
        for i in items[replayed.resident[items]].tolist():
            if i not in pins:
                self.insert(i, self._last[i])
        for i in pins:
            self.pin(i)

    # ------------------------------------------------------------ the value
    def value(self, item: int, t: float) -> float:
        """The item's value at trace time ``t`` (what eviction and admission compare)."""
        ov = self._override.get(item)
        if ov is not None:
            return ov
        ty = self._type[item]
        b = self._base[item] + min(self.use_cap, self.use_boost * self._uses[item])
        return max(self.floor[ty], b * math.exp(-self.lam[ty] * (t - self._anchor[item])))

    def heap_entries(self) -> int:
        """Entries in the eviction heaps, live or stale (bounded by compaction)."""
        return sum(map(len, self._active)) + len(self._static)

    def _compact(self, lane: int) -> None:
        """Drop the stale entries of one heap (amortised O(1) per push: its limit doubles)."""
        heap, ver = self._heaps[lane], self._ver
        heap[:] = [e for e in heap if ver[e[2]] == e[3]]
        heapify(heap)
        self._limits[lane] = 2 * len(heap) + COMPACT_MIN

    # -------------------------------------------------------- the hot paths
    def _bind(self) -> None:
        """Set this stream's interface methods as closures over its state.

        The simulator looks the methods up once per stream, after ``reset``; closures read
        their state from cells instead of instance attributes, which makes the per-event path
        about a third cheaper in CPython.  Every interface method is set here, so each one
        sees the same state.  ``state[item]`` says whether the item has a live entry in the
        eviction heaps (ACTIVE: resident and unpinned).
        """
        insert, lowest = self._insert_fn(), self._lowest_fn()
        self.admit = self._admit_fn(lowest)
        self.insert = insert
        self.observe = self._observe_fn(insert)
        self.victims = self._victims_fn(lowest)
        self.pin, self.unpin, self.annotate = self._person_fns(insert)

    def _insert_fn(self) -> Callable[[int, int], None]:
        """``insert(item, now)``: the item enters the eviction order as used at event ``now``.

        Also how an item re-enters the order: after a use (``observe``), or at its last use
        after an unpin or an annotation (the decay clock ``anchor`` is always the time of event
        ``last``).  Decaying items go to their type's heap keyed ``log B + lam * anchor`` (the
        order of ``value`` within the type, forever), annotated items to the static heap keyed
        by value; the previous entry goes stale (its version is no longer the item's).
        """
        t_of, anchor, last, state, ver = self._t, self._anchor, self._last, self._state, self._ver
        base, log_base, lam_item, typ, uses = (
            self._base, self._log_base, self._lam_item, self._type, self._uses)  # fmt: skip
        override, heaps, limits, compact = self._override, self._heaps, self._limits, self._compact
        use_cap, use_boost, log = self.use_cap, self.use_boost, math.log

        def insert(item: int, now: int) -> None:
            t = t_of[now]
            anchor[item] = t
            last[item] = now
            state[item] = ACTIVE
            v = ver[item] + 1
            ver[item] = v
            ov = override.get(item) if override else None
            if ov is not None:
                lane, entry = STATIC, (ov, now, item, v)
            else:
                n = uses[item]
                if n:
                    b = base[item] + min(use_cap, use_boost * n)
                    k = log(b) if b > 1e-300 else -690.0
                else:
                    k = log_base[item]
                lane, entry = typ[item], (k + lam_item[item] * t, now, item, v)
            heap = heaps[lane]
            heappush(heap, entry)
            if len(heap) > limits[lane]:
                compact(lane)

        return insert

    def _admit_fn(self, lowest: Callable) -> Callable[[int, int, int], bool]:
        """``admit``: an item worth at least ``admit_threshold`` enters; one worth less enters
        too when it fits the free room, or when the items eviction would take to make room for
        it are all worth no more than it; otherwise (admitting would evict something worth
        more) it is declined.

        A write is judged by its value then (no decay yet, no use), a fetched item by its value
        now (or always let in, with ``admit_fetched``).  "Worth more" allows for float noise
        (``TIE_RTOL``), so that a tie is not decided by rounding.
        """
        t_of, base, override, value, tok = (
            self._t, self._base, self._override, self.value, self._tok)  # fmt: skip
        threshold, admit_fetched = self.admit_threshold, self.admit_fetched
        memory, budget = self.ctx.memory, self.ctx.budget

        def evicts_only_less(need: int, v: float, t: float) -> bool:
            """Would the victims freeing ``need`` tokens all be worth at most ``v``?  Peeks
            by popping them in eviction order, then pushes them back."""
            taken, freed, ok = [], 0, True
            while freed < need:
                first = lowest(t)
                if first is None or first[2] > v * (1.0 + TIE_RTOL):
                    ok = False
                    break
                heap, i, _ = first
                taken.append((heap, heappop(heap)))
                freed += tok[i]
            for heap, entry in taken:
                heappush(heap, entry)
            return ok

        def admit(item: int, now: int, reason: int) -> bool:
            if reason == ADMIT_FETCH:
                if admit_fetched:
                    return True
                v = value(item, t_of[now])
            else:
                ov = override.get(item) if override else None
                v = base[item] if ov is None else ov
            if not v < threshold:
                return True
            need = memory.used_tokens + tok[item] - budget
            return need <= 0 or evicts_only_less(need, v, t_of[now])

        return admit

    def _observe_fn(self, insert: Callable[[int, int], None]) -> Callable[[int, int], None]:
        """``observe``: each need counts a use and restarts the item's decay clock."""
        t_of, needs, needs_ptr = self._t, self._needs, self._needs_ptr
        uses, anchor, last, state = self._uses, self._anchor, self._last, self._state

        def observe(request: int, now: int) -> None:
            t = t_of[now]
            for j in range(needs_ptr[request], needs_ptr[request + 1]):
                i = needs[j]
                uses[i] += 1
                if state[i] == ACTIVE:
                    insert(i, now)  # re-enters the order with its new key
                else:
                    anchor[i] = t
                    last[i] = now

        return observe

    def _lowest_fn(self) -> Callable[[float], tuple | None]:
        """``lowest(t)``: the item eviction would take first at trace time ``t``, as
        ``(heap, item, value)``, or None when only pinned items (or none) are resident.

        The best of the heap tops: per type in the log domain (``log value = k - lam * t``),
        moving items that reached their floor to the static heap on the way (they stay floored:
        time only moves forward), then the static heap's top.  Ties: least recently used, then
        item index.  Stale entries on top are dropped; nothing else changes.
        """
        ver, static, limits, compact = self._ver, self._static, self._limits, self._compact
        lanes = list(zip(self._active, self.lam, self.log_floor, self.floor))
        exp, inf = math.exp, math.inf

        def lowest(t: float) -> tuple | None:
            best_heap = None
            best_lv = inf
            best_last = best_i = 0
            for heap, lam, log_floor, floor in lanes:
                while heap:
                    k, lst, i, v = heap[0]
                    if ver[i] != v:  # stale
                        heappop(heap)
                        continue
                    lv = k - lam * t
                    if lv <= log_floor:  # reached the floor: a constant value from now on
                        heappop(heap)
                        heappush(static, (floor, lst, i, v))
                        continue
                    if lv < best_lv or (lv == best_lv and (lst, i) < (best_last, best_i)):
                        best_lv, best_last, best_i, best_heap = lv, lst, i, heap
                    break
            if len(static) > limits[STATIC]:
                compact(STATIC)
            best_v = exp(best_lv) if best_heap is not None else inf
            while static:  # floored or annotated: constant values
                val, lst, i, v = static[0]
                if ver[i] != v:
                    heappop(static)
                    continue
                if (
                    best_heap is None
                    or val < best_v
                    or (val == best_v and (lst, i) < (best_last, best_i))
                ):
                    best_heap, best_i, best_v = static, i, val
                break
            return None if best_heap is None else (best_heap, best_i, best_v)

        return lowest

    def _victims_fn(self, lowest: Callable) -> Callable[[int, int], list[int]]:
        """``victims``: take the least valuable item (``lowest``) until the excess is
        covered."""
        t_of, tok, ver, state = self._t, self._tok, self._ver, self._state

        def victims(excess: int, now: int) -> list[int]:
            t = t_of[now]
            out: list[int] = []
            freed = 0
            while freed < excess:
                first = lowest(t)
                if first is None:
                    break  # only pinned items left: the simulator will not ask
                heap, i, _ = first
                heappop(heap)
                ver[i] += 1
                state[i] = ABSENT
                out.append(i)
                freed += tok[i]
            return out

        return victims

    def _person_fns(self, insert: Callable[[int, int], None]):
        """``pin``, ``unpin`` and ``annotate``: a person's word on an item.  An unpinned or
        annotated item re-enters the order as of its last use (its clock does not restart)."""
        state, ver, override, last = self._state, self._ver, self._override, self._last

        def pin(item: int) -> None:
            state[item] = PINNED
            ver[item] += 1  # its heap entry is now stale

        def unpin(item: int) -> None:
            if state[item] == PINNED:
                insert(item, last[item])

        def annotate(item: int, val: float | None, note: str | None, now: int) -> None:
            if val is None:
                return  # a note alone leaves the value as it is
            override[item] = float(val)
            if state[item] == ACTIVE:
                insert(item, last[item])

        return pin, unpin, annotate
