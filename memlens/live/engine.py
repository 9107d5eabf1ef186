"""The live engine: the reference replay's own event handlers, fed one event at a time.

Live and replay must not drift apart, so nothing here re-implements a rule of the simulator:
:class:`StreamEngine` *is* ``memlens.simulator``'s ``_Replay`` for one stream, with its columns
taken from a growing :class:`memlens.live.columns.LiveColumns` instead of a loaded trace, and
the handlers ``_Replay.start`` builds called as events arrive instead of in a loop.  Streams are
independent agents (the replay resets the policy per stream), so each stream has its engine and
its own policy instance; the columns and the per-item marks (residency, uses, hits) are shared,
indexed like the record's trace.

A policy follows the growth through ``grow`` (``Policy.grows``); :class:`LiveState` holds what
the engines share, and :func:`replay_into` rebuilds it from a loaded record (reopening).
"""

from __future__ import annotations

import gc
from collections.abc import Callable

import numpy as np

from memlens.live.columns import LiveColumns
from memlens.policy import Policy, WorkingMemory
from memlens.simulator import MOVE_EVICT, MoveKind, SimResult, _Replay
from memlens.trace.model import EventKind, Trace

ENTERS = frozenset({int(MoveKind.ADMIT), int(MoveKind.FETCH), int(MoveKind.PIN),
                    int(MoveKind.PROMOTE)})  # fmt: skip


class LiveState:
    """What every stream's engine shares: the columns and the per-item and per-need marks."""

    def __init__(self, columns: LiveColumns, annotations: dict | None = None) -> None:
        n, refs, requests = columns.n_items, len(columns.needs), columns.n_requests
        self.columns = columns
        self.in_wm = bytearray(n)
        self.uses_seen = [0] * n
        # a live session does not know future uses: false evictions are the replay's to count
        self.n_uses = [0] * n
        self.need_hit = bytearray(refs)
        self.context_tokens = [0] * requests
        self.pinned_tokens_at = [0] * requests
        self.annotations: dict[int, tuple[float | None, str | None]] = dict(annotations or {})
        self.stream_items: list[list[int]] = []
        if n:  # every stream's items in write order: one stable sort, not a loop per item
            streams = np.asarray(columns.item_stream, np.int64)
            order = np.argsort(streams, kind="stable")
            ends = np.cumsum(np.bincount(streams)).tolist()
            self.stream_items = [order[a:b].tolist() for a, b in zip([0, *ends[:-1]], ends)]

    def items_of(self, s: int) -> list[int]:
        """Stream ``s``'s items in write order (the list grows with the stream)."""
        while len(self.stream_items) <= s:
            self.stream_items.append([])
        return self.stream_items[s]

    def grow_item(self, i: int) -> None:
        """Item ``i`` was added to the columns: give it its marks."""
        self.in_wm.append(0)
        self.uses_seen.append(0)
        self.n_uses.append(0)
        self.items_of(self.columns.item_stream[i]).append(i)

    def grow_request(self) -> None:
        """A request was added to the columns: give it and its needs their marks."""
        self.need_hit.extend(bytes(len(self.columns.needs) - len(self.need_hit)))
        self.context_tokens.append(0)
        self.pinned_tokens_at.append(0)


class LiveMemory(WorkingMemory):
    """``WorkingMemory`` over the live columns: its stream's item list grows in place."""

    __slots__ = ("_stream_items",)

    def __init__(self, counters, columns: LiveColumns, stream: int, in_wm: bytearray,
                 pins: dict[int, None], stream_items: list[int]) -> None:  # fmt: skip
        super().__init__(counters, columns, stream, in_wm, pins)  # reads columns.item_stream
        self._stream_items = stream_items

    def items(self) -> list[int]:
        in_wm = self._in_wm
        return [i for i in self._stream_items if in_wm[i]]


