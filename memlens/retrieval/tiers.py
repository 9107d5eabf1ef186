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
  replay loop free of tier bookkeeping and lets the compiled kernels serve every run.  It is
  itself compiled (numba), and tested move for move against :func:`replay_tiers_reference`,
  the same replay through :class:`TierState`;
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

import numba
import numpy as np

from memlens._util.values import number
from memlens.kernels.linked import append, unlink
from memlens.simulator import MOVE_ADMIT, MOVE_BYPASS, MOVE_EVICT, SimResult
from memlens.trace.model import Trace

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

    def expiring(self, s: int, now: float) -> bool:
        """Whether a tick of stream ``s`` at trace time ``now`` would expire an entry."""
        q = self.stc[s]
        return self.ttl_s is not None and bool(q) and not now - next(iter(q.values())) <= self.ttl_s

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


class GrowingTierState(TierState):
    """A :class:`TierState` over a trace that grows while an agent runs (the live manager's
    incremental retrieval): the per-item and per-event columns are the live session's own
    lists (``memlens.live.columns``), read in place, and :meth:`grow` gives new items and
    streams their place.  The moves are :class:`TierState`'s own."""

    def __init__(self, tokens: list[int], item_stream: list[int], ev_t: list[float],
                 short_term_tokens: int, ttl_s: float | None = None, listener=None) -> None:  # fmt: skip
        if short_term_tokens < 0:
            raise ValueError("short_term_tokens must be >= 0")
        self.capacity = int(short_term_tokens)
        self.ttl_s = None if ttl_s is None else float(ttl_s)
        self.tokens, self.item_stream, self.ev_t = tokens, item_stream, ev_t
        self.where = array("b")
        self.stc: list[OrderedDict[int, float]] = []
        self.stc_used: list[int] = []
        self.listener = listener
        self._e, self._i, self._s, self._d = array("q"), array("i"), array("b"), array("b")

    def grow(self, n_items: int, n_streams: int) -> None:
        """Items up to ``n_items`` (new ones nowhere yet) and streams up to ``n_streams``."""
        self.where.extend([NOWHERE] * (n_items - len(self.where)))
        while len(self.stc) < n_streams:
            self.stc.append(OrderedDict())
            self.stc_used.append(0)


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


def replay_tiers_reference(
    trace: Trace, result: SimResult, short_term_tokens: int, ttl_s: float | None = None
) -> TierLog:
    """:func:`replay_tiers` through :class:`TierState`, one Python call per move: the
    definition the compiled kernel is tested against (``tests/runs/test_compare_fast.py``)."""
    state = TierState(trace, short_term_tokens, ttl_s)
    stream = trace.req_stream.tolist()
    for e, i, k in merged_schedule(trace, result, ticks=ttl_s is not None):
        if i < 0:
            state.tick(e, stream[k])
        else:
            state.apply(e, i, k)
    return state.log(copy=False)  # the replay is over: no copy of the (large) move log


# ------------------------------------------------------------------ compiled post-hoc driver
# The STC of each stream is an intrusive doubly linked list over item indices, oldest at the
# head (``memlens.kernels.linked``, the queues the LRU kernel keeps): ``prev, nxt`` per item,
# ``head, tail`` per stream.  ``oe, oi, osrc, odst``: the (event, item, from, to) columns of
# the move log, ``m`` the moves written so far.  Every array is its own argument, and an entry
# into the STC is written out in the loop: helpers taking the arrays as tuples (``*lists``,
# ``*out``), and one taking nineteen arguments per eviction, made the calls cost more than the
# work (0.128 s against 0.044 s for the 1.4M moves of a 5,800-stream trace; issue 34).
@numba.njit(cache=True, nogil=True)
def _record(m, e, i, dst, where, oe, oi, osrc, odst):
    oe[m] = e
    oi[m] = i
    osrc[m] = where[i]
    odst[m] = dst
    where[i] = dst
    return m + 1


@numba.njit(cache=True, nogil=True)
def _expire(m, e, s, ttl, ev_t, since, tokens, used, in_q, prev, nxt, head, tail, where, oe,
            oi, osrc, odst):  # fmt: skip
    """``TierState.tick``: STC entries of stream ``s`` older than ``ttl`` move to the LTS."""
    now = ev_t[e]
    while head[s] != -1 and not (now - since[head[s]] <= ttl):
        m = _oldest_to_lts(m, e, s, tokens, used, in_q, prev, nxt, head, tail, where, oe, oi,
                           osrc, odst)  # fmt: skip
    return m


@numba.njit(cache=True, nogil=True)
def _oldest_to_lts(m, e, s, tokens, used, in_q, prev, nxt, head, tail, where, oe, oi, osrc,
                   odst):  # fmt: skip
    """The oldest STC entry of stream ``s`` moves to the LTS."""
    old = head[s]
    unlink(old, s, prev, nxt, head, tail)
    in_q[old] = False
    used[s] -= tokens[old]
    return _record(m, e, old, LTS, where, oe, oi, osrc, odst)


