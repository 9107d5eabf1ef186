"""The learned value scorer: evict what a LightGBM model says is least likely to be needed soon.

The model (``memlens.scorer.model``, trained by ``memlens train``) scores an item at each of
its *anchors*: its write, every request that needs it, and every pin, unpin or annotation of
it, and again at *checkpoints* 2, 8 and 32 requests (of its stream) after its latest anchor
while no new anchor comes (``memlens.scorer.decision_features.decision_points``; the features read
nothing after the point).  So the model itself says how an untouched item's worth fades with
its age; between two of its points the score only decays on the stream's request clock::

    score_i(now) = log p_i - size_exponent * log tokens_i - decay_per_request * (R_now - R_a)

where ``p_i`` is the model's probability that the item is worth keeping at its latest point
``a`` and ``R`` counts the stream's requests.  The common ``- decay * R_now`` does not change
the order, so each item has a constant heap key ``log p_i - size_exponent * log tokens_i +
decay * R_a`` from its point on: eviction pops the smallest key (ties: least recently scored,
then item index), O(log n) per event like the rule scorer, and a decay of 0 keeps pure model
order while a large one tends to LRU.  ``decay_per_request`` and ``size_exponent`` come from
the model's sidecar (fitted on the training split by ``memlens train``) unless set.

Batched prediction: the features and scores of every point of a trace are computed in one
batch when the trace is first replayed (cached on the trace per model and budget, shared by
every stream and run), so the replay itself never calls the model.  Only ``tier`` depends on the
replay: an anchor is scored as written (write), resident (a hit, a pin or an annotation), or
below working memory (a need demand fetch brings back), and both need variants are batched.

Admission: when there is room, every item enters; when not, an item enters only if its key is
at least the smallest resident key (it would not be the next victim itself).

Cold start: with no model (``model: null``), or before the replay has seen ``min_feedback``
feedback events (pins, unpins, annotations: the trace's own or a person's or the simulated
user's put in with ``memlens.learn.feedback.with_feedback``), every decision is the rule scorer's
(``policies/rule.py`` with its defaults), exactly.  With ``retrain_every`` N > 0 the policy
also learns online: every N feedback events it trains a small model on the last
``retrain_window`` of them (keep -> 1, drop -> 0, a value -> value >= 0.5) and rescores every
anchor; that learner is shared by the streams of one replay in replay order (as one deployed
agent's sessions would share it) and forgotten when a new replay starts.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from functools import cached_property
from heapq import heapify, heappop, heappush
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
from memlens.policies.rule import RuleScorer

from memlens.policy import ADMIT_FETCH, Policy, PolicyContext, budgets_ahead, compiled_kernel
from memlens.scorer.decision_features import (
    ANCHOR_FEEDBACK,
    ANCHOR_NEED,
    ANCHOR_OTHER,
    ANCHOR_WRITE,
    BUDGET_COLUMNS,
    COLUMN,
    FEATURE_NAMES,
    TIER_LOWER,
    context,
    decision_features,
    decision_points,
    default_tier,
    set_budget,
)
from memlens.scorer.model import DEFAULT_MODEL, CompiledForest, LearnedModel, load_model
from memlens.scorer.ranges import RangeTracker, training_ranges, warn_bundled_outside
from memlens.trace.model import ANNOTATE, PIN, UNPIN, Trace

if TYPE_CHECKING:  # the estimator imports scikit-learn: only online retraining needs it
    from memlens.scorer.estimator import ValueScorer

ABSENT, ACTIVE, PINNED = 0, 1, 2
_NEVER = 1 << 62  # "no timed row left" for the catch-up's due event
COMPACT_MIN = 4096
_SCORES_KEY = "_memlens_learned_scores"


class AnchorTable:
    """The anchors of one trace, their features, and where the replay finds each one."""

    def __init__(self, trace: Trace) -> None:
        pts = decision_points(trace)
        self.points = pts
        self.trace = trace
        self.tier = default_tier(trace, pts)
        rows = np.arange(len(pts))
        need = pts.kind == ANCHOR_NEED
        self.need_rows = rows[need]
        self.write_row = np.zeros(trace.n_items, np.int64)
        self.write_row[pts.item[pts.kind == ANCHOR_WRITE]] = rows[pts.kind == ANCHOR_WRITE]
        self.need_row = np.zeros(len(trace.group_items), np.int64)  # per listed item
        self.need_row[pts.ref[need]] = rows[need]
        fb = rows[pts.kind == ANCHOR_FEEDBACK]
        self.feedback_rows = fb
        self.feedback_label = _feedback_labels(trace, pts.event[fb])
        self.clock = context(trace).req_clock[pts.event].astype(np.float64)  # its X column
        self.log_tokens = np.log(trace.item_tokens[pts.item].astype(np.float64))
        # per stream: its feedback and checkpoint rows in event order (taken in as they pass)
        timed = rows[(pts.kind == ANCHOR_FEEDBACK) | (pts.kind == ANCHOR_OTHER)]
        stream = trace.ev_stream[pts.event[timed]]
        order = np.argsort(stream, kind="stable")  # one pass, not a mask per stream
        bounds = np.searchsorted(stream[order], np.arange(trace.n_streams + 1))
        self.stream_timed = [timed[order[bounds[s] : bounds[s + 1]]]
                             for s in range(trace.n_streams)]  # fmt: skip
        self.is_feedback = pts.kind == ANCHOR_FEEDBACK

    @cached_property
    def X(self) -> np.ndarray:
        """Every anchor's features (budget columns: set before each use).  Only online
        estimators and retraining need it whole; compiled models score a block of anchors at a
        time (:meth:`raw_blocks`): on a 10M-event trace the whole matrix is ten gigabytes."""
        pts = self.points
        return decision_features(self.trace, pts.item, pts.event, self.tier, 1)

    @cached_property
    def lists(self) -> dict[str, list]:
        """The columns the replay indexes, as Python lists (shared by every replay)."""
        return {"write_row": self.write_row.tolist(), "need_row": self.need_row.tolist(),
                "event": self.points.event.tolist(), "item": self.points.item.tolist(),
                "is_feedback": self.is_feedback.tolist(),
                "timed": [rows.tolist() for rows in self.stream_timed]}  # fmt: skip

    def raw(self, evaluate: Callable, budget: int) -> tuple[np.ndarray, np.ndarray]:
        """Log-odds of every anchor at ``budget`` (as scored in place) and of every need
        scored as missed; ``evaluate(X)`` gives a model's raw scores."""
        X = self.X  # only its budget columns change, and they are set before every use
        set_budget(self.trace, self.points.item, self.points.event, X, budget)
        main = evaluate(X)
        miss = main.copy()
        if len(self.need_rows):
            Xm = X[self.need_rows]
            Xm[:, COLUMN["tier"]] = TIER_LOWER
            miss[self.need_rows] = evaluate(Xm)
        return main, miss

    def raw_blocks(self, forest: CompiledForest, budgets: list[int]) -> dict[int, tuple]:
        """``raw`` of a compiled model at each of ``budgets``: the features are built for a
        block of anchors at a time (each row depends on its own anchor only) and scored at
        every budget, in place and as missed, in one pass over the trees
        (``CompiledForest.raw_budgets``: only the budget columns differ between budgets)."""
        pts, n = self.points, len(self.points)
        out = {int(b): (np.empty(n), np.empty(n)) for b in budgets}
        self.seen = RangeTracker(len(FEATURE_NAMES))  # what the bundled model's check reads
        moved = np.zeros(n, np.bool_)
        moved[self.need_rows] = True
        for a in range(0, n, FEATURE_BLOCK):
            s = slice(a, min(n, a + FEATURE_BLOCK))
            X = (self.X[s] if "X" in self.__dict__
                 else decision_features(self.trace, pts.item[s], pts.event[s], self.tier[s], 1,
                                        "F"))  # fmt: skip
            values = np.empty((len(out), len(X), len(BUDGET_COLUMNS)))
            for k, b in enumerate(out):
                set_budget(self.trace, pts.item[s], pts.event[s], X, b)
                self.seen.add(X, None if k == 0 else BUDGET_COLUMNS)  # the rest is as it was
                values[k] = X[:, BUDGET_COLUMNS]
            mains, misses = forest.raw_budgets(X, moved[s], COLUMN["tier"], TIER_LOWER,
                                               BUDGET_COLUMNS, values)  # fmt: skip
            for k, (main, miss) in enumerate(out.values()):
                main[s], miss[s] = mains[k], misses[k]
        return out


