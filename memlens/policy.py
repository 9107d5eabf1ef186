"""The placement-policy interface: the one thing every memory policy implements.

A policy decides, for one stream at a time, which items sit in working memory.  The simulator
owns the facts (what is resident, the token budget, pins, the move log) and shows them to the
policy read-only as ``ctx.memory`` (:class:`WorkingMemory`); the policy owns only its ordering
state.  The interface is deliberately small, in the spirit of Gymnasium's ``Env`` and
cachetools' ``Cache``:

``reset(ctx)``                  a new stream begins; forget everything.
``admit(item, now, reason)``    an item may enter working memory (at its write or, with demand
                                fetch, after a request missed it): decide only, return True to
                                let it in (the simulator then calls ``insert``) or False to
                                decline (it then goes straight to the short-term cache).
``insert(item, now)``           the item *is* entering working memory (after ``admit`` said yes,
                                or forced by a pin); record it as the newest item.  The
                                simulator has already counted it: ``ctx.memory`` shows it.
``touch(item, now)``            a resident item was needed by a request (for a need with
                                alternatives, trace format 1.1: the first resident one).
``victims(excess, now)``        working memory is ``excess`` tokens over budget: return resident,
                                unpinned items to evict, in order.  The policy forgets them.
``observe(request, now)``       a request was evaluated; its needs are ``ctx.trace.needs_of(r)``
                                (each need's first-listed alternative); every item they list,
                                alternatives included, is in ``trace.group_items`` between
                                ``trace.request_items_ptr[r]`` and ``[r + 1]``.
``pin(item)`` / ``unpin(item)`` a person marked the item must-keep / lifted that (the simulator
                                has already recorded it).  A pinned item must never be returned
                                by ``victims``.
``annotate(item, value, note)`` a person set a value and/or note on an item.
``grow(columns)``               (live use only, ``grows = True``) the trace grew after ``reset``:
                                ``memlens.live`` appends events, items and requests as an agent
                                makes them; extend the per-item and per-event lists the policy
                                took from ``ctx.trace`` from ``columns`` (module docstring of
                                ``memlens.live.columns``) before its next call.
``share_trace_state(other)``    (live use only, optional) ``other`` is an instance of the same
                                configuration already reset on the trace this one will be reset
                                on (the live manager runs one instance per stream): take its
                                read-only per-trace state instead of computing it again.
``restore(replayed)``           (live use only, optional; only with a compiled kernel) just
                                after ``reset``: take the state replaying the stream's events
                                would have left, from the facts of the kernel's replay of them
                                (:class:`ReplayedStream`).  Reopening a live record then costs a
                                kernel replay instead of a Python step per event.

``now`` is always the event index being replayed; the trace time is ``ctx.trace.ev_t[now]``.
Items and requests are integer indices into the trace's columnar arrays (``memlens.trace.model``).

A policy whose replay a compiled kernel reproduces event for event registers it for its exact
class with ``@compiled_kernel("memlens.kernels.queues:replay_fifo")``; subclasses do not inherit it (a subclass may change
any method), so they replay on the reference engine unless they register themselves.
"""

from __future__ import annotations

import re
from collections import OrderedDict
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Protocol, TypeVar

import numpy as np

from memlens.trace.model import Trace

ADMIT_WRITE = 0  # ``admit`` reason: the item is being written
ADMIT_FETCH = 1  # ``admit`` reason: a request missed it (demand fetch) or retrieval promotes it

#: Exact policy class -> the compiled kernel that replays it identically, as
#: ``"module:function"`` (imported when first used: importing a policy must not import numba).
#: Looked up with ``type(policy)``, never through inheritance: see :func:`compiled_kernel`.
COMPILED_KERNELS: dict[type, str] = {}
_KERNEL_PATH = re.compile(r"[A-Za-z_]\w*(\.[A-Za-z_]\w*)*:[A-Za-z_]\w*")

P = TypeVar("P", bound=type)


def compiled_kernel(target: str) -> Callable[[P], P]:
    """Class decorator: the function at ``target`` (``"module:function"``) replays exactly this
    class.  It is called as ``fn(policy, trace, budget, demand_fetch, seed)`` and returns the
    reference engine's ``SimResult`` exactly; it reads what it needs from the policy object it
    is given (``memlens.kernels``).  A policy registers its kernel here, next to itself: there
    is no central list.

    The registration covers the decorated class only.  A subclass that overrides ``touch`` or
    ``victims`` would otherwise be replayed by its parent's kernel with the parent's behaviour;
    ``memlens.checker`` checks every registration event for event against the reference engine.
    """
    if not isinstance(target, str) or not _KERNEL_PATH.fullmatch(target):
        raise ValueError(f"compiled kernel {target!r}: name the function as 'module:function' "
                         "(e.g. 'memlens.kernels.lfu:replay')")  # fmt: skip

    def register(cls: P) -> P:
        COMPILED_KERNELS[cls] = target
        return cls

    return register


