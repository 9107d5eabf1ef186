"""The replay simulator: the readable reference semantics of MemLens.

Contract (other tools, the fast kernels and the oracle are checked against it):

* Working memory (WM) holds items whose tokens sum to at most ``budget``.  An item larger than
  the budget is never admitted (unless a pin forces it).  Items evicted from WM move to the
  short-term cache and from there to the long-term store; every WM move is logged here and the
  lower tiers replay that log (``memlens.retrieval.tiers``).
* An item enters WM when the policy's ``admit`` says yes (at its write, or after a request
  missed it with ``demand_fetch``) or when a pin forces it; the simulator then counts it and
  calls the policy's ``insert``.  ``admit`` only decides.
* A request's hits are its needed ids that are in WM after all earlier events and before the
  request's own updates.  Then the hits are touched in ``needs`` order, the policy observes the
  request, and with ``demand_fetch`` the simulator walks ``needs`` in order and brings back every
  need absent at that moment (each subject to the policy's ``admit`` and fitting the budget
  alone): the misses, and also a hit that an earlier fetch of the same request just evicted, so
  a request's needs end up resident together when they fit.
* A need may be a group of alternatives (trace format 1.1): it is a hit when any of its items
  is in WM; the touch goes to the first resident one in listed order (the item that served it:
  touching every resident alternative would keep redundant copies alive under recency
  policies), every alternative counts as used (false evictions), and demand fetch, when none is
  resident, brings back the first-listed one (``trace.needs[j]``): the trace's writer orders
  the alternatives, so the fetched item, and with it the miss cost, is fixed by the trace, not
  by the policy's state, and a plain need is the group of one it always was.
* A pin forces its target into WM (as the newest item if it was not there) and keeps it there
  until unpinned.  Pinned items count against the budget; when pins alone exceed it, the run
  says so (``pins_over_budget_requests``).
* Streams are independent agents with their own WM and budget; results are summed.
* Request-time retrieval (optional ``hook``, a :class:`RequestHook`; reference engine only): at
  each request, before its hits are decided, the hook brings the lower tiers up to date from the
  move log and assembles the request's retrieved context; hits stay WM-only.  With promotion,
  the items it returns are brought into WM after the request's demand fetch (each one subject
  to ``admit``, logged as ``promote``); such a run can place items outside writes, pins and
  demand fetch, so it is outside the oracle class (``extra["outside_oracle_class"]``).

The policy sees the simulator's state read-only through ``ctx.memory``
(:class:`memlens.policy.WorkingMemory`).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from enum import IntEnum
from typing import Protocol, runtime_checkable

import numpy as np

from memlens.policy import (
    ADMIT_FETCH,
    ADMIT_WRITE,
    COMPILED_KERNELS,
    Policy,
    PolicyContext,
    PolicyError,
    WorkingMemory,
    admits_everything,
    kernel_of,
)
from memlens.trace.model import EventKind, Trace


class MoveKind(IntEnum):
    """Kinds of working-memory moves in the move log (``SimResult.move_kind``, int8).

    Usable as constants inside numba kernels (``memlens.kernels.queues``).
    """

    ADMIT = 0  # a write entered WM
    BYPASS = 1  # a write went straight to the short-term cache (declined or larger than budget)
    EVICT = 2  # WM -> short-term cache
    FETCH = 3  # lower tier -> WM after a request missed it (demand fetch)
    PIN = 4  # lower tier -> WM forced by a pin
    PROMOTE = 5  # lower tier -> WM because request-time retrieval brought it back


MOVE_NAMES = tuple(k.name.lower() for k in MoveKind)
# The members' values as plain ints, for hot loops (``MoveKind.X`` is an attribute lookup on
# the enum class, ~0.1 us in CPython 3.11) and for modules that import these names.
MOVE_ADMIT, MOVE_BYPASS, MOVE_EVICT, MOVE_FETCH, MOVE_PIN, MOVE_PROMOTE = map(int, MoveKind)


@runtime_checkable
class RequestHook(Protocol):
    """Request-time retrieval, called by the reference engine at every request.

    ``memlens.retrieval.assemble.LiveRetrieval`` implements it.  The move log so far is passed
    as three parallel sequences (event, item, ``MoveKind`` value); the hook must not modify it.
    """

    #: Whether ``request`` returns items to bring into working memory (then the run is outside
    #: the oracle class).
    promote: bool

    def request(self, r: int, e: int, mv_event: Sequence[int], mv_item: Sequence[int],
                mv_kind: Sequence[int]) -> Iterable[int]:  # fmt: skip
        """Request ``r`` at event ``e``: assemble its context; return items to promote."""
        ...

    def finish(self, mv_event: Sequence[int], mv_item: Sequence[int],
               mv_kind: Sequence[int]) -> None:  # fmt: skip
        """The replay is over: consume the rest of the move log."""
        ...


@dataclass
class SimResult:
    """Raw outcome of one replay; ``memlens.analyze.metrics`` turns it into numbers."""

    budget: int
    demand_fetch: bool
    policy: str
    engine: str
    need_hit: np.ndarray  # uint8 per needed reference (aligned with trace.needs)
    context_tokens: np.ndarray  # int64 per request: WM tokens when it was evaluated
    pinned_tokens: np.ndarray  # int64 per request: pinned tokens when it was evaluated
    evictions: np.ndarray  # int64 per stream
    false_evictions: np.ndarray  # int64 per stream
    move_event: np.ndarray  # int64 per move
    move_item: np.ndarray  # int32 per move
    move_kind: np.ndarray  # int8 per move (a MoveKind value)
    wall_s: float = 0.0
    extra: dict = field(default_factory=dict)


def _check_budget(budget) -> int:
    if isinstance(budget, bool) or not isinstance(budget, (int, np.integer)) or budget <= 0:
        raise ValueError(f"budget must be a positive integer number of tokens, got {budget!r}")
    return int(budget)


def simulate(
    trace: Trace,
    policy: Policy,
    budget: int,
    demand_fetch: bool = False,
    seed: int = 0,
    engine: str = "auto",
    progress: bool | None = None,
    hook: RequestHook | None = None,
) -> SimResult:
    """Replay ``trace`` against ``policy`` at ``budget`` tokens per stream.

    ``engine``: ``reference`` (this module, any policy), ``fast`` (compiled kernel, only for
    policy classes that register one with ``@compiled_kernel``) or ``auto`` (fast when
    available).  Kernels are looked up by the policy's exact class, never inherited.
    """
    budget = _check_budget(budget)
    if engine not in ("auto", "fast", "reference"):
        raise ValueError(f"engine must be auto, fast or reference, got {engine!r}")
    kernel = kernel_of(policy)
    if hook is not None:  # the compiled kernels cannot call back into Python per request
        if engine == "fast":
            raise ValueError("request-time retrieval with promotion needs engine=reference or auto")
        kernel = None
    if engine == "fast" and kernel is None:
        raise ValueError(no_kernel_message(policy, hook is not None))
    if kernel is not None and engine in ("auto", "fast"):
        from memlens.kernels import run_kernel

        return run_kernel(kernel, policy, trace, budget, bool(demand_fetch), seed)
    return _simulate_reference(trace, policy, budget, demand_fetch, seed, progress, hook)


def no_kernel_message(policy: Policy, hooked: bool = False) -> str:
    """Why ``engine=fast`` cannot replay ``policy``: no kernel for its exact class, or one that
    does not reproduce this instance (its settings, or a value probe watching its methods)."""
    who = f"policy {getattr(policy, 'name', '?')!r} ({type(policy).__name__})"
    target = COMPILED_KERNELS.get(type(policy))
    if target is None:
        return (f"{who} has no fast kernel registered for its exact class (a subclass does not "
                "inherit its parent's); use engine=auto or engine=reference")  # fmt: skip
    why = getattr(policy, "kernel_unsupported_reason", None) or (
        "its kernel_supported() says the kernel does not reproduce these settings"
    )
    return (f"{who}: no fast kernel for this instance: {why} ({target}); use engine=auto or "
            "engine=reference")  # fmt: skip


def _simulate_reference(
    trace: Trace, policy: Policy, budget: int, demand_fetch: bool, seed: int, progress,
    hook: RequestHook | None = None,
) -> SimResult:  # fmt: skip
    from tqdm import tqdm

    replay = _Replay(trace, policy, budget, demand_fetch, hook)
    bar = tqdm(total=trace.n_events, disable=None if progress is None else not progress,
               unit="ev", mininterval=0.5, leave=False)  # fmt: skip
    t0 = time.perf_counter()
    for s in range(trace.n_streams):
        bar.update(replay.run_stream(s, seed))
    if hook is not None:
        hook.finish(*replay.mv_lists())
    wall = time.perf_counter() - t0
    bar.close()
    return replay.result(wall)


def _overrides(policy: Policy, method: str) -> bool:
    """Whether ``policy``'s ``method`` does something (is not the base class's no-op)."""
    return getattr(getattr(policy, method), "__func__", None) is not getattr(Policy, method)


Handler = Callable[[int, int], None]  # (item or request index, event index)


class _Replay:
    """The reference engine: one replay's state, and per stream one handler per event kind.

    Shared by the streams: residency (``in_wm``), hit marks, use counts and the move log.  Per
    stream (``start``): the token counters ``used`` and ``pinned_tok`` (which the policy's
    ``ctx.memory`` view reads), the pins, and the handlers.  The handlers are closures built
    once per stream by the ``_*_fn`` methods: they find the trace's columns and the policy's
    bound methods in cells rather than attributes, which keeps the per-event cost of a single
    hand-inlined loop in CPython.  Streams are replayed one after another; ``result`` puts the
    move log back into file order.
    """

    def __init__(self, trace: Trace, policy: Policy, budget: int, demand_fetch: bool,
                 hook: RequestHook | None) -> None:  # fmt: skip
        self.trace, self.policy, self.budget = trace, policy, budget
        self.demand_fetch, self.hook = demand_fetch, hook
        self.kinds = trace.ev_kind.tolist()
        self.refs = trace.ev_ref.tolist()
        self.tokens = trace.item_tokens.tolist()
        self.item_stream = trace.item_stream.tolist()
        self.needs_ptr = trace.needs_ptr.tolist()
        self.needs = trace.needs.tolist()
        self.groups = trace.alternative_groups  # need -> its alternatives (format 1.1 only)
        self.n_uses = trace.item_n_uses.tolist()
        self.uses_seen = [0] * trace.n_items
        self.in_wm = bytearray(trace.n_items)
        self.need_hit = bytearray(trace.n_references)
        self.context_tokens = [0] * trace.n_requests
        self.pinned_tokens_at = [0] * trace.n_requests
        self.evictions = [0] * trace.n_streams
        self.false_evictions = [0] * trace.n_streams
        self.mv_event: list[int] = []
        self.mv_item: list[int] = []
        self.mv_kind = bytearray()  # MoveKind values
        self.log = (self.mv_event.append, self.mv_item.append, self.mv_kind.append)

    # ------------------------------------------------------------- streams
    def start(self, s: int, seed: int) -> None:
        """Stream ``s`` begins: fresh counters and pins, the policy reset with a view of them."""
        self.stream = s
        self.used = 0  # tokens of resident items, pinned included
        self.pinned_tok = 0
        self.pins: dict[int, None] = {}  # pinned items, in pin order
        self.n_evicted = self.n_false = 0
        memory = WorkingMemory(self, self.trace, s, self.in_wm, self.pins)
        self.policy.reset(PolicyContext(trace=self.trace, stream=s, budget=self.budget,
                                        demand_fetch=self.demand_fetch,
                                        rng=np.random.default_rng([seed, s]), memory=memory))  # fmt: skip
        # built after reset: a policy may set its methods there (the rule scorer does)
        self.make_room = self._make_room_fn()
        enter = self._enter_fn()
        handlers = {
            EventKind.WRITE: self._write_fn(),
            EventKind.REQUEST: self._request_fn(self._bring_back_fn(enter)),
            EventKind.PIN: self._pin_fn(enter),
            EventKind.UNPIN: self._unpin_fn(),
            EventKind.ANNOTATE: self._annotate_fn(),
        }
        self.handlers = [handlers[k] for k in EventKind]  # indexed by event kind

    def run_stream(self, s: int, seed: int) -> int:
        """Replay stream ``s``; returns its number of events."""
        self.start(s, seed)
        handlers, kinds, refs = self.handlers, self.kinds, self.refs
        events = self.trace.stream_events[s].tolist()
        for e in events:
            handlers[kinds[e]](refs[e], e)
        self.evictions[s] = self.n_evicted
        self.false_evictions[s] = self.n_false
        return len(events)

    # ------------------------------------------------------ event handlers
    def _write_fn(self) -> Handler:
        """A write enters WM if it fits the budget and the policy admits it, else bypasses."""
        tokens, budget, in_wm, policy = self.tokens, self.budget, self.in_wm, self.policy
        admit, admits_all, insert = policy.admit, admits_everything(policy), policy.insert
        make_room, (log_event, log_item, log_kind) = self.make_room, self.log

        def write(x: int, e: int) -> None:
            tok = tokens[x]
            log_event(e)
            log_item(x)
            if tok <= budget and (admits_all or admit(x, e, ADMIT_WRITE)):
                log_kind(MOVE_ADMIT)
                in_wm[x] = 1
                self.used += tok
                insert(x, e)
                if self.used + policy.extra_tokens > budget:
                    make_room(e)
            else:
                log_kind(MOVE_BYPASS)

        return write

    def _request_fn(self, bring_back: Callable[[int, int, int], None]) -> Handler:
        """A request: hits first, then touches, the policy's observation, demand fetch and
        (with a hook) promotion."""
        if self.trace.has_alternatives:
            return self._group_request_fn(bring_back)
        needs_ptr, needs, need_hit, in_wm = self.needs_ptr, self.needs, self.need_hit, self.in_wm
        uses_seen, context_tokens = self.uses_seen, self.context_tokens
        pinned_at = self.pinned_tokens_at
        policy, hook, demand_fetch, mv = self.policy, self.hook, self.demand_fetch, self.mv_lists()
        touch = policy.touch if _overrides(policy, "touch") else None  # no-ops are skipped
        observe = policy.observe if _overrides(policy, "observe") else None

        def request(x: int, e: int) -> None:
            promote = hook.request(x, e, *mv) if hook is not None else None
            context_tokens[x] = self.used + policy.extra_tokens
            pinned_at[x] = self.pinned_tok
            lo, hi = needs_ptr[x], needs_ptr[x + 1]
            for j in range(lo, hi):  # hits are decided before any of the request's updates
                if in_wm[needs[j]]:
                    need_hit[j] = 1
            for j in range(lo, hi):
                if touch is not None and need_hit[j]:
                    touch(needs[j], e)
                uses_seen[needs[j]] += 1
            if observe is not None:
                observe(x, e)
            if demand_fetch:
                for j in range(lo, hi):
                    if not in_wm[needs[j]]:
                        bring_back(needs[j], e, MOVE_FETCH)
            if promote is not None:
                for i in promote:
                    bring_back(i, e, MOVE_PROMOTE)

        return request

    def _group_request_fn(self, bring_back: Callable[[int, int, int], None]) -> Handler:
        """``_request_fn`` for a trace whose needs may be groups of alternatives (module
        docstring): the same steps, with "resident" meaning "some alternative is resident"."""
        needs_ptr, needs, need_hit, in_wm = self.needs_ptr, self.needs, self.need_hit, self.in_wm
        uses_seen, context_tokens, groups = self.uses_seen, self.context_tokens, self.groups
        pinned_at = self.pinned_tokens_at
        policy, hook, demand_fetch, mv = self.policy, self.hook, self.demand_fetch, self.mv_lists()
        touch = policy.touch if _overrides(policy, "touch") else None
        observe = policy.observe if _overrides(policy, "observe") else None

        def resident(j: int) -> int:
            """The first resident alternative of need ``j`` (-1 if none is)."""
            group = groups.get(j)
            if group is None:
                return needs[j] if in_wm[needs[j]] else -1
            return next((i for i in group if in_wm[i]), -1)

        def request(x: int, e: int) -> None:
            promote = hook.request(x, e, *mv) if hook is not None else None
            context_tokens[x] = self.used + policy.extra_tokens
            pinned_at[x] = self.pinned_tok
            lo, hi = needs_ptr[x], needs_ptr[x + 1]
            served = [resident(j) for j in range(lo, hi)]  # before any of the request's updates
            for j, i in zip(range(lo, hi), served):
                if i >= 0:
                    need_hit[j] = 1
                    if touch is not None:
                        touch(i, e)
                for a in groups.get(j, (needs[j],)):
                    uses_seen[a] += 1
            if observe is not None:
                observe(x, e)
            if demand_fetch:
                for j in range(lo, hi):
                    if resident(j) < 0:
                        bring_back(needs[j], e, MOVE_FETCH)
            if promote is not None:
                for i in promote:
                    bring_back(i, e, MOVE_PROMOTE)

        return request

    def _pin_fn(self, enter: Callable[[int, int, int], None]) -> Handler:
        """A pin forces its item into WM (as the newest) and keeps it there."""
        tokens, in_wm, pins, policy = self.tokens, self.in_wm, self.pins, self.policy

        def pin(x: int, e: int) -> None:
            if x in pins:
                return
            if not in_wm[x]:
                enter(x, e, MOVE_PIN)
            pins[x] = None
            self.pinned_tok += tokens[x]
            policy.pin(x)
            self.make_room(e)

        return pin

    def _unpin_fn(self) -> Handler:
        """An unpin: the item may be evicted again (at once, if pins held WM over budget)."""
        tokens, pins, policy = self.tokens, self.pins, self.policy

        def unpin(x: int, e: int) -> None:
            if x in pins:
                del pins[x]
                self.pinned_tok -= tokens[x]
                policy.unpin(x)
                self.make_room(e)

        return unpin

    def _annotate_fn(self) -> Handler:
        annotations, policy = self.trace.annotations, self.policy

        def annotate(x: int, e: int) -> None:
            value, note = annotations[e]
            policy.annotate(x, value, note, e)

        return annotate

    # ------------------------------------------------------------- moves
    def mv_lists(self) -> tuple[list[int], list[int], bytearray]:
        """The move log so far (what a request hook is shown)."""
        return self.mv_event, self.mv_item, self.mv_kind

    def _enter_fn(self) -> Callable[[int, int, int], None]:
        """``enter(x, now, move)``: ``x`` enters WM (fetched, promoted or pinned): count it, log
        the move, then tell the policy."""
        tokens, in_wm, insert, (log_event, log_item, log_kind) = (
            self.tokens, self.in_wm, self.policy.insert, self.log)  # fmt: skip

        def enter(x: int, now: int, move: int) -> None:
            in_wm[x] = 1
            self.used += tokens[x]
            log_event(now)
            log_item(x)
            log_kind(move)
            insert(x, now)

        return enter

    def _bring_back_fn(
        self, enter: Callable[[int, int, int], None]
    ) -> Callable[[int, int, int], None]:
        """``bring_back(i, now, move)``: after a request, a missed need (demand fetch) or a
        retrieved item (promotion) re-enters WM if it fits the budget and the policy admits it."""
        tokens, budget, in_wm, policy, make_room = (
            self.tokens, self.budget, self.in_wm, self.policy, self.make_room)  # fmt: skip
        admit, admits_all = policy.admit, admits_everything(policy)

        def bring_back(i: int, now: int, move: int) -> None:
            if in_wm[i] or tokens[i] > budget:
                return
            if admits_all or admit(i, now, ADMIT_FETCH):
                enter(i, now, move)
                if self.used + policy.extra_tokens > budget:
                    make_room(now)

        return bring_back

    def _make_room_fn(self) -> Callable[[int], None]:
        """``make_room(now)``: evict the policy's victims until WM fits the budget or only pins
        are left; a victim that is pinned or not resident is a :class:`PolicyError`."""
        policy, budget, tokens, in_wm, pins = (
            self.policy, self.budget, self.tokens, self.in_wm, self.pins)  # fmt: skip
        victims, item_stream, s, n_items = policy.victims, self.item_stream, self.stream, len(in_wm)
        uses_seen, n_uses, (log_event, log_item, log_kind) = self.uses_seen, self.n_uses, self.log

        def make_room(now: int) -> None:
            used = self.used
            while used + policy.extra_tokens > budget and used > self.pinned_tok:
                chosen = victims(used + policy.extra_tokens - budget, now)
                if not chosen:
                    raise PolicyError(f"{policy.name}: working memory is over budget but "
                                      "victims() chose nothing")  # fmt: skip
                for v in chosen:
                    if not (0 <= v < n_items and in_wm[v] and item_stream[v] == s) or v in pins:
                        what = "pinned" if v in pins else "not resident"
                        raise PolicyError(f"{policy.name}: victims() returned item {v}, {what}")
                    in_wm[v] = 0
                    used -= tokens[v]
                    self.n_evicted += 1
                    if uses_seen[v] < n_uses[v]:
                        self.n_false += 1
                    log_event(now)
                    log_item(v)
                    log_kind(MOVE_EVICT)
                self.used = used  # before the next victims() call: ctx.memory reads it

        return make_room

    # ------------------------------------------------------------- result
    def result(self, wall: float) -> SimResult:
        """The outcome, with the move log back in file order (streams were replayed in turn)."""
        mv_event = np.asarray(self.mv_event, dtype=np.int64)
        order = np.argsort(mv_event, kind="stable")
        hook = self.hook
        return SimResult(
            budget=self.budget,
            demand_fetch=self.demand_fetch,
            policy=self.policy.name,
            engine="reference",
            need_hit=np.frombuffer(bytes(self.need_hit), dtype=np.uint8).copy(),
            context_tokens=np.asarray(self.context_tokens, dtype=np.int64),
            pinned_tokens=np.asarray(self.pinned_tokens_at, dtype=np.int64),
            evictions=np.asarray(self.evictions, dtype=np.int64),
            false_evictions=np.asarray(self.false_evictions, dtype=np.int64),
            move_event=mv_event[order],
            move_item=np.asarray(self.mv_item, dtype=np.int32)[order],
            move_kind=np.frombuffer(bytes(self.mv_kind), dtype=np.int8)[order],
            wall_s=wall,
            extra={"outside_oracle_class": True} if hook is not None and hook.promote else {},
        )
