"""The lower tiers: what happens to items after they leave working memory.

* Short-term cache (STC): bounded in tokens per stream (``short_term_tokens``); the item that
  entered it longest ago leaves first (LRU: an item re-enters as the newest), optional TTL in
  trace seconds; what it evicts moves to the long-term store.  An item larger than the whole
  STC goes straight to the LTS.
* Long-term store (LTS): unbounded; holds everything that left working memory and the STC.

The tiers are driven by the simulator's working-memory move log (``SimResult.move_*``):
a WM eviction or a declined write enters the STC, a fetch, pin or promotion takes the item back
into WM from wherever it is.  :class:`TierState` is that machine.  Two drivers use it:

* post hoc (:func:`replay_tiers`): after the replay, over the whole move log.  Without
  request-time retrieval nothing below WM changes what the agent sees, so this keeps the hot
  replay loop free of tier bookkeeping and lets the compiled kernels serve every run;
* live (:mod:`memlens.retrieval.assemble`): at each request, the moves logged since the
  previous request are applied, so the state is current when the context is assembled.

TTL expiry is applied lazily, at the next event that looks at the stream's STC: a move, or a
request (both drivers tick at every request when a TTL is set, so they log identical moves).

A listener (the LTS index) is told when an item enters or leaves the LTS.
Every move is recorded as (event, item, from tier, to tier).
"""

from __future__ import annotations

import math
from array import array
from collections import OrderedDict
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np

from memlens.setting_values import number
from memlens.simulator import MOVE_ADMIT, MOVE_BYPASS, MOVE_EVICT, SimResult
from memlens.trace import Trace

NOWHERE, WM, STC, LTS = -1, 0, 1, 2
SHORT_TERM_POLICIES = ("lru", "fifo")


@dataclass
class TiersConfig:
    """The ``tiers:`` settings block (typed; checked when a command's config is resolved)."""

    short_term_tokens: int = 8192  # short-term cache capacity in tokens (per stream)
    ttl_s: float | None = None  # optional time-to-live in the short-term cache (trace seconds)
    short_term_policy: str = "lru"  # lru (retrieval use refreshes an entry) | fifo
    short_term_latency_ms: float = 1.0  # configured latency of a short-term cache lookup
    long_term_latency_ms: float = 20.0  # configured latency of a long-term store query

    def __post_init__(self) -> None:
        # token counts below 2**62, like budgets: sums of them must not overflow int64
        number("tiers.short_term_tokens", self.short_term_tokens, low=0, below=2**62, integer=True)
        if self.ttl_s is not None and not (math.isfinite(self.ttl_s) and self.ttl_s > 0):
            raise ValueError(f"tiers.ttl_s must be > 0 seconds (finite) or null, got {self.ttl_s}")
        if self.short_term_policy not in SHORT_TERM_POLICIES:
            raise ValueError(
                f"tiers.short_term_policy must be lru or fifo, got {self.short_term_policy!r}"
            )
        for key in ("short_term_latency_ms", "long_term_latency_ms"):
            number(f"tiers.{key}", getattr(self, key), low=0)


TIER_NAMES = {NOWHERE: "new", WM: "wm", STC: "stc", LTS: "lts"}


@dataclass
class TierLog:
    event: np.ndarray  # int64
    item: np.ndarray  # int32
    src: np.ndarray  # int8 tier
    dst: np.ndarray  # int8 tier
    final_tier: np.ndarray  # int8 per item

    def counts(self) -> dict[str, int]:
        """Moves per (from, to) pair, as ``"wm->stc": n`` sorted by name."""
        pairs = np.bincount((self.src + 1) * 4 + (self.dst + 1), minlength=16)  # int8: 0..15
        out = {f"{TIER_NAMES[a - 1]}->{TIER_NAMES[b - 1]}": int(pairs[4 * a + b])
               for a in range(4) for b in range(4) if pairs[4 * a + b]}  # fmt: skip
        return dict(sorted(out.items()))