FEATURE_BLOCK = 1 << 20  # anchors whose features are built at once (about 300 MB)


def _estimator_raw(table: AnchorTable, est: ValueScorer, budget: int):
    """``AnchorTable.raw`` for an online estimator (LightGBM's own evaluation, one thread)."""
    return table.raw(est.decision_function, budget)


def _feedback_labels(trace: Trace, events: np.ndarray) -> np.ndarray:
    """keep (pin) 1, drop (unpin) 0, annotation value >= 0.5; NaN for a note-only one."""
    out = np.full(len(events), np.nan)
    kinds = trace.ev_kind[events]
    out[kinds == PIN] = 1.0
    out[kinds == UNPIN] = 0.0
    for k in np.flatnonzero(kinds == ANNOTATE).tolist():
        value = trace.annotations[int(events[k])][0]
        if value is not None:
            out[k] = float(value >= 0.5)
    return out


def anchor_table(trace: Trace) -> AnchorTable:
    """The trace's :class:`AnchorTable` (cached on the trace) and per-model raw scores."""
    cache = trace.__dict__.setdefault(_SCORES_KEY, {})
    if "table" not in cache:
        cache["table"] = AnchorTable(trace)
    return cache["table"]


def anchor_key_arrays(trace: Trace, model: LearnedModel, budget: int, decay: float,
                      size: float) -> np.ndarray:  # fmt: skip
    """``keys[miss, row]``: the heap key of every point scored in place (``miss`` 0) and of
    every need scored as missed (1), cached on the trace for the most recent few (model,
    budget, setting) tuples: a compare's batch replays a trace's budgets one after another.
    Only the keys are kept (not the raw scores, nor lists): on a 5M-event trace each such
    array pair is hundreds of megabytes."""
    cache = trace.__dict__.setdefault(_SCORES_KEY, {})
    key = ("keys", model.sha256, int(budget), float(decay), float(size))
    if key not in cache:
        old = [k for k in cache if k[0] == "keys"]
        for k in old[: max(0, len(old) - 3)]:  # the batch's budgets follow
            del cache[k]
        table = anchor_table(trace)
        ahead = (b for b in budgets_ahead(trace)
                 if b != budget and ("keys", model.sha256, b, float(decay), float(size)) not in cache)  # fmt: skip
        budgets = [budget, *ahead]
        for b, (main, miss) in table.raw_blocks(model.forest, budgets).items():
            cache[("keys", model.sha256, b, float(decay), float(size))] = _keys(
                table, main, miss, decay, size)  # fmt: skip
        if is_bundled(model):
            outside = table.seen.outside(training_ranges(model.text))
            warn_bundled_outside(outside, str(trace.source))
    return cache[key]


