"""The keep-interval model of one stream: what the oracle optimises over.

The simulator's policy class (``memlens.simulator``) lets an item enter working memory only

* at its write (if its tokens fit the budget),
* at a pin (forced; the item stays until unpinned and its tokens count against the budget),
* with ``demand_fetch``, right after a request that needed it (if its tokens fit),

and lets it leave at any time.  A request hits an item iff the item is resident just before the
request.  So for an *unpinned* item the only thing that matters between two consecutive
"anchors" of that item (write, use, pin, unpin) is whether it is kept through the whole gap: an
item that is absent at the end of a gap gains nothing from having been resident part of it,
since nothing can observe it.  One 0/1 variable per gap that ends at a use, worth one hit, is
therefore enough to describe every policy's hits; gaps that end at a pin or at the end of the
stream are worth nothing and are left out.

Where a gap may start:

* at the write, at an unpin (the item is resident when its pin is lifted), or, with demand
  fetch, after any use: a *free* start;
* without demand fetch, after a use: only if the item was kept through the gap ending at that
  use (a dropped item cannot come back), so ``y[g] <= y[prev[g]]`` (the nesting constraint).

Uses while the item is pinned are hits for every policy (``forced_hits``).

Needs with alternatives (trace format 1.1): every item of a need's group is used at the
request (it is an anchor of each of them, and each gets its gap ending there), and the need is
hit when any of those gaps is kept, or forced when any alternative is pinned.  The ``link_*``
arrays say which gaps serve which need (an item listed in two groups of one request has one gap
serving both).  With demand fetch every alternative gets a free start after the request,
although the simulator fetches only the first-listed one: a relaxation, so the upper bound stays
a bound (``memlens.oracle.bounds``); the lower bound is a replay, valid whatever the plan.

Capacity: after every event of the stream, the unpinned resident tokens are at most
``max(0, budget - pinned_tokens)`` (the simulator evicts until used <= budget or only pinned
items are left).  Time is the global event index; a gap from anchor ``a`` to use ``b`` occupies
the states after events ``a .. b-1``.  The load only rises at gap starts and the capacity only
falls at pins, so checking the capacity at those events ("check points") checks it everywhere.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numba as nb
import numpy as np

from memlens.trace.model import PIN, REQUEST, UNPIN, WRITE, Trace


@dataclass
class GapModel:
    """Keep-intervals of one stream at one budget and demand-fetch setting."""

    stream: int
    budget: int
    demand_fetch: bool
    n_references: int  # needed references of the stream
    forced_hits: int  # uses while pinned: hits for every policy
    # gaps (only those that may be kept: tokens <= budget and, without fetch, chain unbroken)
    item: np.ndarray  # int64
    start: np.ndarray  # int64 event index of the anchor the gap starts at
    end: np.ndarray  # int64 event index of the use that ends it
    size: np.ndarray  # int64 tokens
    prev: np.ndarray  # int64 gap index that must be kept for this one to be (-1: free start)
    ref: np.ndarray  # int64 index into trace.needs of the use that ends it
    # check points
    points: np.ndarray  # int64 sorted event indices where the capacity is checked
    capacity: np.ndarray  # int64 max(0, budget - pinned tokens) after each check point
    k_start: np.ndarray  # int64 first check point a gap covers
    k_end: np.ndarray  # int64 one past the last check point a gap covers
    # stream-local lengths for the time-averaged (PFOO-L) relaxation
    length: np.ndarray  # int64 number of the stream's post-event states a gap covers
    total_capacity: int  # sum over the stream's post-event states of the capacity
    # needs with alternatives (format 1.1 traces only; empty otherwise): gap link_gap[k] serves
    # need link_ref[k] (an index into trace.needs); then a need's hit is "some linked gap kept"
    link_gap: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    link_ref: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    has_groups: bool = False

    def planned_hits(self, selected: np.ndarray) -> int:
        """The hits a 0/1 selection of gaps plans: forced hits plus the needs it serves."""
        sel = np.asarray(selected, dtype=bool)
        if not self.has_groups:
            return int(sel.sum()) + self.forced_hits
        served = self.link_ref[sel[self.link_gap]] if self.link_gap.size else self.link_ref
        return int(np.unique(served).shape[0]) + self.forced_hits

    @property
    def n_gaps(self) -> int:
        return int(self.item.shape[0])


@dataclass
class _Walk:
    """What one pass over a stream's events collects (lists, turned into arrays after)."""

    g_item: list = field(default_factory=list)
    g_start: list = field(default_factory=list)
    g_end: list = field(default_factory=list)
    g_prev: list = field(default_factory=list)
    g_ref: list = field(default_factory=list)
    pin_ev: list = field(default_factory=list)  # events where the pinned tokens changed
    pin_tok: list = field(default_factory=list)  # pinned tokens after them
    links: list = field(default_factory=list)  # (gap, need) pairs, format 1.1 traces only
    n_refs: int = 0
    forced: int = 0

    def gap(self, item: int, start: int, end: int, prev: int, ref: int) -> int:
        """Record a gap; returns its index."""
        g = len(self.g_item)
        for col, v in ((self.g_item, item), (self.g_start, start), (self.g_end, end),
                       (self.g_prev, prev), (self.g_ref, ref)):  # fmt: skip
            col.append(v)
        return g


