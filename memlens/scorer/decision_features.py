"""Decision features: what the learned scorer knows about an item at a moment, and nothing later.

A *decision point* is a pair (item ``i``, event ``e``): "how much is ``i`` worth right after
event ``e`` of its stream?".  :func:`decision_features` computes one row of
:data:`FEATURE_NAMES` per point, vectorised over any number of points, from the trace's events
at or before ``e`` only: a row does not change when anything after ``e`` changes
(``tests/learn/test_learned.py`` checks it with hypothesis).  The training table
(``memlens.learn.train``) and the replay (``policies/learned.py``) both call this one function, so a
model is scored on exactly the features it was trained on.

The points the policy scores are the item's *anchors* (:func:`anchor_points`): its write, every
request that needs it, and every pin, unpin or annotation of it.  Between two anchors nothing
about the item changes except its age, which the policy handles as a decay (see the policy).

Every feature but one is a function of the trace alone (type, size, age, needs so far, the
rule scorer's value, content, similarity, cost, feedback so far); the exception is ``tier``
(where the item was at the decision: being written, in working memory, or below it), which
depends on the policy that ran: the caller passes it (the policy from its own state, the
training table from a replay of a behaviour policy, :func:`residency`).

Per-trace work (stream clocks, sorted need/feedback timelines, hashed bags of words for the
similarity features) is done once and cached on the ``Trace`` object, like
``memlens.trace.features.content_features``.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import numpy as np
from numba import njit

from memlens.trace.derived import check_pointers, kept_arrays
from memlens.trace.features import (
    content_boost,
    content_features,
    distinct_encoded,
    static_value,
    type_array,
)
from memlens.trace.model import ANNOTATE, ITEM_TYPES, PIN, REQUEST, UNPIN, WRITE, Trace
from memlens.trace.words import hashed_bags, text_tokens

FEATURE_NAMES = (
    "type",  # item type code (memlens.trace.model.ITEM_TYPES)
    "log_tokens",  # log1p(tokens)
    "age_events",  # events of the stream since the write
    "age_tokens",  # tokens written in the stream since the write
    "age_seconds",  # trace seconds since the write
    "age_requests",  # requests of the stream since the write
    "since_need_events",  # events since the last earlier need (NaN: never needed before)
    "since_need_requests",  # requests since the last earlier need (NaN: never)
    "since_need_seconds",  # seconds since the last earlier need (NaN: never)
    "n_needs",  # requests that needed the item so far (this one included)
    "rule_value",  # the rule scorer's value now (its default settings)
    "rule_static",  # its time-independent part: type base + content + cost
    "rule_content",  # the content boost within it
    "rule_use",  # the use boost within it
    "error",  # error/failure words (memlens.trace.features)
    "conclusion",  # conclusion words
    "numbers",  # numbers
    "identifiers",  # identifiers
    "entities",  # named entities
    "req_overlap",  # share of the item's words in the stream's latest request
    "req_cosine",  # cosine of the two word sets
    "task_overlap",  # share of the item's words in the stream's first user input (its task)
    "task_cosine",  # cosine with it
    "cost",  # what producing the item cost (USD)
    "pinned",  # pinned now
    "n_keep",  # pins ("keep") of the item so far
    "n_drop",  # unpins ("drop") so far
    "annotation",  # the latest annotated value (NaN: none)
    "tier",  # TIER_*: where the item was at the decision (policy-dependent)
    "anchor",  # ANCHOR_*: what event ``e`` is to the item
    "req_needs",  # needs of the stream's latest request
    "stream_requests",  # requests of the stream so far
    "log_budget",  # log2 of the working-memory budget (tokens) the decision is made under
    "log_free_budget",  # log2 of that budget less the stream's pinned tokens now (at least 1)
    "budget_share",  # the item's tokens / the free budget
)
N_FEATURES = len(FEATURE_NAMES)
COLUMN = {name: k for k, name in enumerate(FEATURE_NAMES)}

TIER_WRITE, TIER_RESIDENT, TIER_LOWER = 0, 1, 2  # being written | in WM | below WM
ANCHOR_WRITE, ANCHOR_NEED, ANCHOR_FEEDBACK, ANCHOR_OTHER = 0, 1, 2, 3
#: Checkpoints: an item not anchored again is scored again this many requests (of its stream)
#: after its latest anchor, so that the model, not a fixed decay, says how its worth fades.
CHECKPOINTS = (2, 8, 32)
HASH_FEATURES = 1 << 20  # hashed vocabulary of the bags of words
# The rule scorer's defaults (policies/rule.py), for the rule_* features: fixed here so that a
# model's features do not move when someone tunes policy=rule.
RULE_HALF_LIFE_S = {"user_input": 1800.0, "tool_result": 600.0, "agent_state": 600.0,
                    "llm_thought": 120.0}  # fmt: skip
RULE_FLOOR = {"user_input": 0.05, "tool_result": 0.02, "agent_state": 0.02, "llm_thought": 0.01}
RULE_USE_BOOST, RULE_USE_CAP = 0.1, 0.3
_CACHE_KEY = "_memlens_decision_context"


@dataclass(frozen=True)
class Points:
    """Decision points: parallel arrays of item, event and anchor kind (``ref``: the reference
    index into ``trace.needs`` of a need anchor, else -1)."""

    item: np.ndarray  # int64
    event: np.ndarray  # int64
    kind: np.ndarray  # int8, ANCHOR_*
    ref: np.ndarray  # int64

    def __len__(self) -> int:
        return int(self.item.shape[0])


class Timeline:
    """Events of a kind per item, sorted, for "how many / the last / the next" at any event.

    Keys are ``item * (E + 1) + event`` in one sorted array, so the entries of an item at or
    before an event are a run of it.  :meth:`positions` finds, per (item, event), where that
    run starts and ends in one compiled pass (:func:`_positions`); every question is then a
    subtraction.
    """

    def __init__(self, n_events: int, items: np.ndarray, events: np.ndarray,
                 values: np.ndarray | None = None) -> None:  # fmt: skip
        self.span = int(n_events) + 1
        keys = np.asarray(items, np.int64) * self.span + np.asarray(events, np.int64)
        order = np.argsort(keys, kind="stable")
        self.keys = keys[order]
        self.events = np.asarray(events, np.int64)[order]
        self.values = None if values is None else np.asarray(values)[order]

    def positions(self, items: np.ndarray, events: np.ndarray):
        """``(lo, before, through)`` per (item, event): the positions of the item's first
        entry, of its first entry at or after the event, and of its first entry after it
        (``np.searchsorted`` of the keys of (item, 0), (item, event) on the left and (item,
        event) on the right, each a run's end)."""
        items = np.asarray(items, np.int64)
        events = np.broadcast_to(np.asarray(events, np.int64), items.shape)
        return _positions(self.keys, self.span, items, np.ascontiguousarray(events))

    def count(self, items: np.ndarray, events: np.ndarray) -> np.ndarray:
        """Entries of each item at or before its event."""
        lo, _, through = self.positions(items, events)
        return through - lo

    def last(self, items: np.ndarray, events: np.ndarray, strict: bool = False) -> np.ndarray:
        """Position (into ``events``/``values``) of each item's last entry at or before its
        event (before it, with ``strict``); -1 if none."""
        lo, before, through = self.positions(items, events)
        return _last(lo, before if strict else through)

    def next_event(self, items: np.ndarray, events: np.ndarray) -> np.ndarray:
        """Each item's first entry strictly after its event; -1 if none (hindsight only)."""
        at = np.searchsorted(self.keys, items * self.span + events, "right")
        hi = np.searchsorted(self.keys, (items + 1) * self.span, "left")
        ok = at < hi
        return np.where(ok, self.events[np.minimum(at, max(len(self.events) - 1, 0))], -1)


def _last(lo: np.ndarray, at: np.ndarray) -> np.ndarray:
    """The entry before ``at`` when the item has one there (``at > lo``), else -1."""
    return np.where(at > lo, at - 1, -1)


@njit(cache=True, nogil=True, inline="always")
def _lower_bound(keys, lo, hi, x):  # pragma: no cover - compiled
    """The first position in ``lo .. hi`` whose key is at least ``x`` (``hi`` if none)."""
    while lo < hi:
        mid = (lo + hi) >> 1
        if keys[mid] < x:
            lo = mid + 1
        else:
            hi = mid
    return lo


@njit(cache=True, nogil=True)
def _first_at_least(keys, a, x):  # pragma: no cover - compiled
    """The first position at or after ``a`` whose key is at least ``x`` (every key before
    ``a`` is less), by galloping from ``a``: an item has few entries, so the run ends near."""
    m = keys.shape[0]
    step, lo = 1, a
    hi = a
    while hi < m and keys[hi] < x:
        lo = hi + 1
        hi = a + step
        step *= 2
    return _lower_bound(keys, lo, min(hi, m), x)  # keys[lo - 1] < x <= keys[hi] (or hi == m)


@njit(cache=True, nogil=True)
def _positions(keys, span, items, events):  # pragma: no cover - compiled
    """:meth:`Timeline.positions`: one binary search for the item's run, two gallops in it
    (numpy's ``searchsorted`` took two whole searches per question, eight per need row)."""
    n, m = items.shape[0], keys.shape[0]
    lo = np.empty(n, np.int64)
    before = np.empty(n, np.int64)
    through = np.empty(n, np.int64)
    for k in range(n):
        base = items[k] * span
        a = _lower_bound(keys, 0, m, base)
        key = base + events[k]
        lo[k] = a
        before[k] = _first_at_least(keys, a, key)
        through[k] = _first_at_least(keys, before[k], key + 1)
    return lo, before, through


@njit(cache=True, nogil=True)
def _stream_clocks(stream, n_streams, is_req, written, user, ref):  # pragma: no cover - compiled
    """:class:`TraceContext`'s stream clocks in one pass in event order, each stream's running
    counts kept apart (integers: the same values as a cumulative sum over each stream's own
    events; a loop over 5,800 streams of numpy calls took 0.3 s; issue 34)."""
    E = stream.shape[0]
    pos, req_clock = np.zeros(E, np.int64), np.zeros(E, np.int64)
    tok_clock, last_req = np.zeros(E, np.int64), np.full(E, -1, np.int64)
    task_item = np.full(E, -1, np.int64)
    seen, reqs, toks = (np.zeros(n_streams, np.int64), np.zeros(n_streams, np.int64),
                        np.zeros(n_streams, np.int64))  # fmt: skip
    latest, task = np.full(n_streams, -1, np.int64), np.full(n_streams, -1, np.int64)
    for e in range(E):
        s = stream[e]
        pos[e] = seen[s]
        seen[s] += 1
        reqs[s] += is_req[e]
        req_clock[e] = reqs[s]
        toks[s] += written[e]
        tok_clock[e] = toks[s]
        if is_req[e] == 1 and ref[e] > latest[s]:
            latest[s] = ref[e]
        last_req[e] = latest[s]
        if task[s] < 0 and user[e]:
            task[s] = ref[e]
        task_item[e] = task[s]
    return pos, req_clock, tok_clock, last_req, task_item


@njit(cache=True, nogil=True)
def _stream_sums(stream, n_streams, delta):  # pragma: no cover - compiled
    """The running sum of ``delta`` over each event's own stream, at or through the event."""
    out = np.zeros(stream.shape[0], np.int64)
    acc = np.zeros(n_streams, np.int64)
    for e in range(stream.shape[0]):
        acc[stream[e]] += delta[e]
        out[e] = acc[stream[e]]
    return out


class TraceContext:
    """Per-trace arrays the features read (computed once, cached on the trace)."""

    def __init__(self, trace: Trace) -> None:
        self.trace = trace
        tr = trace
        E = tr.n_events
        is_req = (tr.ev_kind == REQUEST).astype(np.int64)
        written = np.zeros(E, np.int64)
        w = tr.ev_kind == WRITE
        written[w] = tr.item_tokens[tr.ev_ref[w]]
        user = w & (
            take(tr.item_type, np.where(w, tr.ev_ref, -1), -1) == ITEM_TYPES.index("user_input")
        )
        # per event, of its own stream: its position; the requests and the tokens written at
        # or before it; the latest request at or before it; the first user input so far
        self.pos, self.req_clock, self.tok_clock, self.last_req, self.task_item = _stream_clocks(
            tr.ev_stream.astype(np.int64), int(tr.n_streams), is_req,
            written, user, tr.ev_ref.astype(np.int64),
        )  # fmt: skip
        # every item a request lists, alternatives included (format 1.1): each was "needed"
        self.needs = Timeline(E, tr.group_items, tr.req_event[tr.group_request])
        self.pins = Timeline(E, *_events_of(tr, PIN))
        self.unpins = Timeline(E, *_events_of(tr, UNPIN))
        ann = np.asarray([e for e, (v, _) in tr.annotations.items() if v is not None], np.int64)
        values = np.asarray([tr.annotations[e][0] for e in ann.tolist()], np.float64)
        self.annotations = Timeline(E, tr.ev_ref[ann].astype(np.int64), ann, values)
        self.pin_state = Timeline(E, *_events_of(tr, PIN, UNPIN))
        self.pinned_tokens = _pinned_tokens(tr)

    @cached_property
    def bags(self) -> tuple[Bags, Bags]:
        """Hashed binary bags of words (items, requests): the similarity features' input,
        one bag per distinct text: ``HashingVectorizer(n_features=HASH_FEATURES, binary=True,
        norm=None, alternate_sign=False, stop_words="english")``'s rows with sorted indices,
        each distinct word hashed once (``memlens.trace.words.hashed_bags``)."""

        def bag(column: str) -> Bags:
            distinct, inverse = distinct_encoded(self.trace, column)  # bytes, when packed
            if not distinct:
                return Bags(np.zeros(1, np.int64), np.zeros(0, np.int64), inverse)
            ptr, words = hashed_bags(text_tokens(distinct), HASH_FEATURES, "english")
            return Bags(ptr, words, inverse)

        def build() -> dict[str, np.ndarray]:
            out = {}
            for side, column in (("item", "item_text"), ("req", "req_text")):
                b = bag(column)
                out |= {f"{side}_ptr": b.ptr, f"{side}_words": b.words, f"{side}_row": b.row}
            return out

        def check(arrays: dict[str, np.ndarray]) -> None:  # what the compiled merge indexes
            for side, column in (("item", "item_text"), ("req", "req_text")):
                _check_bags(arrays[f"{side}_ptr"], arrays[f"{side}_words"],
                            arrays[f"{side}_row"], len(getattr(self.trace, column)))  # fmt: skip

        a = kept_arrays(self.trace, "word-bags", build, check)  # memlens.trace.derived
        return (Bags(a["item_ptr"], a["item_words"], a["item_row"]),
                Bags(a["req_ptr"], a["req_words"], a["req_row"]))  # fmt: skip

    @cached_property
    def rule_parts(self) -> tuple[np.ndarray, np.ndarray]:
        """The rule scorer's static value and content boost per item (its default settings)."""
        return static_value(self.trace), content_boost(content_features(self.trace))


def _check_bags(ptr: np.ndarray, words: np.ndarray, row: np.ndarray, n_texts: int) -> None:
    """Raise unless (``ptr``, ``words``, ``row``) are bags of ``n_texts`` texts: CSR pointers
    from 0 to the words' end, never decreasing, and every text's row among them."""
    if any(a.dtype != np.int64 or a.ndim != 1 for a in (ptr, words, row)):
        raise ValueError("word bags of another type than 1-d int64 arrays")
    if len(row) != n_texts:
        raise ValueError("word bags of another shape than the trace's texts")
    check_pointers(ptr, len(words), "word bags")
    if len(row) and (row.min() < 0 or row.max() >= len(ptr) - 1):
        raise ValueError("a text's row outside the word bags")


def _pinned_tokens(trace: Trace) -> np.ndarray:
    """Tokens pinned in each event's stream right after the event (the simulator's pins: a
    pin of a pinned item and an unpin of an unpinned one change nothing)."""
    delta = np.zeros(trace.n_events, np.int64)
    pinned: set[int] = set()
    ev = np.flatnonzero(np.isin(trace.ev_kind, (PIN, UNPIN)))
    for e, kind, x in zip(ev.tolist(), trace.ev_kind[ev].tolist(), trace.ev_ref[ev].tolist()):
        if kind == PIN and x not in pinned:
            pinned.add(x)
            delta[e] = trace.item_tokens[x]
        elif kind == UNPIN and x in pinned:
            pinned.discard(x)
            delta[e] = -trace.item_tokens[x]
    return _stream_sums(trace.ev_stream.astype(np.int64), int(trace.n_streams), delta)


def take(values: np.ndarray, index: np.ndarray, fill) -> np.ndarray:
    """``values[index]`` where ``index >= 0``, else ``fill`` (also when ``values`` is empty)."""
    index = np.asarray(index)
    if len(values) == 0:
        return np.full(index.shape, fill, dtype=np.result_type(values, np.asarray(fill)))
    return np.where(index >= 0, values[np.maximum(index, 0)], fill)


def _events_of(trace: Trace, *kinds: int) -> tuple[np.ndarray, np.ndarray]:
    """(item, event) of every event of the given kinds."""
    ev = np.flatnonzero(np.isin(trace.ev_kind, kinds))
    return trace.ev_ref[ev].astype(np.int64), ev.astype(np.int64)


def context(trace: Trace) -> TraceContext:
    """The trace's :class:`TraceContext`, computed once and cached on the trace."""
    ctx = trace.__dict__.get(_CACHE_KEY)
    if ctx is None:
        ctx = TraceContext(trace)
        trace.__dict__[_CACHE_KEY] = ctx
    return ctx


def anchor_points(trace: Trace) -> Points:
    """Every write, every (request, needed item) and every pin/unpin/annotate, in event order
    (a request's needs in their listed order; every alternative of a need is an anchor, ``ref``
    indexing ``trace.group_items``, which is ``trace.needs`` for a version 1 trace)."""
    tr = trace
    w = np.flatnonzero(tr.ev_kind == WRITE)
    f = np.flatnonzero(np.isin(tr.ev_kind, (PIN, UNPIN, ANNOTATE)))
    n_listed = len(tr.group_items)
    item = np.concatenate([tr.ev_ref[w], tr.group_items, tr.ev_ref[f]]).astype(np.int64)
    event = np.concatenate([w, tr.req_event[tr.group_request], f]).astype(np.int64)
    kind = np.concatenate([np.full(len(w), ANCHOR_WRITE), np.full(n_listed, ANCHOR_NEED),
                           np.full(len(f), ANCHOR_FEEDBACK)]).astype(np.int8)  # fmt: skip
    ref = np.concatenate([np.full(len(w), -1), np.arange(n_listed),
                          np.full(len(f), -1)]).astype(np.int64)  # fmt: skip
    order = np.argsort(event, kind="stable")
    return Points(item[order], event[order], kind[order], ref[order])


def decision_points(trace: Trace, checkpoints: tuple[int, ...] = CHECKPOINTS) -> Points:
    """The anchors and their checkpoints (kind ``ANCHOR_OTHER``), in event order.

    Checkpoint ``d`` of an anchor at request clock ``R`` is the stream's request number
    ``R + d``, kept only if it comes before the item's next anchor (which rescores the item
    anyway).  Like the anchors, the checkpoints are a function of the trace alone.
    """
    anchors = anchor_points(trace)
    if not checkpoints:
        return anchors
    ctx = context(trace)
    req_ev = np.flatnonzero(trace.ev_kind == REQUEST)
    by_stream = req_ev[np.argsort(trace.ev_stream[req_ev], kind="stable")]
    n_req = np.bincount(trace.ev_stream[req_ev], minlength=trace.n_streams)
    first = np.concatenate([[0], np.cumsum(n_req)[:-1]])
    nxt = Timeline(trace.n_events, anchors.item, anchors.event).next_event(anchors.item,
                                                                           anchors.event)  # fmt: skip
    nxt = np.where(nxt < 0, trace.n_events, nxt)
    stream = trace.ev_stream[anchors.event]
    items, events = [anchors.item], [anchors.event]
    for d in checkpoints:
        clock = ctx.req_clock[anchors.event] + int(d)  # the request number to score at
        ok = clock <= n_req[stream]
        at = np.full(len(anchors), trace.n_events, np.int64)
        at[ok] = by_stream[first[stream[ok]] + clock[ok] - 1]
        ok &= at < nxt
        items.append(anchors.item[ok])
        events.append(at[ok])
    n_check = sum(len(x) for x in items[1:])
    item, event = np.concatenate(items), np.concatenate(events)
    kind = np.concatenate([anchors.kind, np.full(n_check, ANCHOR_OTHER, np.int8)])
    ref = np.concatenate([anchors.ref, np.full(n_check, -1, np.int64)])
    order = np.argsort(event, kind="stable")
    return Points(item[order], event[order], kind[order], ref[order])


def default_tier(trace: Trace, points: Points) -> np.ndarray:
    """The tier the replay gives each anchor when it scores it: a write is being written; a
    need or a person's word is scored while the item is resident (a missed need is scored with
    ``TIER_LOWER`` separately, when demand fetch brings it back)."""
    return np.where(points.kind == ANCHOR_WRITE, TIER_WRITE, TIER_RESIDENT).astype(np.int8)


def decision_features(trace: Trace, items, events, tier, budget, order: str = "C") -> np.ndarray:
    """One row of :data:`FEATURE_NAMES` per decision point (``float64``, shape (n, F)).

    ``items``, ``events``: the points; ``tier``: one TIER_* per point, or a scalar;
    ``budget``: the budget the decision is made under (a scalar or one per point; the
    policy knows its own).  Reads only events at or before each point's event.  ``order``:
    the matrix's layout; ``"F"`` (column by column) when the caller only reads it whole, since
    the features are written a column at a time: in row order each column's write touches
    every row's cache line (0.3 s a million rows).
    """
    ctx = context(trace)
    items = np.asarray(items, np.int64)
    events = np.asarray(events, np.int64)
    if items.shape != events.shape:
        raise ValueError(f"items and events differ in length ({items.shape} vs {events.shape})")
    if len(items) and (items.min() < 0 or items.max() >= trace.n_items):
        raise ValueError("decision_features: an item index is out of range")
    if len(items) and np.any(trace.item_event[items] > events):
        raise ValueError("decision_features: a decision point comes before its item's write")
    out = np.empty((len(items), N_FEATURES), np.float64, order=order)
    col = COLUMN
    out[:, col["tier"]] = np.broadcast_to(np.asarray(tier, np.float64), items.shape)
    set_budget(trace, items, events, out, budget)
    _item_columns(trace, items, out)
    _age_columns(trace, ctx, items, events, out)
    _need_columns(trace, ctx, items, events, out)
    _feedback_columns(ctx, items, events, out)
    _similarity_columns(trace, ctx, items, events, out)
    return out


#: the columns ``set_budget`` fills (the only ones that differ between budgets)
BUDGET_COLUMNS = [COLUMN["log_budget"], COLUMN["log_free_budget"], COLUMN["budget_share"]]


def set_budget(trace: Trace, items: np.ndarray, events: np.ndarray, X: np.ndarray,
               budget) -> None:  # fmt: skip
    """Fill the budget columns of rows ``X`` of the points (``items``, ``events``) in place."""
    b = np.broadcast_to(np.asarray(budget, np.float64), items.shape)
    if np.any(b <= 0):
        raise ValueError("decision_features: the budget must be positive")
    free = np.maximum(1.0, b - context(trace).pinned_tokens[events])
    X[:, COLUMN["log_budget"]] = np.log2(b)
    X[:, COLUMN["log_free_budget"]] = np.log2(free)
    X[:, COLUMN["budget_share"]] = trace.item_tokens[items] / free


def _item_columns(trace: Trace, items: np.ndarray, out: np.ndarray) -> None:
    """What the item is: type, size, content, cost."""
    col, cf = COLUMN, content_features(trace)
    out[:, col["type"]] = trace.item_type[items]
    out[:, col["log_tokens"]] = np.log1p(trace.item_tokens[items])
    for name in ("error", "conclusion", "numbers", "identifiers", "entities"):
        out[:, col[name]] = getattr(cf, name)[items]
    out[:, col["cost"]] = trace.item_cost[items]


def _age_columns(trace: Trace, ctx: TraceContext, items, events, out) -> None:
    col = COLUMN
    we = trace.item_event[items]
    out[:, col["age_events"]] = ctx.pos[events] - ctx.pos[we]
    out[:, col["age_tokens"]] = ctx.tok_clock[events] - ctx.tok_clock[we]
    out[:, col["age_seconds"]] = trace.ev_t[events] - trace.ev_t[we]
    out[:, col["age_requests"]] = ctx.req_clock[events] - ctx.req_clock[we]
    out[:, col["stream_requests"]] = ctx.req_clock[events]


def _need_columns(trace: Trace, ctx: TraceContext, items, events, out) -> None:
    """Needs so far, the time since the previous one, the anchor kind and the rule's value."""
    col, needs = COLUMN, ctx.needs
    lo, before, through = needs.positions(items, events)  # the needs before, and through, each
    n_needs = through - lo
    prev = _last(lo, before)  # the last need strictly before the point
    has = prev >= 0
    pe = take(needs.events, prev, 0)
    nan = np.nan
    out[:, col["n_needs"]] = n_needs
    out[:, col["since_need_events"]] = np.where(has, ctx.pos[events] - ctx.pos[pe], nan)
    out[:, col["since_need_requests"]] = np.where(
        has, ctx.req_clock[events] - ctx.req_clock[pe], nan
    )
    out[:, col["since_need_seconds"]] = np.where(has, trace.ev_t[events] - trace.ev_t[pe], nan)
    needed_now = through > before  # a need at this very event
    anchor = np.where(trace.item_event[items] == events, ANCHOR_WRITE,
                      np.where(needed_now, ANCHOR_NEED, ANCHOR_OTHER))  # fmt: skip
    is_feedback = np.isin(trace.ev_kind[events], (PIN, UNPIN, ANNOTATE)) & (
        trace.ev_ref[events] == items
    )
    out[:, col["anchor"]] = np.where(is_feedback, ANCHOR_FEEDBACK, anchor)
    last_req = ctx.last_req[events]
    out[:, col["req_needs"]] = take(trace.req_needs_count, last_req, 0)
    static, content = ctx.rule_parts
    use = np.minimum(RULE_USE_CAP, RULE_USE_BOOST * n_needs)
    last_use = take(needs.events, _last(lo, through), -1)  # at or before the point
    last_use = np.maximum(last_use, trace.item_event[items])
    ty = trace.item_type[items]
    half = type_array(RULE_HALF_LIFE_S, "half-life")[ty]
    floor = type_array(RULE_FLOOR, "floor")[ty]
    decay = np.exp2(-(trace.ev_t[events] - trace.ev_t[last_use]) / half)
    out[:, col["rule_static"]] = static[items]
    out[:, col["rule_content"]] = content[items]
    out[:, col["rule_use"]] = use
    out[:, col["rule_value"]] = np.maximum(floor, (static[items] + use) * decay)


def _feedback_columns(ctx: TraceContext, items, events, out) -> None:
    """What people (or the trace's pins) said about the item so far."""
    col = COLUMN
    out[:, col["n_keep"]] = ctx.pins.count(items, events)
    out[:, col["n_drop"]] = ctx.unpins.count(items, events)
    last = ctx.pin_state.last(items, events)
    kinds = take(ctx.trace.ev_kind[ctx.pin_state.events], last, -1)
    pinned = (kinds == PIN).astype(np.float64)
    out[:, col["pinned"]] = pinned
    ann = ctx.annotations.last(items, events)
    out[:, col["annotation"]] = take(ctx.annotations.values, ann, np.nan)


@dataclass
class Bags:
    """Binary bags of words of a list of texts: CSR rows (``ptr``, ``words``, sorted within a
    row) of the distinct texts, and ``row[k]``, the row of text ``k``."""

    ptr: np.ndarray
    words: np.ndarray
    row: np.ndarray

    def sizes(self, texts: np.ndarray) -> np.ndarray:
        """Distinct words in each of ``texts`` (indices into the list)."""
        return np.diff(self.ptr)[self.row[texts]].astype(np.float64)


def _shared_words(a: Bags, ta: np.ndarray, b: Bags, tb: np.ndarray) -> np.ndarray:
    """Words text ``ta[k]`` of ``a`` shares with text ``tb[k]`` of ``b``, for every k (the dot
    product of the binary bags)."""
    return _count_shared(a.ptr, a.words, a.row[ta], b.ptr, b.words, b.row[tb])


@njit(cache=True, nogil=True)
def _count_shared(a_ptr, a_words, ra, b_ptr, b_words, rb):  # pragma: no cover - compiled
    out = np.zeros(len(ra))
    for k in range(len(ra)):
        i, i_end = a_ptr[ra[k]], a_ptr[ra[k] + 1]
        j, j_end = b_ptr[rb[k]], b_ptr[rb[k] + 1]
        n = 0
        while i < i_end and j < j_end:  # a merge of two sorted lists
            if a_words[i] < b_words[j]:
                i += 1
            elif a_words[i] > b_words[j]:
                j += 1
            else:
                n += 1
                i += 1
                j += 1
        out[k] = n
    return out


def _similarity_columns(trace: Trace, ctx: TraceContext, items, events, out) -> None:
    """Word overlap and cosine of the item with the stream's latest request and its task."""
    col = COLUMN
    item_bags, req_bags = ctx.bags
    n_item = item_bags.sizes(items)
    for prefix, other_bags, other in (
        ("req", req_bags, ctx.last_req[events]),
        ("task", item_bags, ctx.task_item[events]),
    ):
        ok = other >= 0
        shared = np.zeros(len(items))
        n_other = np.zeros(len(items))
        if ok.any():
            shared[ok] = _shared_words(item_bags, items[ok], other_bags, other[ok])
            n_other[ok] = other_bags.sizes(other[ok])
        out[:, col[f"{prefix}_overlap"]] = shared / np.maximum(n_item, 1.0)
        out[:, col[f"{prefix}_cosine"]] = shared / np.sqrt(np.maximum(n_item * n_other, 1.0))


def residency(trace: Trace, result, items, events) -> np.ndarray:
    """TIER_RESIDENT or TIER_LOWER of each item just before its event in a finished replay
    (``SimResult``), TIER_WRITE at its own write: the behaviour policy's tier for training."""
    from memlens.simulator import MOVE_BYPASS, MOVE_EVICT

    items = np.asarray(items, np.int64)
    events = np.asarray(events, np.int64)
    moves = Timeline(trace.n_events, result.move_item, result.move_event,
                     ~np.isin(result.move_kind, (MOVE_EVICT, MOVE_BYPASS)))  # fmt: skip
    last = moves.last(items, events, strict=True)
    inside = take(moves.values, last, False).astype(bool)
    tier = np.where(inside, TIER_RESIDENT, TIER_LOWER)
    return np.where(trace.item_event[items] == events, TIER_WRITE, tier).astype(np.int8)