def kernel_of(policy: object) -> str | None:
    """The compiled kernel registered for ``policy``'s exact class, or None (also when the
    policy says its configuration is one the kernel does not reproduce: ``kernel_supported``)."""
    name = COMPILED_KERNELS.get(type(policy))
    if name is None or not getattr(policy, "kernel_supported", lambda: True)():
        return None
    return name


_BUDGETS_AHEAD_KEY = "_memlens_budgets_ahead"


def announce_budgets(trace, budgets: list[int]) -> None:
    """Tell the policies replaying ``trace`` next which budgets will follow (a sweep's batch
    of one (trace, policy)): a policy whose per-budget preparation is cheaper for several
    budgets at once (the learned scorer's pass over its anchors) may do them together.
    Results never depend on it."""
    trace.__dict__[_BUDGETS_AHEAD_KEY] = [int(b) for b in budgets]


def budgets_ahead(trace) -> list[int]:
    """The budgets :func:`announce_budgets` announced for ``trace`` (none: [])."""
    return list(trace.__dict__.get(_BUDGETS_AHEAD_KEY, []))


@dataclass(frozen=True)
class ReplayedStream:
    """What a replay of stream ``stream``'s events left, as :meth:`Policy.restore` is shown it.

    Per-item arrays are indexed like the trace's items (length ``n_items``, int64, -1 for
    "never"); only this stream's entries (``items``) are meaningful to its policy.  Needs count
    every item a request lists, alternatives included (``trace.group_items``), as ``observe``
    sees them.
    """

    stream: int
    items: np.ndarray  # this stream's items, in write order
    resident: np.ndarray  # bool: in working memory after the replay
    pins: Mapping[int, None]  # pinned after the replay, in pin order
    last_enter: np.ndarray  # the last event at which the item entered working memory
    last_need: np.ndarray  # the last request that listed it
    n_listed: np.ndarray  # how many times requests listed it
    annotations: list[tuple[int, int, float | None, str | None]]  # (event, item, value, note)


class PolicyError(RuntimeError):
    """A policy broke the interface contract (evicted a pinned or absent item, ...)."""


class MemoryCounters(Protocol):
    """What :class:`WorkingMemory` reads its token counts from (the simulator's replay)."""

    used: int
    pinned_tok: int


class WorkingMemory:
    """A read-only view of one stream's working memory, kept by the simulator.

    Reads go straight to the simulator's own state (its residency bytearray, pin mapping and
    token counters), so the view costs the replay nothing per event.  During ``insert`` the
    entering item is already counted; during ``victims`` the items being chosen are still
    resident; during ``pin``/``unpin`` the pin is already recorded.

    ``pinned`` is a read-only mapping whose keys are the pinned items in pin order, and
    ``is_pinned(item)`` its membership test: both are C-level, cheap enough for hot paths.
    """

    __slots__ = ("_counters", "_in_wm", "_trace", "_stream", "_items", "pinned", "is_pinned")

    def __init__(self, counters: MemoryCounters, trace: Trace, stream: int, in_wm: bytearray,
                 pins: dict[int, None]) -> None:  # fmt: skip
        self._counters = counters
        self._in_wm = in_wm
        self._trace = trace
        self._stream = stream
        self._items: list[int] | None = None  # this stream's items, computed when first asked
        self.pinned: Mapping[int, None] = MappingProxyType(pins)
        self.is_pinned: Callable[[int], bool] = pins.__contains__

    @property
    def used_tokens(self) -> int:
        """Tokens of the resident items, pinned ones included (not the policy's extra tokens)."""
        return self._counters.used

    @property
    def pinned_tokens(self) -> int:
        """Tokens of the pinned items (all of them resident)."""
        return self._counters.pinned_tok

    def resident(self, item: int) -> bool:
        """Whether ``item`` (of this stream) is in working memory now."""
        return bool(self._in_wm[item]) and int(self._trace.item_stream[item]) == self._stream

    __contains__ = resident

    def items(self) -> list[int]:
        """The resident items, in write order (O(items of the stream): not for hot paths)."""
        if self._items is None:
            self._items = np.flatnonzero(self._trace.item_stream == self._stream).tolist()
        in_wm = self._in_wm
        return [i for i in self._items if in_wm[i]]

    def __iter__(self) -> Iterator[int]:
        return iter(self.items())

    def __len__(self) -> int:
        return len(self.items())


