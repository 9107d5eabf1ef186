"""Labels for decision points: what the learned scorer is taught to predict, four ways.

Features (``memlens.scorer.decision_features``) never look ahead; labels always do, and each kind says
"worth keeping" differently.  The kind is recorded in the model's sidecar
(``memlens.scorer.model``), so a model says what it predicts.

``feedback``   a person's or the simulated user's word (``memlens.learn.feedback``): ``keep`` -> 1,
               ``drop`` -> 0, a ``value`` row -> 1 iff its value >= 0.5 (note-only rows are
               skipped).  The decision point is the feedback's own (item, event).
``hindsight``  needed again within the next ``horizon`` requests of the stream.
``belady``     LRB's relaxed Belady boundary: needed again before ``boundary_tokens`` more
               tokens have been written in the stream (an item whose next use lies beyond what
               a cache of that size sees in between is not worth keeping); by default the
               boundary is the budget the row is made for.
``oracle``     kept by the oracle's schedule (``memlens.oracle.solve`` at ``budget``, by
               default the budget the row is made for): the
               gap of the item that contains the point (from its latest anchor: write, use or
               unpin, to its next use) is one the oracle keeps.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from memlens.scorer.decision_features import Timeline, context
from memlens.trace.model import UNPIN, WRITE, Trace

LABEL_KINDS = ("feedback", "hindsight", "belady", "oracle")


@dataclass(frozen=True)
class LabelSpec:
    """Which label, with its one parameter (the others are ignored)."""

    kind: str = "hindsight"
    horizon: int = 20  # hindsight: requests
    boundary_tokens: int | None = None  # belady: tokens written (None: the row's budget)
    budget: int | None = None  # oracle: the budget whose schedule labels (None: the row's)
    demand_fetch: bool = False  # oracle: the schedule's demand-fetch setting

    def __post_init__(self) -> None:
        if self.kind not in LABEL_KINDS:
            raise ValueError(
                f"label kind must be one of {', '.join(LABEL_KINDS)}, got {self.kind!r}"
            )
        for key in ("horizon", "boundary_tokens", "budget"):
            if getattr(self, key) is not None and getattr(self, key) < 1:
                raise ValueError(f"label.{key} must be at least 1, got {getattr(self, key)}")

    def params(self) -> dict:
        """The parameters that matter for this kind (what the sidecar records)."""
        keep = {"hindsight": ("horizon",), "belady": ("boundary_tokens",),
                "oracle": ("budget", "demand_fetch"), "feedback": ()}[self.kind]  # fmt: skip
        return {"kind": self.kind, **{k: getattr(self, k) for k in keep}}


def next_need(trace: Trace, items, events) -> np.ndarray:
    """Event of each item's first need strictly after the point (-1: none)."""
    return context(trace).needs.next_event(
        np.asarray(items, np.int64), np.asarray(events, np.int64)
    )


def hindsight(trace: Trace, items, events, horizon: int) -> np.ndarray:
    """1 iff a request among the stream's next ``horizon`` ones needs the item."""
    return _needed_within(trace, items, events, context(trace).req_clock, horizon)


def belady(trace: Trace, items, events, boundary_tokens: int) -> np.ndarray:
    """1 iff the item is needed again before ``boundary_tokens`` more tokens are written."""
    return _needed_within(trace, items, events, context(trace).tok_clock, boundary_tokens)


def _needed_within(trace: Trace, items, events, clock: np.ndarray, limit: int) -> np.ndarray:
    """1 iff the item is needed again at most ``limit`` ticks of ``clock`` (requests or tokens,
    per event) after its decision point."""
    events = np.asarray(events, np.int64)
    nxt = next_need(trace, items, events)
    ahead = clock[np.maximum(nxt, 0)] - clock[events]
    return ((nxt >= 0) & (ahead <= limit)).astype(np.int8)


def oracle(trace: Trace, items, events, budget: int, demand_fetch: bool = False,
           settings=None) -> np.ndarray:  # fmt: skip
    """1 iff the oracle's schedule keeps the item through the point (see the module doc)."""
    from memlens.oracle import solve

    items = np.asarray(items, np.int64)
    events = np.asarray(events, np.int64)
    plans = solve(trace, budget, demand_fetch, settings).plans
    plan = np.concatenate([p for p in plans if len(p)] or [np.zeros((0, 2), np.int64)])
    kept = Timeline(trace.n_events, plan[:, 1], plan[:, 0])
    # the item's anchors: its write, its uses and its unpins
    w = np.flatnonzero(trace.ev_kind == WRITE)
    u = np.flatnonzero(trace.ev_kind == UNPIN)
    anchors = Timeline(trace.n_events,
                       np.concatenate([trace.ev_ref[w], trace.group_items, trace.ev_ref[u]]),
                       np.concatenate([w, trace.req_event[trace.group_request], u]))  # fmt: skip
    a = anchors.last(items, events)
    k = kept.last(items, events)
    same = (a >= 0) & (k >= 0)
    if len(kept.events):
        same &= kept.events[np.maximum(k, 0)] == anchors.events[np.maximum(a, 0)]
    else:
        same[:] = False
    return (same & (next_need(trace, items, events) >= 0)).astype(np.int8)


def feedback_points(trace: Trace, rows) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(items, events, labels) of feedback rows about ``trace`` (rows about other traces and
    note-only rows are skipped)."""
    items, events, labels = [], [], []
    index = trace.item_index
    for row in rows:
        if row.trace_sha256 != trace.sha256:
            continue
        if row.action == "value":
            if row.value is None:
                continue
            label = int(row.value >= 0.5)
        else:
            label = int(row.action == "keep")
        i = index.get(row.item_id)
        if i is None:
            raise ValueError(f"feedback about item {row.item_id!r}, which {trace.source} lacks")
        items.append(i)
        events.append(max(int(row.event_index), int(trace.item_event[i])))
        labels.append(label)
    return (np.asarray(items, np.int64), np.asarray(events, np.int64),
            np.asarray(labels, np.int8))  # fmt: skip


def labels_for(trace: Trace, items, events, spec: LabelSpec, budget: int,
               oracle_settings=None) -> np.ndarray:  # fmt: skip
    """The ``spec`` label of every point for rows made at ``budget`` (not for ``feedback``:
    see :func:`feedback_points`)."""
    if spec.kind == "hindsight":
        return hindsight(trace, items, events, spec.horizon)
    if spec.kind == "belady":
        return belady(trace, items, events, spec.boundary_tokens or budget)
    if spec.kind == "oracle":
        return oracle(trace, items, events, spec.budget or budget, spec.demand_fetch,
                      oracle_settings)  # fmt: skip
    raise ValueError("feedback labels come with their own points: use feedback_points()")