def _walk(trace: Trace, stream: int, budget: int, demand_fetch: bool) -> _Walk:
    """Walk one stream's events once: its keep-intervals (gaps) and its pin profile."""
    events = trace.stream_events[stream]
    kinds = trace.ev_kind[events].tolist()
    refs = trace.ev_ref[events].tolist()
    tokens, needs_ptr, needs = trace.item_tokens, trace.needs_ptr, trace.needs
    groups = trace.alternative_groups  # need -> its items, for needs with alternatives
    # per item state, kept in dicts (a stream touches only its own items)
    anchor: dict[int, int] = {}  # item -> event index of its open anchor (absent: none)
    chain: dict[int, int] = {}  # item -> gap index that must be kept (-1 free, -2 impossible)
    pinned: set[int] = set()
    pinned_tok = 0
    w = _Walk()
    for e, k, x in zip(events.tolist(), kinds, refs):
        if k == WRITE:
            anchor[x] = e
            chain[x] = -1 if tokens[x] <= budget else -2
        elif k == REQUEST and groups:
            _group_request(w, e, x, trace, groups, pinned, anchor, chain, budget, demand_fetch)
        elif k == REQUEST:
            lo, hi = int(needs_ptr[x]), int(needs_ptr[x + 1])
            w.n_refs += hi - lo
            for j in range(lo, hi):
                i = int(needs[j])
                if i in pinned:
                    w.forced += 1
                    continue
                c = chain.get(i, -2)
                g = -2
                if c != -2 and i in anchor:
                    g = w.gap(i, anchor[i], e, c, j)
                anchor[i] = e
                if demand_fetch:
                    chain[i] = -1 if tokens[i] <= budget else -2
                else:
                    chain[i] = g
        elif (k == PIN and x not in pinned) or (k == UNPIN and x in pinned):
            (pinned.add if k == PIN else pinned.discard)(x)
            pinned_tok += int(tokens[x]) if k == PIN else -int(tokens[x])
            w.pin_ev.append(e)
            w.pin_tok.append(pinned_tok)
            if k == PIN:
                anchor.pop(x, None)
            else:
                anchor[x] = e
                chain[x] = -1 if tokens[x] <= budget else -2
    return w


def _group_request(w: _Walk, e: int, x: int, trace: Trace, groups: dict, pinned: set,
                   anchor: dict, chain: dict, budget: int, demand_fetch: bool) -> None:  # fmt: skip
    """``_walk`` at request ``x`` (event ``e``) of a trace with alternatives: one gap per item
    listed in any of its needs, linked to every need it serves (module docstring)."""
    lo, hi = int(trace.needs_ptr[x]), int(trace.needs_ptr[x + 1])
    w.n_refs += hi - lo
    tokens = trace.item_tokens
    gap_of: dict[int, int] = {}  # item -> its gap ending here (-2: none)
    for j in range(lo, hi):
        items = groups.get(j, (int(trace.needs[j]),))
        forced = any(i in pinned for i in items)
        w.forced += forced
        for i in items:
            if i in pinned:
                continue
            if i not in gap_of:
                c = chain.get(i, -2)
                gap_of[i] = w.gap(i, anchor[i], e, c, j) if c != -2 and i in anchor else -2
            if gap_of[i] >= 0 and not forced:
                w.links.append((gap_of[i], j))
    for i, g in gap_of.items():
        anchor[i] = e
        chain[i] = (-1 if tokens[i] <= budget else -2) if demand_fetch else g