class TierState:
    """Where every item is (WM, STC, LTS), the STC's LRU order, and the move log."""

    def __init__(self, trace: Trace, short_term_tokens: int, ttl_s: float | None = None,
                 listener=None):  # fmt: skip
        if short_term_tokens < 0:
            raise ValueError("short_term_tokens must be >= 0")
        if ttl_s is not None and ttl_s < 0:
            raise ValueError("ttl_s must be >= 0 or null")
        self.capacity = int(short_term_tokens)
        self.ttl_s = None if ttl_s is None else float(ttl_s)
        # per-item columns read in place and a compact move log (no Python int per item or per
        # move: a replay of tens of millions of events logs tens of millions of moves)
        self.tokens = _view(trace.item_tokens, np.int64)
        self.item_stream = _view(trace.item_stream, np.int32)
        self.ev_t = trace.ev_t
        self.where = array("b", [NOWHERE]) * trace.n_items
        #: per stream: item -> trace time it entered the STC, oldest first
        self.stc: list[OrderedDict[int, float]] = [OrderedDict() for _ in range(trace.n_streams)]
        self.stc_used = [0] * trace.n_streams
        self.listener = listener
        self._e, self._i, self._s, self._d = array("q"), array("i"), array("b"), array("b")

    # ------------------------------------------------------------------ moves
    def _move(self, e: int, i: int, dst: int) -> None:
        src = self.where[i]
        self._e.append(e)
        self._i.append(i)
        self._s.append(src)
        self._d.append(dst)
        self.where[i] = dst
        if self.listener is not None:
            if src == LTS:
                self.listener.lts_leave(i)
            if dst == LTS:
                self.listener.lts_enter(i, e)

    def _to_stc(self, e: int, i: int, now: float) -> None:
        s = self.item_stream[i]
        if self.tokens[i] > self.capacity:
            self._move(e, i, LTS)
            return
        self._move(e, i, STC)
        q = self.stc[s]
        q[i] = now
        self.stc_used[s] += self.tokens[i]
        while self.stc_used[s] > self.capacity:
            old, _ = q.popitem(last=False)
            self.stc_used[s] -= self.tokens[old]
            self._move(e, old, LTS)

    def tick(self, e: int, s: int) -> None:
        """Event ``e`` of stream ``s`` happens: expire STC entries older than the TTL."""
        if self.ttl_s is None:
            return
        now = float(self.ev_t[e])
        q = self.stc[s]
        while q:
            old, since = next(iter(q.items()))
            if now - since <= self.ttl_s:
                break
            del q[old]
            self.stc_used[s] -= self.tokens[old]
            self._move(e, old, LTS)

    def touch(self, i: int, e: int) -> None:
        """Retrieval used STC item ``i`` at event ``e``: it becomes the cache's newest (LRU)."""
        if self.where[i] == STC:
            q = self.stc[self.item_stream[i]]
            del q[i]
            q[i] = float(self.ev_t[e])

    def apply(self, e: int, i: int, kind: int) -> None:
        """Apply one working-memory move (a ``MOVE_*`` kind from the simulator)."""
        self.tick(e, self.item_stream[i])
        if kind == MOVE_ADMIT:
            self._move(e, i, WM)
        elif kind in (MOVE_BYPASS, MOVE_EVICT):
            self._to_stc(e, i, float(self.ev_t[e]))
        else:  # fetch, pin or promotion: back into WM from wherever it is
            if self.where[i] == STC:
                s = self.item_stream[i]
                del self.stc[s][i]
                self.stc_used[s] -= self.tokens[i]
            self._move(e, i, WM)

    def log(self, copy: bool = True) -> TierLog:
        """The moves so far: copies, or (``copy=False``, when no move follows) views of the
        state's own buffers, which then cannot grow."""
        col = np.array if copy else np.frombuffer
        return TierLog(
            event=col(self._e, dtype=np.int64),
            item=col(self._i, dtype=np.int32),
            src=col(self._s, dtype=np.int8),
            dst=col(self._d, dtype=np.int8),
            final_tier=col(self.where, dtype=np.int8),
        )


def _view(values: np.ndarray, dtype) -> memoryview:
    """A trace column to index from Python: a memoryview reads one element about as fast as a
    list and, unlike ``tolist()`` or an ``array`` copy, costs no memory (no copy when the
    column already has ``dtype``)."""
    return memoryview(np.ascontiguousarray(values, dtype=dtype))


_STEP = 1 << 16  # schedule entries made into Python objects at a time


def merged_schedule(trace: Trace, result: SimResult, ticks: bool
                    ) -> Iterator[tuple[int, int, int]]:  # fmt: skip
    """(event, item or -1, kind or request index) in replay order: moves, then request ticks.

    A request's tick comes before the moves logged at the request's own event (its hits are
    decided before its updates).  Request entries are ``(event, -1, r)``.  Yielded lazily, a
    block at a time (the whole schedule as tuples would cost ~200 bytes per move).
    """
    n_moves = result.move_event.shape[0]
    if ticks:  # merge by (event, requests first, then file order): one stable sort
        events = np.concatenate([trace.req_event.astype(np.int64), result.move_event])
        is_move = np.concatenate([np.zeros(trace.n_requests, np.int8), np.ones(n_moves, np.int8)])
        order = np.lexsort((is_move, events))  # lexsort is stable: ties keep file order
        del events, is_move
    else:
        order = None
    n = n_moves + (trace.n_requests if ticks else 0)
    for lo in range(0, n, _STEP):
        idx = np.arange(lo, min(n, lo + _STEP)) if order is None else order[lo : lo + _STEP]
        move = idx >= (trace.n_requests if ticks else 0)
        m = idx - (trace.n_requests if ticks else 0)
        mi = np.where(move, m, 0)
        ri = np.where(move, 0, idx)
        ev = np.where(move, result.move_event[mi] if n_moves else 0, trace.req_event[ri]
                      if trace.n_requests else 0)  # fmt: skip
        item = np.where(move, result.move_item[mi] if n_moves else 0, -1)
        kind = np.where(move, result.move_kind[mi] if n_moves else 0, ri)
        yield from zip(ev.tolist(), item.tolist(), kind.tolist())


def replay_tiers(
    trace: Trace, result: SimResult, short_term_tokens: int, ttl_s: float | None = None
) -> TierLog:
    """Replay the WM move log through the STC and LTS after the fact (no retrieval)."""
    state = TierState(trace, short_term_tokens, ttl_s)
    stream = trace.req_stream.tolist()
    for e, i, k in merged_schedule(trace, result, ticks=ttl_s is not None):
        if i < 0:
            state.tick(e, stream[k])
        else:
            state.apply(e, i, k)
    return state.log(copy=False)  # the replay is over: no copy of the (large) move log
