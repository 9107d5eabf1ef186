"""What every compiled kernel shares on the Python side: its output buffers and its result.

A kernel fills the same arrays the reference engine returns (``memlens.simulator.SimResult``):
per need a hit mark, per request the context and pinned tokens, per stream evictions and false
evictions, and the move log (event, item, kind) in file order.  The move log's capacity is an
upper bound (one move per write, one per fetch or pin, at most one eviction per entry into
working memory), cut to the real length in place afterwards.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np

from memlens.simulator import SimResult
from memlens.trace.model import EventKind, Trace


@dataclass
class Outputs:
    """The arrays a kernel writes (see ``SimResult`` for their meaning)."""

    need_hit: np.ndarray
    context_tokens: np.ndarray
    pinned_tokens: np.ndarray
    evictions: np.ndarray
    false_evictions: np.ndarray
    move_event: np.ndarray
    move_item: np.ndarray
    move_kind: np.ndarray

    def arrays(self) -> tuple[np.ndarray, ...]:
        """In the order the kernels take them."""
        return (self.need_hit, self.context_tokens, self.pinned_tokens, self.evictions,
                self.false_evictions, self.move_event, self.move_item, self.move_kind)  # fmt: skip


def outputs(trace: Trace, demand_fetch: bool) -> Outputs:
    """Zeroed output arrays for one replay of ``trace``."""
    n_pins = int(np.count_nonzero(trace.ev_kind == EventKind.PIN))
    fetches = trace.n_references if demand_fetch else 0
    cap = 2 * (trace.n_items + fetches + n_pins) + 1
    return Outputs(
        need_hit=np.zeros(trace.n_references, np.uint8),
        context_tokens=np.zeros(trace.n_requests, np.int64),
        pinned_tokens=np.zeros(trace.n_requests, np.int64),
        evictions=np.zeros(trace.n_streams, np.int64),
        false_evictions=np.zeros(trace.n_streams, np.int64),
        move_event=np.empty(cap, np.int64),
        move_item=np.empty(cap, np.int32),
        move_kind=np.empty(cap, np.int8),
    )


def trace_arrays(trace: Trace) -> tuple[np.ndarray, ...]:
    """The trace's columns every kernel reads, with the dtypes the kernels are compiled for:
    event kind, stream and reference; item tokens; needs (pointer and first alternatives);
    the groups of alternatives (need, pointer, other items; empty for a version 1 trace); and
    every item's number of uses (for false evictions)."""
    n_uses = np.bincount(trace.group_items, minlength=trace.n_items).astype(np.int32)
    return (
        trace.ev_kind, trace.ev_stream, trace.ev_ref, trace.item_tokens, trace.needs_ptr,
        trace.needs, trace.alt_need.astype(np.int64, copy=False),
        trace.alt_ptr.astype(np.int64, copy=False), trace.alt_items.astype(np.int32, copy=False),
        n_uses,
    )  # fmt: skip


def _shrink(a: np.ndarray, m: int) -> np.ndarray:
    """``a[:m]`` without a copy: the buffer is cut in place (a copy would hold both)."""
    a.resize(m, refcheck=False)
    return a


def result(out: Outputs, moves: int, name: str, budget: int, demand_fetch: bool, wall: float,
           extra: dict | None = None) -> SimResult:  # fmt: skip
    """The kernel's ``SimResult`` (engine ``fast``) from its filled outputs."""
    return SimResult(
        budget=budget,
        demand_fetch=bool(demand_fetch),
        policy=name,
        engine="fast",
        need_hit=out.need_hit,
        context_tokens=out.context_tokens,
        pinned_tokens=out.pinned_tokens,
        evictions=out.evictions,
        false_evictions=out.false_evictions,
        move_event=_shrink(out.move_event, moves),
        move_item=_shrink(out.move_item, moves),
        move_kind=_shrink(out.move_kind, moves),
        wall_s=wall,
        extra=extra or {},
    )


def timed(fn, *args):
    """``fn(*args)`` and its wall time (the kernel alone, compiled beforehand)."""
    t0 = time.perf_counter()
    value = fn(*args)
    return value, time.perf_counter() - t0


def stream_offsets(trace: Trace) -> tuple[np.ndarray, np.ndarray]:
    """Per item its slot in a per-stream region (``slot``) and per stream the region's start
    (``base``, length ``n_streams + 1``): what a per-stream heap or array indexes by."""
    counts = np.bincount(trace.item_stream, minlength=trace.n_streams)
    base = np.zeros(trace.n_streams + 1, np.int64)
    np.cumsum(counts, out=base[1:])
    order = np.argsort(trace.item_stream, kind="stable")
    slot = np.empty(trace.n_items, np.int64)
    slot[order] = np.arange(trace.n_items, dtype=np.int64)
    return slot, base


def one_write_trace() -> Trace:
    """The smallest trace a kernel replays: one write (what warming a kernel calls it on)."""
    from memlens.trace.io import trace_from_events

    one_write = [{"event": "write", "id": "a", "tokens": 1, "type": "llm_thought", "stream": ""}]
    return trace_from_events(one_write, source="<warm-up>")


def warm_up(compiled, arguments) -> None:
    """Compile ``compiled`` (or load it from numba's cache) outside the timed region: once, on
    ``arguments(trace)`` of a one-write trace (a kernel's argument types do not depend on the
    trace's size)."""
    if not compiled.signatures:
        compiled(*arguments(one_write_trace()))