class StreamEngine(_Replay):
    """The reference engine of one stream, fed event by event (module docstring)."""

    def __init__(self, state: LiveState, trace: Trace, policy: Policy, budget: int,
                 demand_fetch: bool, stream: int, seed: int, replaying: bool = False) -> None:  # fmt: skip
        # _Replay.__init__ copies a fixed trace's columns; these are the growing ones instead
        cols = self.columns = state.columns
        self.state, self.trace, self.policy, self.budget = state, trace, policy, budget
        self.demand_fetch, self.hook = demand_fetch, None
        self.tokens, self.item_stream = cols.item_tokens, cols.item_stream
        self.needs_ptr, self.needs, self.groups = cols.needs_ptr, cols.needs, cols.groups
        self.n_uses, self.uses_seen = state.n_uses, state.uses_seen
        self.in_wm, self.need_hit = state.in_wm, state.need_hit
        self.context_tokens, self.pinned_tokens_at = state.context_tokens, state.pinned_tokens_at
        self.mv_event: list[int] = []
        self.mv_item: list[int] = []
        self.mv_kind = bytearray()
        self.log = (self.mv_event.append, self.mv_item.append, self.mv_kind.append)
        self.stream_items = state.items_of(stream)
        self.resident: dict[int, None] = {}  # resident items, kept from the move log
        self._moves_seen = 0
        # replaying a record without alternatives: the plain request path (the same decisions,
        # fewer steps per need) until ``go_live`` switches to the one that takes any need
        self._plain = replaying and not trace.has_alternatives
        self.start(stream, seed)
        self._grow: Callable | None = policy.grow if _grows(policy) else None

    # --------------------------------------------------------- _Replay hooks
    def _memory_view(self, s: int) -> WorkingMemory:
        return LiveMemory(self, self.columns, s, self.in_wm, self.pins, self.stream_items)

    def _request_fn(self, bring_back):
        # needs with alternatives may come at any time: the group path, which on plain needs
        # does exactly what the plain path does (simulator docstring)
        if self._plain:
            return super()._request_fn(bring_back)
        return self._group_request_fn(bring_back)

    def go_live(self) -> None:
        """After a replay on the plain request path: requests from now on may have groups."""
        if self._plain:
            self._plain = False
            bring_back = self._bring_back_fn(self._enter_fn())
            self.handlers[int(EventKind.REQUEST)] = self._group_request_fn(bring_back)

    def _annotate_fn(self):
        annotations, policy = self.state.annotations, self.policy

        def annotate(x: int, e: int) -> None:
            value, note = annotations[e]
            policy.annotate(x, value, note, e)

        return annotate

    def restore(self, replayed, moves: tuple, evicted: int) -> None:
        """Just after ``__init__``: the state this stream's events leave, from a kernel's replay
        of them (``memlens.live.restore``): its moves, pins, counters, then its policy's."""
        events, items, kinds = moves
        self.mv_event.extend(events.tolist())
        self.mv_item.extend(items.tolist())
        self.mv_kind.extend(kinds.astype(np.uint8).tobytes())
        self.pins.update(replayed.pins)  # the dict the memory view shows: in place
        tokens = np.asarray(self.trace.item_tokens, np.int64)
        own = replayed.items
        self.used = int(tokens[own[replayed.resident[own]]].sum())
        self.pinned_tok = int(tokens[list(self.pins)].sum()) if self.pins else 0
        self.n_evicted = evicted
        self.policy.restore(replayed)

    # ------------------------------------------------------------ feeding
    def apply(self, kind: int, ref: int, e: int) -> None:
        """Event ``e`` (of this stream, already in the columns): the policy catches up with
        the columns, then the replay's handler runs; the resident set follows its moves."""
        if self._grow is not None:
            self._grow(self.columns)
        self.handlers[kind](ref, e)
        self.sync_resident()

    def sync_resident(self) -> None:
        """Bring ``resident`` up to date with the moves logged since the last call."""
        kinds, items, resident = self.mv_kind, self.mv_item, self.resident
        if len(kinds) - self._moves_seen > BULK_MOVES:  # after a reopen's replay
            self._sync_resident_bulk()
            return
        for k in range(self._moves_seen, len(kinds)):
            if kinds[k] == MOVE_EVICT:
                del resident[items[k]]
            elif kinds[k] in ENTERS:
                resident[items[k]] = None
        self._moves_seen = len(kinds)

    def _sync_resident_bulk(self) -> None:
        """``sync_resident`` over many moves at once: what decides whether an item is resident
        is its last move that enters or evicts it (the others, bypasses, leave it where it
        was), found with numpy instead of a Python step per move."""
        lo = self._moves_seen
        kinds = np.frombuffer(self.mv_kind, np.int8)[lo:].astype(np.int64)
        items = np.asarray(self.mv_item[lo:], np.int64)
        enters = np.isin(kinds, sorted(ENTERS))
        decisive = enters | (kinds == MOVE_EVICT)
        rev_items = items[decisive][::-1]
        last_items, first_in_rev = np.unique(rev_items, return_index=True)
        entered = enters[decisive][::-1][first_in_rev]
        resident = self.resident
        for i in last_items[~entered].tolist():
            resident.pop(i, None)
        for i in last_items[entered].tolist():
            resident[i] = None
        self._moves_seen = len(self.mv_kind)


