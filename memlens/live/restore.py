"""Reopening a record with the compiled kernel: its replay's facts handed to each stream's
engine and policy, instead of the reference handlers stepped through every event.

Stepping a million-event record through the handlers costs a Python step per event: for the
rule scorer most of a reopen.  A policy with a compiled kernel and ``restore``
(``memlens.policy``) is replayed by its kernel instead, which returns the reference engine's
result exactly (``memlens.checker`` checks every registration event for event).  From that
result and the record's events follows everything the handlers would have left:

* shared by the streams: residency (the last move that entered or evicted each item), hit
  marks, the context and pinned tokens at each request, the use counts;
* per stream: its moves in order (the live session's move log), its pins in pin order (the
  pin and unpin events, replayed: a handful), its token counters and evictions;
* the policy's own state, which it rebuilds from :class:`memlens.policy.ReplayedStream`.

``tests/live/test_restore.py`` compares the restored engines and policies with the stepped
replay's, and the live-equals-replay tests reopen sessions part way through this path.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from memlens.live.engine import ENTERS, LiveState, StreamEngine, stream_policy
from memlens.policy import Policy, ReplayedStream, kernel_of
from memlens.simulator import MOVE_EVICT, SimResult
from memlens.trace.model import EventKind, Trace


def restore_into(state: LiveState, trace: Trace, make_policy: Callable[[], Policy], budget: int,
                 demand_fetch: bool, seed: int) -> list[StreamEngine]:  # fmt: skip
    """``memlens.live.engine.replay_into`` by the kernel: one engine per stream of ``trace``
    (the reopened record), in the state its events leave (module docstring)."""
    from memlens.kernels import run_kernel

    policy = make_policy()
    result = run_kernel(kernel_of(policy), policy, trace, budget, demand_fetch, seed)
    facts = _Facts(trace, result)
    facts.restore_shared(state)
    engines: list[StreamEngine] = []
    for s in range(trace.n_streams):
        engine = StreamEngine(state, trace, stream_policy(make_policy, engines), budget,
                              demand_fetch, s, seed, replaying=True)  # fmt: skip
        replayed = facts.stream(s, np.asarray(state.items_of(s), np.int64))
        engine.restore(replayed, facts.moves(s), int(result.evictions[s]))
        engine.go_live()
        engine.sync_resident()
        engines.append(engine)
    return engines


class _Facts:
    """The per-item facts of one kernel replay of ``trace``, and each stream's share."""

    def __init__(self, trace: Trace, result: SimResult) -> None:
        self.trace, self.result = trace, result
        n = trace.n_items
        ev, item, kind = result.move_event, result.move_item.astype(np.int64), result.move_kind
        enters = np.isin(kind, sorted(ENTERS))
        self.resident = np.zeros(n, bool)
        decisive = enters | (kind == MOVE_EVICT)  # bypasses leave an item where it was
        last, first_in_rev = np.unique(item[decisive][::-1], return_index=True)
        self.resident[last] = enters[decisive][::-1][first_in_rev]
        self.last_enter = np.full(n, -1, np.int64)
        np.maximum.at(self.last_enter, item[enters], ev[enters])
        listed = trace.group_items
        self.last_need = np.full(n, -1, np.int64)
        np.maximum.at(self.last_need, listed, trace.req_event[trace.group_request])
        self.n_listed = np.bincount(listed, minlength=n).astype(np.int64)
        streams = trace.ev_stream[ev]
        self._by_stream = np.argsort(streams, kind="stable")  # moves, per stream
        self._move_bounds = np.searchsorted(streams[self._by_stream],
                                            np.arange(trace.n_streams + 1))  # fmt: skip

    def restore_shared(self, state: LiveState) -> None:
        """The marks every stream's engine shares (``LiveState``), in place."""
        r = self.result
        state.in_wm[:] = self.resident.astype(np.uint8).tobytes()
        state.need_hit[:] = r.need_hit.astype(np.uint8).tobytes()
        state.context_tokens[:] = r.context_tokens.tolist()
        state.pinned_tokens_at[:] = r.pinned_tokens.tolist()
        state.uses_seen[:] = self.n_listed.tolist()

    def moves(self, s: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Stream ``s``'s moves in replay order: events, items, kinds."""
        take = self._by_stream[self._move_bounds[s] : self._move_bounds[s + 1]]
        r = self.result
        return r.move_event[take], r.move_item[take], r.move_kind[take]

    def stream(self, s: int, items: np.ndarray) -> ReplayedStream:
        """What stream ``s`` (its ``items`` in write order) was left with, as its policy's
        ``restore`` reads it."""
        trace = self.trace
        kinds, refs = trace.ev_kind, trace.ev_ref
        events = trace.stream_events[s]
        pins: dict[int, None] = {}
        marks = events[np.isin(kinds[events], [int(EventKind.PIN), int(EventKind.UNPIN)])]
        for e in marks.tolist():  # the pin and unpin handlers' bookkeeping, in event order
            x = int(refs[e])
            if kinds[e] == EventKind.PIN:
                pins.setdefault(x, None)
            else:
                pins.pop(x, None)
        notes = events[kinds[events] == EventKind.ANNOTATE].tolist()
        annotations = [(e, int(refs[e]), *trace.annotations[e]) for e in notes]
        return ReplayedStream(
            stream=s,
            items=items,
            resident=self.resident,
            pins=pins,
            last_enter=self.last_enter,
            last_need=self.last_need,
            n_listed=self.n_listed,
            annotations=annotations,
        )