@dataclass
class PolicyContext:
    """What a policy is told when a stream starts."""

    trace: Trace
    stream: int
    budget: int
    demand_fetch: bool
    rng: np.random.Generator
    memory: WorkingMemory  # read-only view of this stream's working memory


class Policy:
    """Base class for placement policies.  Subclasses override what they need."""

    name: str = "policy"
    #: Tokens the policy itself keeps in working memory beyond resident items (e.g. a summary).
    extra_tokens: int = 0
    #: Whether the policy can bring items into working memory outside writes, pins and demand
    #: fetch; if so, the oracle's bounds do not apply to it.
    outside_oracle_class: bool = False
    #: Whether ``grow`` keeps the policy's state valid on a trace that grows after ``reset``
    #: (the live manager, ``memlens.live``); a policy without it is replayed from its record
    #: there instead, which is exact but costs time in the session's length.
    grows: bool = False
    #: Whether each stream's replay depends on that stream alone, so that a trace split by
    #: stream (``shards=N``, ``memlens.runs.sharded``) replays to the same numbers.  A policy
    #: that prepares something from every stream at once (TF-IDF weights over the whole
    #: trace's texts) sets it False, and ``shards`` refuses it.
    stream_local: bool = True

    def __init_subclass__(cls, **kwargs) -> None:
        super().__init_subclass__(**kwargs)
        if "fast_kernel" in cls.__dict__:
            raise TypeError(
                f"{cls.__name__}: the fast_kernel attribute is gone; decorate the class with "
                "@memlens.policy.compiled_kernel(name) instead (it is not inherited)"
            )

    def kernel_supported(self) -> bool:
        """Whether this instance's configuration is one its registered compiled kernel
        reproduces (a policy with a kernel overrides this for settings it leaves to the
        reference engine, e.g. a stochastic variant)."""
        return True

    def reset(self, ctx: PolicyContext) -> None:
        self.ctx = ctx

    def admit(self, item: int, now: int, reason: int) -> bool:
        """Decide only: may ``item`` enter working memory?  (The simulator calls ``insert``.)"""
        return True

    def insert(self, item: int, now: int) -> None:
        raise NotImplementedError

    def touch(self, item: int, now: int) -> None:
        pass

    def victims(self, excess: int, now: int) -> list[int]:
        raise NotImplementedError

    def observe(self, request: int, now: int) -> None:
        pass

    def pin(self, item: int) -> None:
        pass

    def unpin(self, item: int) -> None:
        pass

    def annotate(self, item: int, value: float | None, note: str | None, now: int) -> None:
        pass

    def grow(self, columns) -> None:
        """Live use (``grows = True``): the trace grew; catch up with ``columns``' lists."""

    def share_trace_state(self, other: Policy) -> None:
        """Live use: reuse ``other``'s per-trace state (module docstring); by default there is
        none to share."""

    def restore(self, replayed: ReplayedStream) -> None:
        """Live use: take the state a replay left (module docstring).  A policy without it is
        replayed in Python when its record is reopened (:func:`restores`)."""
        raise NotImplementedError


def restores(policy: Policy) -> bool:
    """Whether ``policy`` can take its state from a compiled kernel's replay (``restore``)."""
    return getattr(type(policy), "restore", None) is not Policy.restore and (
        kernel_of(policy) is not None
    )


def admits_everything(policy: Policy) -> bool:
    """Whether ``policy.admit`` is the base class's (always yes), so the call can be skipped."""
    return getattr(policy.admit, "__func__", None) is Policy.admit


class OrderedPolicy(Policy):
    """A policy whose eviction order is a queue (oldest first): FIFO, LRU and friends.

    Pinned items keep their place in the queue and are skipped when choosing victims.  Its
    state is only the queue of items it was given, so it grows with a live trace for free.
    """

    grows = True

    def reset(self, ctx: PolicyContext) -> None:
        super().reset(ctx)
        self._order: OrderedDict[int, None] = OrderedDict()
        self._pinned = ctx.memory.pinned

    def insert(self, item: int, now: int) -> None:
        self._order[item] = None

    def victims(self, excess: int, now: int) -> list[int]:
        order = self._order
        pinned = self._pinned
        if pinned:
            for item in order:
                if item not in pinned:
                    del order[item]
                    return [item]
            return []
        if not order:
            return []
        return [order.popitem(last=False)[0]]