BULK_MOVES = 4096  # moves from which ``sync_resident`` takes the numpy path


def _grows(policy: Policy) -> bool:
    """Whether ``grow`` does something for ``policy`` (declared, and not the base no-op)."""
    return getattr(type(policy), "grow", None) is not Policy.grow


def stream_policy(make_policy: Callable[[], Policy], engines: list[StreamEngine]) -> Policy:
    """A new stream's policy instance, sharing the first stream's per-trace state (all the
    engines' policies are reset on the same trace: ``Policy.share_trace_state``)."""
    policy = make_policy()
    if engines:
        policy.share_trace_state(engines[0].policy)
    return policy


def replay_into(state: LiveState, trace: Trace, make_policy: Callable[[], Policy], budget: int,
                demand_fetch: bool, seed: int) -> list[StreamEngine]:  # fmt: skip
    """One engine per stream of ``trace`` (the reopened record), each fed its stream's events:
    the state a live session had when the record was last appended to."""
    collecting = gc.isenabled()
    gc.disable()  # no reference cycles are made here, only millions of heap entries to scan
    try:
        return _replay_streams(state, trace, make_policy, budget, demand_fetch, seed)
    finally:
        if collecting:
            gc.enable()


def _replay_streams(state: LiveState, trace: Trace, make_policy: Callable[[], Policy],
                    budget: int, demand_fetch: bool, seed: int) -> list[StreamEngine]:  # fmt: skip
    kinds, refs = trace.ev_kind.tolist(), trace.ev_ref.tolist()
    engines: list[StreamEngine] = []
    for s in range(trace.n_streams):
        engine = StreamEngine(state, trace, stream_policy(make_policy, engines), budget,
                              demand_fetch, s, seed, replaying=True)  # fmt: skip
        handlers = engine.handlers
        for e in trace.stream_events[s].tolist():
            handlers[kinds[e]](refs[e], e)
        engine.go_live()
        engine.sync_resident()
        engines.append(engine)
    return engines


def session_result(state: LiveState, engines: list[StreamEngine], policy: str, budget: int,
                   demand_fetch: bool) -> SimResult:  # fmt: skip
    """The live session as a ``SimResult`` (moves in record order), to compare with a replay of
    its record; false evictions are zero: they need the future, which a replay has."""
    ev = np.concatenate(
        [np.asarray(g.mv_event, np.int64) for g in engines] or [np.zeros(0, np.int64)]
    )
    it = np.concatenate(
        [np.asarray(g.mv_item, np.int32) for g in engines] or [np.zeros(0, np.int32)]
    )
    kd = np.concatenate([np.frombuffer(bytes(g.mv_kind), np.int8) for g in engines]
                        or [np.zeros(0, np.int8)])  # fmt: skip
    order = np.argsort(ev, kind="stable")  # one event's moves all come from its stream
    return SimResult(
        budget=budget,
        demand_fetch=demand_fetch,
        policy=policy,
        engine="live",
        need_hit=np.frombuffer(bytes(state.need_hit), np.uint8).copy(),
        context_tokens=np.asarray(state.context_tokens, np.int64),
        pinned_tokens=np.asarray(state.pinned_tokens_at, np.int64),
        evictions=np.asarray([g.n_evicted for g in engines], np.int64),
        false_evictions=np.zeros(len(engines), np.int64),
        move_event=ev[order],
        move_item=it[order],
        move_kind=kd[order],
    )