def build_model(trace: Trace, stream: int, budget: int, demand_fetch: bool) -> GapModel:
    """Walk one stream's events once and collect its keep-intervals and capacity profile."""
    events = trace.stream_events[stream]
    tokens = trace.item_tokens
    if trace.has_alternatives:
        w = _walk(trace, stream, budget, demand_fetch)
    else:  # the same walk compiled (memlens.oracle.walk)
        from memlens.oracle.walk import walk_v1

        w = _Walk(**walk_v1(trace, stream, budget, demand_fetch))
    g_item, g_start, g_end, g_prev, g_ref = w.g_item, w.g_start, w.g_end, w.g_prev, w.g_ref
    pin_ev, pin_tok, n_refs, forced = w.pin_ev, w.pin_tok, w.n_refs, w.forced
    item = np.asarray(g_item, dtype=np.int64)
    start = np.asarray(g_start, dtype=np.int64)
    end = np.asarray(g_end, dtype=np.int64)
    prev = np.asarray(g_prev, dtype=np.int64)
    size = tokens[item].astype(np.int64) if item.size else np.zeros(0, dtype=np.int64)
    pin_ev_a = np.asarray(pin_ev, dtype=np.int64)
    pin_tok_a = np.asarray(pin_tok, dtype=np.int64)

    def cap_after(ev: np.ndarray) -> np.ndarray:
        idx = np.searchsorted(pin_ev_a, ev, side="right") - 1
        p = np.where(idx >= 0, pin_tok_a[np.maximum(idx, 0)], 0) if pin_ev_a.size else 0
        return np.maximum(0, budget - (np.zeros(ev.shape, np.int64) + p))

    points = np.unique(np.concatenate([start, pin_ev_a]))
    capacity = cap_after(points)
    k_start = np.searchsorted(points, start, side="left")
    k_end = np.searchsorted(points, end, side="left")
    pos_start = np.searchsorted(events, start)
    pos_end = np.searchsorted(events, end)
    total_capacity = int(cap_after(events).sum()) if events.size else 0
    return GapModel(
        stream=stream,
        budget=int(budget),
        demand_fetch=bool(demand_fetch),
        n_references=n_refs,
        forced_hits=forced,
        item=item,
        start=start,
        end=end,
        size=size,
        prev=prev,
        ref=np.asarray(g_ref, dtype=np.int64),
        points=points.astype(np.int64),
        capacity=capacity.astype(np.int64),
        k_start=k_start.astype(np.int64),
        k_end=k_end.astype(np.int64),
        length=(pos_end - pos_start).astype(np.int64),
        total_capacity=total_capacity,
        link_gap=np.asarray([g for g, _ in w.links], dtype=np.int64),
        link_ref=np.asarray([j for _, j in w.links], dtype=np.int64),
        has_groups=trace.has_alternatives,
    )


def keep_pairs(model: GapModel, selected: np.ndarray) -> np.ndarray:
    """(anchor event, item) of the selected gaps: what the oracle policy replays."""
    sel = np.asarray(selected, dtype=bool)
    return np.stack([model.start[sel], model.item[sel]], axis=1).astype(np.int64)


def schedule_load_ok(model: GapModel, selected: np.ndarray) -> bool:
    """Whether a 0/1 selection of gaps respects capacity and nesting (an exact check)."""
    sel = np.asarray(selected, dtype=np.bool_)
    if model.n_gaps == 0:
        return True
    return bool(_load_ok(sel, model.prev, model.k_start, model.k_end, model.size, model.capacity))


@nb.njit(cache=True)
def _load_ok(sel, prev, k_start, k_end, size, capacity):
    """``schedule_load_ok`` compiled: every selected gap's predecessor selected, and the
    selected gaps' load (integer tokens, summed from the first check point) within the
    capacity at every check point.  One call per plan on many short streams."""
    for g in range(sel.shape[0]):
        if sel[g] and prev[g] >= 0 and not sel[prev[g]]:
            return False
    diff = np.zeros(capacity.shape[0] + 1, np.int64)
    for g in range(sel.shape[0]):
        if sel[g]:
            diff[k_start[g]] += size[g]
            diff[k_end[g]] -= size[g]
    load = 0
    for k in range(capacity.shape[0]):
        load += diff[k]
        if load > capacity[k]:
            return False
    return True