def is_bundled(model: LearnedModel) -> bool:
    """Is ``model`` the bundled default model (the one that warns about unseen features)?"""
    try:
        return Path(model.source).resolve() == DEFAULT_MODEL.resolve()
    except (OSError, ValueError):
        return False


def anchor_keys(trace: Trace, model: LearnedModel, budget: int, decay: float,
                size: float) -> list[list[float]]:  # fmt: skip
    """:func:`anchor_key_arrays` as lists (the Python class's replay indexes them)."""
    return [k.tolist() for k in anchor_key_arrays(trace, model, budget, decay, size)]


def _keys(table: AnchorTable, main, miss, decay: float, size: float) -> np.ndarray:
    shift = decay * table.clock - size * table.log_tokens
    return np.stack([log_sigmoid(main) + shift, log_sigmoid(miss) + shift])


def log_sigmoid(raw: np.ndarray) -> np.ndarray:
    """log(1 / (1 + exp(-raw))), without overflow."""
    return -np.logaddexp(0.0, -raw)


@compiled_kernel("memlens.kernels.learned:replay")
class LearnedScorer(Policy):
    name = "learned"
    #: A sweep hands its batch out first (``memlens.runs.sweep.job_batches``): the features of
    #: every anchor and the forest at every budget made its batch as long as the other nine
    #: policies' together on the 5,800-stream benchmark (issue 34).
    sweep_weight = 8.0

    #: The class's anchor table and batch keys, for its compiled kernel (memlens/kernels/learned.py).
    anchor_table = staticmethod(anchor_table)
    anchor_key_arrays = staticmethod(anchor_key_arrays)

    def __init__(
        self,
        model: str | None = "default",
        min_feedback: int = 0,
        decay_per_request: float | None = None,
        size_exponent: float | None = None,
        admit_compare: bool = True,
        retrain_every: int = 0,
        retrain_window: int = 2000,
        seed: int = 0,
    ) -> None:
        for key, v in (("min_feedback", min_feedback), ("retrain_every", retrain_every)):
            if v < 0:
                raise ValueError(f"{key} must be >= 0, got {v}")
        if retrain_window < 2:
            raise ValueError(f"retrain_window must be at least 2, got {retrain_window}")
        for key, v in (("decay_per_request", decay_per_request), ("size_exponent", size_exponent)):
            if v is not None and not (math.isfinite(v) and v >= 0):
                raise ValueError(f"{key} must be a finite number >= 0 (or null), got {v}")
        self.model = load_model(model) if model else None
        self.min_feedback = int(min_feedback)
        self.decay = self._setting(decay_per_request, "decay_per_request", 0.1)
        self.size_exponent = self._setting(size_exponent, "size_exponent", 1.0)
        self.admit_compare = bool(admit_compare)
        self.retrain_every = int(retrain_every)
        self.retrain_window = int(retrain_window)
        self.seed = int(seed)
        self._rule = RuleScorer()
        self._trace_key = self._budget = None

    @classmethod
    def from_model(cls, model: LearnedModel | None, **kwargs) -> LearnedScorer:
        """The policy with an in-memory model (training, experiments, tests)."""
        policy = cls(model=None, **kwargs)
        policy.model = model
        if model is not None:  # the model's own settings where none were given
            policy.decay = policy._setting(kwargs.get("decay_per_request"), "decay_per_request",
                                           policy.decay)  # fmt: skip
            policy.size_exponent = policy._setting(kwargs.get("size_exponent"), "size_exponent",
                                                   policy.size_exponent)  # fmt: skip
        return policy

    def kernel_supported(self) -> bool:
        """The compiled kernel replays everything but online retraining (a model trained
        inside the replay) and models other than a :class:`LearnedModel` (batch keys)."""
        plain = self.model is None or isinstance(self.model, LearnedModel)
        return self.retrain_every == 0 and plain

    def _setting(self, given: float | None, key: str, default: float) -> float:
        if given is not None:
            return float(given)
        return float(self.model.policy_setting(key, default)) if self.model else default

    # ------------------------------------------------------------------ setup
    def _per_trace(self, trace: Trace, budget: int) -> None:
        """The trace's anchors as lists (what the hot path indexes), and a fresh learner."""
        if self._trace_key is trace and self._budget == budget:
            return
        self._trace_key, self._budget = trace, budget
        self._table = anchor_table(trace)
        lists = self._table.lists
        self._write_row, self._need_row = lists["write_row"], lists["need_row"]
        self._anchor_event, self._items_of_row = lists["event"], lists["item"]
        self._is_feedback = lists["is_feedback"]
        # every item a request lists (alternatives included: each is an anchor)
        self._needs_ptr = trace.request_items_ptr.tolist()
        self._needs = trace.group_items.tolist()
        self._tok = trace.item_tokens.tolist()
        self._online: LearnedModel | ValueScorer | None = None
        self._keys: list = [None, None]  # [scored in place, needs scored as missed], per row
        self._set_keys(self.model)

    def _set_keys(self, model) -> None:
        """Heap keys of every anchor under ``model`` (a file model or an online estimator)."""
        t = self._table
        if model is None:
            self._keys[0] = self._keys[1] = [0.0] * len(t.points)
            return
        if isinstance(model, LearnedModel):
            self._keys[:] = anchor_keys(self._trace_key, model, self._budget, self.decay,
                                        self.size_exponent)  # fmt: skip
            return
        main, miss = _estimator_raw(t, model, self._budget)
        self._keys[:] = [k.tolist() for k in _keys(t, main, miss, self.decay, self.size_exponent)]

    def reset(self, ctx: PolicyContext) -> None:
        super().reset(ctx)
        trace = ctx.trace
        new_replay = self._trace_key is not trace or ctx.stream == 0
        self._per_trace(trace, ctx.budget)
        if new_replay:  # the online learner belongs to one replay
            self._fb_seen = 0
            self._fb_buffer: list[int] = []
            if self._online is not None:
                self._online = None
                self._set_keys(self.model)
        self._rule.reset(ctx)
        n = trace.n_items
        self._state = bytearray(n)
        self._ver = [0] * n
        self._row = self._write_row.copy()  # each item's latest anchor row
        self._miss = bytearray(n)  # 1: that anchor is a need scored as missed
        self._last = [0] * n  # event of the latest anchor (ties)
        self._heap: list = []
        self._limit = [COMPACT_MIN]
        self._mode = [self._ready()]
        self._timed = self._table.lists["timed"][ctx.stream]
        self._fb_ptr = [0]
        self._due = [self._anchor_event[self._timed[0]] if self._timed else _NEVER]
        self._bind()

    def _ready(self) -> bool:
        """Whether the model is trusted: there is one and enough feedback has been seen."""
        has_model = self.model is not None or self._online is not None
        return has_model and self._fb_seen >= self.min_feedback

    def _bind(self) -> None:
        """Set the interface methods as closures (see ``RuleScorer._bind`` for why).  A replay
        with no way to ever leave cold start is the rule scorer's closures themselves."""
        rule = self._rule
        never = self.model is None and self.retrain_every == 0
        if never:
            self.admit, self.insert, self.observe, self.victims = (
                rule.admit, rule.insert, rule.observe, rule.victims)  # fmt: skip
            self.pin, self.unpin, self.annotate = rule.pin, rule.unpin, rule.annotate
            return
        catch_up = self._catch_up_fn()
        push = self._push_fn()
        self.admit = self._admit_fn(catch_up)
        self.insert = self._insert_fn(catch_up, push)
        self.observe = self._observe_fn(catch_up, push)
        self.victims = self._victims_fn(catch_up)
        self.pin, self.unpin, self.annotate = self._person_fns(catch_up, push)

    # -------------------------------------------------------------- the heap
    def _key(self, item: int) -> float:
        return self._keys[self._miss[item]][self._row[item]]

    def _push_fn(self) -> Callable[[int], None]:
        """``push(item)``: (re-)enter the eviction order with the key of its latest point."""
        heap, ver, state, last, limit = self._heap, self._ver, self._state, self._last, self._limit
        keys, row_of, miss = self._keys, self._row, self._miss

        def push(item: int) -> None:
            v = ver[item] + 1
            ver[item] = v
            state[item] = ACTIVE
            heappush(heap, (keys[miss[item]][row_of[item]], last[item], item, v))
            if len(heap) > limit[0]:
                heap[:] = [e for e in heap if ver[e[2]] == e[3]]
                heapify(heap)
                limit[0] = 2 * len(heap) + COMPACT_MIN

        return push

    def _top(self) -> tuple | None:
        """The live entry with the smallest key (stale ones dropped on the way)."""
        heap, ver = self._heap, self._ver
        while heap:
            entry = heap[0]
            if ver[entry[2]] == entry[3]:
                return entry
            heappop(heap)
        return None

    def _wake(self) -> None:
        """Leave cold start: the resident, unpinned items enter the heap by their anchors."""
        self._mode[0] = True
        memory, push = self.ctx.memory, self._push_fn()
        for item in memory.items():
            if not memory.is_pinned(item):
                push(item)
            else:
                self._state[item] = PINNED

    # ------------------------------------------------------------ the hooks
    def _catch_up_fn(self) -> Callable[[int], None]:
        """``catch_up(now)``: take in the stream's timed rows up to ``now``: checkpoints and
        feedback events (each one rescores its item); feedback is counted, and cold start ends
        once the model is trusted.

        Feedback is read from the trace rather than from ``pin``/``unpin`` (which have no event
        and are not called for an unpin of an unpinned item, a person's "drop")."""
        rows, ptr, event_of, due = self._timed, self._fb_ptr, self._anchor_event, self._due
        items, is_feedback = self._items_of_row, self._is_feedback
        row_of, miss, last, state, mode = self._row, self._miss, self._last, self._state, self._mode
        push = self._push_fn()
        n = len(rows)

        def catch_up(now: int) -> None:
            k = ptr[0]
            while k < n and event_of[rows[k]] <= now:
                r = rows[k]
                k += 1
                i = items[r]
                if mode[0] and not is_feedback[r]:  # a checkpoint: only resident items matter
                    if state[i] == ACTIVE:
                        row_of[i], miss[i], last[i] = r, 0, event_of[r]
                        push(i)
                    continue
                ptr[0] = k
                row_of[i], miss[i], last[i] = r, 0, event_of[r]
                if is_feedback[r]:
                    self._feedback(r)
                if mode[0]:
                    if state[i] == ACTIVE:
                        push(i)
                elif is_feedback[r] and self._ready():
                    self._wake()
            ptr[0] = k
            due[0] = event_of[rows[k]] if k < n else _NEVER

        return catch_up

    def _feedback(self, row: int) -> None:
        """One feedback event seen: count it; with online learning, buffer it and retrain."""
        self._fb_seen += 1
        if self.retrain_every <= 0:
            return
        self._fb_buffer.append(row)
        if self._fb_seen % self.retrain_every == 0:
            self._retrain()

    def _retrain(self) -> None:
        """Train on the last ``retrain_window`` labelled feedback events; rescore every anchor
        and re-key the resident items (a one-class window trains nothing)."""
        t = self._table
        pos = {int(r): k for k, r in enumerate(t.feedback_rows.tolist())}
        rows = self._fb_buffer[-self.retrain_window :]
        y = np.asarray([t.feedback_label[pos[r]] for r in rows])
        keep = ~np.isnan(y)
        rows, y = np.asarray(rows)[keep], y[keep]
        if len(np.unique(y)) < 2:
            return
        from memlens.scorer.estimator import ValueScorer

        est = ValueScorer(n_estimators=30, num_leaves=7, min_child_samples=2,
                          random_state=self.seed)  # fmt: skip
        X = t.X[rows]  # a copy: its budget columns set for this replay's budget
        set_budget(t.trace, t.points.item[rows], t.points.event[rows], X, self._budget)
        est.fit(X, y)
        self._online = est
        self._set_keys(est)
        if self._mode[0]:
            push = self._push_fn()
            for i in [i for i in range(len(self._state)) if self._state[i] == ACTIVE]:
                push(i)

    def _admit_fn(self, catch_up) -> Callable[[int, int, int], bool]:
        """``admit``: with room, yes; without, only if the item would not be the next victim."""
        rule_admit, mode, memory, budget, tok, due = (
            self._rule.admit, self._mode, self.ctx.memory, self.ctx.budget, self._tok, self._due)  # fmt: skip
        write_row, compare, keys = self._write_row, self.admit_compare, self._keys

        def admit(item: int, now: int, reason: int) -> bool:
            if now >= due[0]:
                catch_up(now)
            if not mode[0]:
                return rule_admit(item, now, reason)
            if not compare or memory.used_tokens + tok[item] <= budget:
                return True
            top = self._top()
            if top is None:
                return True
            new = self._key(item) if reason == ADMIT_FETCH else keys[0][write_row[item]]
            return new >= top[0]

        return admit

    def _insert_fn(self, catch_up, push) -> Callable[[int, int], None]:
        rule_insert, mode, last = self._rule.insert, self._mode, self._last
        write_row, row_of, miss = self._write_row, self._row, self._miss
        event_of = self._anchor_event

        def insert(item: int, now: int) -> None:
            if now == event_of[write_row[item]]:  # its write
                row_of[item], miss[item], last[item] = write_row[item], 0, now
            if mode[0]:
                push(item)
            else:
                rule_insert(item, now)

        return insert

    def _observe_fn(self, catch_up, push) -> Callable[[int, int], None]:
        """``observe``: each need is a new anchor (scored as a hit if resident, else as missed,
        in case demand fetch brings it back)."""
        rule_observe, mode, state = self._rule.observe, self._mode, self._state
        resident = self.ctx.memory.resident
        needs_ptr, needs, need_row = self._needs_ptr, self._needs, self._need_row
        row_of, miss, last = self._row, self._miss, self._last

        due = self._due

        def observe(request: int, now: int) -> None:
            if now >= due[0]:
                catch_up(now)
            for j in range(needs_ptr[request], needs_ptr[request + 1]):
                i = needs[j]
                row_of[i], last[i] = need_row[j], now
                if mode[0]:
                    miss[i] = 0 if state[i] else 1  # ACTIVE or PINNED: resident
                    if state[i] == ACTIVE:
                        push(i)
                else:
                    miss[i] = 0 if resident(i) else 1
            if not mode[0]:
                rule_observe(request, now)

        return observe

    def _victims_fn(self, catch_up) -> Callable[[int, int], list[int]]:
        rule_victims, mode, heap, ver, state, tok = (
            self._rule.victims, self._mode, self._heap, self._ver, self._state, self._tok)  # fmt: skip
        due = self._due

        def victims(excess: int, now: int) -> list[int]:
            if now >= due[0]:
                catch_up(now)
            if not mode[0]:
                return rule_victims(excess, now)
            out: list[int] = []
            freed = 0
            while freed < excess and heap:
                _, _, i, v = heappop(heap)
                if ver[i] != v:
                    continue
                ver[i] = v + 1
                state[i] = ABSENT
                out.append(i)
                freed += tok[i]
            return out

        return victims

    def _person_fns(self, catch_up, push):
        """``pin``/``unpin``/``annotate``: pinned items leave the heap; an unpinned one
        re-enters with its latest anchor (the unpin itself is taken in by ``catch_up``)."""
        rule, mode, state, ver = self._rule, self._mode, self._state, self._ver

        def pin(item: int) -> None:
            if mode[0]:
                state[item] = PINNED
                ver[item] += 1
            else:
                rule.pin(item)

        def unpin(item: int) -> None:
            if mode[0]:
                if state[item] == PINNED:
                    push(item)
            else:
                rule.unpin(item)

        def annotate(item: int, value: float | None, note: str | None, now: int) -> None:
            catch_up(now)
            if not mode[0]:
                rule.annotate(item, value, note, now)

        return pin, unpin, annotate