@numba.njit(cache=True, nogil=True)
def _tier_kernel(schedule, n_req, req_event, req_stream, move_event, move_item, move_kind,
                 tokens, item_stream, n_streams, ev_t, capacity, ttl, where, oe, oi, osrc,
                 odst):  # fmt: skip
    """``TierState.apply`` / ``tick`` over the whole schedule (``schedule[p] < n_req``: the
    tick of request ``schedule[p]``, else move ``schedule[p] - n_req``); returns the number
    of moves written to ``oe, oi, osrc, odst``.  ``ttl < 0``: no TTL."""
    n_items = tokens.shape[0]
    prev, nxt = np.full(n_items, -1, np.int64), np.full(n_items, -1, np.int64)
    head, tail = np.full(n_streams, -1, np.int64), np.full(n_streams, -1, np.int64)
    since, in_q = np.zeros(n_items), np.zeros(n_items, np.bool_)
    used = np.zeros(n_streams, np.int64)
    m = 0
    for p in range(schedule.shape[0]):
        idx = schedule[p]
        if idx < n_req:
            if ttl >= 0:
                m = _expire(m, req_event[idx], req_stream[idx], ttl, ev_t, since, tokens, used,
                            in_q, prev, nxt, head, tail, where, oe, oi, osrc, odst)  # fmt: skip
            continue
        e, i, kind = move_event[idx - n_req], move_item[idx - n_req], move_kind[idx - n_req]
        s = item_stream[i]
        if ttl >= 0:
            m = _expire(m, e, s, ttl, ev_t, since, tokens, used, in_q, prev, nxt, head, tail,
                        where, oe, oi, osrc, odst)  # fmt: skip
        if kind == MOVE_ADMIT:
            m = _record(m, e, i, WM, where, oe, oi, osrc, odst)
        elif (kind == MOVE_BYPASS or kind == MOVE_EVICT) and tokens[i] > capacity:
            m = _record(m, e, i, LTS, where, oe, oi, osrc, odst)  # too large for the STC
        elif kind == MOVE_BYPASS or kind == MOVE_EVICT:  # ``TierState._to_stc``: the newest
            m = _record(m, e, i, STC, where, oe, oi, osrc, odst)  # entry (an entry already
            since[i] = ev_t[e]  # there keeps its place, as an ``OrderedDict`` key does)
            if not in_q[i]:
                append(i, s, prev, nxt, head, tail)
                in_q[i] = True
            used[s] += tokens[i]
            while used[s] > capacity:  # the oldest entries overflow to the LTS
                m = _oldest_to_lts(m, e, s, tokens, used, in_q, prev, nxt, head, tail, where,
                                   oe, oi, osrc, odst)  # fmt: skip
        else:  # fetch, pin or promotion: back into WM from wherever it is
            if where[i] == STC:
                unlink(i, s, prev, nxt, head, tail)
                in_q[i] = False
                used[s] -= tokens[i]
            m = _record(m, e, i, WM, where, oe, oi, osrc, odst)
    return m


def tier_schedule(trace: Trace, result: SimResult, ticks: bool) -> np.ndarray:
    """The kernel's schedule: ``merged_schedule``'s order as one int64 column (request ``r`` is
    ``r``, move ``k`` is ``n_requests + k``); without ticks, the moves in log order."""
    n_req, n_moves = trace.n_requests, result.move_event.shape[0]
    if not ticks:
        return np.arange(n_req, n_req + n_moves, dtype=np.int64)
    events = np.concatenate([trace.req_event.astype(np.int64), result.move_event])
    is_move = np.concatenate([np.zeros(n_req, np.int8), np.ones(n_moves, np.int8)])
    return np.lexsort((is_move, events)).astype(np.int64, copy=False)  # stable: file order


def replay_tiers(
    trace: Trace, result: SimResult, short_term_tokens: int, ttl_s: float | None = None
) -> TierLog:
    """Replay the WM move log through the STC and LTS after the fact (no retrieval).

    Compiled: the same moves, in the same order, as :func:`replay_tiers_reference`, at a
    fraction of the cost (that loop was about 30% of a large ``compare`` before compare
    stopped asking for tiers, and is most of ``simulate``'s analysis time)."""
    if short_term_tokens < 0:
        raise ValueError("short_term_tokens must be >= 0")
    if ttl_s is not None and ttl_s < 0:
        raise ValueError("ttl_s must be >= 0 or null")
    kind = result.move_kind
    # each STC -> LTS move follows its own entry into the STC (a bypass or an eviction)
    cap = kind.shape[0] + int(np.count_nonzero((kind == MOVE_BYPASS) | (kind == MOVE_EVICT)))
    out = (np.empty(cap, np.int64), np.empty(cap, np.int32), np.empty(cap, np.int8),
           np.empty(cap, np.int8))  # fmt: skip
    where = np.full(trace.n_items, NOWHERE, np.int8)
    m = _tier_kernel(
        tier_schedule(trace, result, ttl_s is not None), trace.n_requests,
        np.ascontiguousarray(trace.req_event, np.int64), np.ascontiguousarray(trace.req_stream),
        np.ascontiguousarray(result.move_event, np.int64), np.ascontiguousarray(result.move_item),
        np.ascontiguousarray(kind), np.ascontiguousarray(trace.item_tokens, np.int64),
        np.ascontiguousarray(trace.item_stream), trace.n_streams,
        np.ascontiguousarray(trace.ev_t, np.float64), int(short_term_tokens),
        -1.0 if ttl_s is None else float(ttl_s), where, *out,
    )  # fmt: skip
    cols = [c[:m] if m == cap else c[:m].copy() for c in out]  # no unused tail kept alive
    return TierLog(event=cols[0], item=cols[1], src=cols[2], dst=cols[3], final_tier=where)
