"""A checker every registered policy must pass (modelled on Gymnasium's env checker).

``check_policy(factory)`` replays random traces (all event kinds, several streams, pins that
may exceed the budget; ``memlens.testing.random_events``) at several budgets, with and without
demand fetch, and runs the named checks in :data:`CHECKS` on each case.  Each check is a small
function whose docstring says what the contract promises; a failure raises
:class:`CheckFailed` saying which check, the case, what was seen and what to fix.  They hold
whatever a policy's strategy:

* the simulator accepts every decision (no pinned or absent victim, no empty victim list while
  something evictable is over budget);
* working memory is within budget at every request unless pins alone exceed it;
* pinned items are resident at every request while pinned;
* hits are 0/1 and evictions equal the WM->STC moves in the log;
* the same seed gives identical results, and ``reset`` really forgets: replaying trace B after
  trace A on one instance equals a fresh instance on B;
* ``admit`` only decides: if the simulator declines an item ``admit`` accepted, the policy
  never offers it as a victim;
* a registered compiled kernel gives exactly the reference result, event for event.

Separately, :func:`check_budget_monotone` replays one of the bundled traces at budgets B and
2B: the hit rate at 2B must be at least the rate at B, unless the policy names its anomaly
(``budget_anomaly()``) and its docstring explains it.

Besides the version 1 traces, one trace per ``alternative_seeds`` has needs with alternatives
(trace format 1.1, :func:`with_alternatives`), so every check also holds there.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import dataclass
from functools import cached_property

import numpy as np

from memlens.policy import Policy, PolicyContext, PolicyError, kernel_of
from memlens.simulator import MoveKind, SimResult, simulate
from memlens.testing import random_events, same_result, with_alternatives
from memlens.trace.io import trace_from_events
from memlens.trace.model import PIN, REQUEST, UNPIN, Trace


class CheckFailed(AssertionError):
    """A policy failed one of the checks; the message names it and says what to fix."""


@dataclass
class Case:
    """One replay setting: a policy factory, a trace (and another one), budget, demand fetch."""

    factory: Callable[[], Policy]
    trace: Trace
    other: Trace
    budget: int
    demand_fetch: bool
    seed: int

    @property
    def kw(self) -> dict:
        return dict(budget=self.budget, demand_fetch=self.demand_fetch, seed=self.seed,
                    engine="reference", progress=False)  # fmt: skip

    @property
    def label(self) -> str:
        return (f"{self.factory().name} on {self.trace.source} at budget={self.budget}, "
                f"demand_fetch={self.demand_fetch}")  # fmt: skip

    def fail(self, check: Callable, seen: str, fix: str) -> CheckFailed:
        return CheckFailed(f"{check.__name__} failed for {self.label}: {seen}.  Fix: {fix}")

    @cached_property
    def result(self) -> SimResult:
        return self.replay(self.factory())

    def replay(self, policy: Policy, trace: Trace | None = None, **kw) -> SimResult:
        return simulate(self.trace if trace is None else trace, policy, **{**self.kw, **kw})


# ------------------------------------------------------------------ checks
def check_decisions_accepted(case: Case) -> None:
    """The simulator accepts every decision: ``victims`` returns resident, unpinned items of the
    stream, and something whenever working memory is over budget with an unpinned item in it."""
    try:
        case.result  # noqa: B018 (the replay raises PolicyError on a broken decision)
    except PolicyError as err:
        raise case.fail(check_decisions_accepted, str(err),
                        "victims() may only return items that are resident and not pinned "
                        "(ctx.memory.resident / ctx.memory.is_pinned tell), and must return at "
                        "least one item while an unpinned one is resident") from err  # fmt: skip


def check_outcome_shape(case: Case) -> None:
    """Hits are 0/1 per needed reference and the eviction counts match the move log."""
    res = case.result
    if (res.need_hit > 1).any():
        raise case.fail(check_outcome_shape, "need_hit holds values other than 0/1",
                        "this is a simulator bug, not the policy's; report it")  # fmt: skip
    logged = int((res.move_kind == MoveKind.EVICT).sum())
    if logged != int(res.evictions.sum()):
        raise case.fail(check_outcome_shape,
                        f"{int(res.evictions.sum())} evictions counted, {logged} in the move log",
                        "this is a simulator bug, not the policy's; report it")  # fmt: skip


def check_budget_respected(case: Case) -> None:
    """Working memory (items + the policy's ``extra_tokens``) is within budget at every request
    unless pinned items alone exceed it."""
    res = case.result
    over = (res.context_tokens > case.budget) & (res.pinned_tokens <= case.budget)
    if over.any():
        r = int(np.flatnonzero(over)[0])
        raise case.fail(check_budget_respected,
                        f"{res.context_tokens[r]} tokens in working memory at request {r}",
                        "extra_tokens must shrink when pins leave less of the budget (the "
                        "simulator only evicts items, never the policy's own tokens)")  # fmt: skip


def check_pins_resident(case: Case) -> None:
    """Every pinned item is in working memory at every request while it is pinned."""
    trace, res = case.trace, case.result
    resident: set[int] = set()
    pinned: set[int] = set()
    leaves = (MoveKind.BYPASS, MoveKind.EVICT)
    moves = iter(zip(res.move_event.tolist(), res.move_item.tolist(), res.move_kind.tolist()))
    pending = next(moves, None)
    for e, kind, x in zip(range(trace.n_events), trace.ev_kind.tolist(), trace.ev_ref.tolist()):
        if kind == REQUEST and pinned - resident:
            raise case.fail(check_pins_resident,
                            f"pinned item {min(pinned - resident)} absent at event {e}",
                            "never return a pinned item from victims()")  # fmt: skip
        while pending is not None and pending[0] == e:
            _, item, mk = pending
            (resident.discard if mk in leaves else resident.add)(item)
            pending = next(moves, None)
        if kind == PIN:
            pinned.add(x)
        elif kind == UNPIN:
            pinned.discard(x)


def check_same_seed_same_result(case: Case) -> None:
    """Two fresh instances replaying the same trace with the same seed agree exactly."""
    differs = same_result(case.result, case.replay(case.factory()))
    if differs:
        raise case.fail(check_same_seed_same_result, f"two runs with the same seed differ in "
                        f"{differs}", "draw randomness only from ctx.rng (seeded per stream), "
                        "and do not iterate over sets of objects whose order can vary")  # fmt: skip


def check_reset_forgets(case: Case) -> None:
    """``reset`` forgets: replaying the trace after another one on the same instance equals a
    fresh instance (item indices of different traces collide, so leaked state shows)."""
    reused = case.factory()
    case.replay(reused, case.other)
    differs = same_result(case.result, case.replay(reused))
    if differs:
        raise case.fail(check_reset_forgets, f"reset() does not forget the previous trace "
                        f"({differs} differs from a fresh instance)", "create every per-stream "
                        "container in reset(), not in __init__ or at class level")  # fmt: skip


class _Declines(Policy):
    """Forwards everything to ``inner`` but declines every other item ``inner`` admits."""

    def __init__(self, inner: Policy) -> None:
        self.inner, self.name, self.asked = inner, inner.name, 0

    @property
    def extra_tokens(self) -> int:  # type: ignore[override]
        return self.inner.extra_tokens

    def reset(self, ctx: PolicyContext) -> None:
        super().reset(ctx)
        self.inner.reset(ctx)

    def admit(self, item: int, now: int, reason: int) -> bool:
        self.asked += 1
        return self.inner.admit(item, now, reason) and self.asked % 2 == 0

    def insert(self, item: int, now: int) -> None:
        self.inner.insert(item, now)

    def touch(self, item: int, now: int) -> None:
        self.inner.touch(item, now)

    def victims(self, excess: int, now: int) -> list[int]:
        return self.inner.victims(excess, now)

    def observe(self, request: int, now: int) -> None:
        self.inner.observe(request, now)

    def pin(self, item: int) -> None:
        self.inner.pin(item)

    def unpin(self, item: int) -> None:
        self.inner.unpin(item)

    def annotate(self, item: int, value: float | None, note: str | None, now: int) -> None:
        self.inner.annotate(item, value, note, now)


def check_admit_only_decides(case: Case) -> None:
    """``admit`` only decides; the item enters the policy's order in ``insert``.  So when the
    simulator declines an item ``admit`` accepted, the policy never offers it as a victim."""
    try:
        case.replay(_Declines(case.factory()))
    except PolicyError as err:
        raise case.fail(check_admit_only_decides, f"with some admitted items declined anyway, "
                        f"{err}", "admit() must not record the item: the simulator calls "
                        "insert() after admit() returns True; move the bookkeeping there") from err  # fmt: skip


def check_compiled_kernel(case: Case) -> None:
    """A compiled kernel registered for the policy's class replays it exactly (every field of
    the result, the whole move log included)."""
    policy = case.factory()
    kernel = kernel_of(policy)
    if kernel is None:
        return
    differs = same_result(case.result, case.replay(policy, engine="fast"))
    if differs:
        raise case.fail(check_compiled_kernel, f"the {kernel!r} kernel differs from the reference "
                        f"engine in {differs}", f"remove @compiled_kernel({kernel!r}) from "
                        f"{type(policy).__name__}, or make its methods match the kernel's "
                        "queue")  # fmt: skip


CHECKS = (
    check_decisions_accepted,
    check_outcome_shape,
    check_budget_respected,
    check_pins_resident,
    check_same_seed_same_result,
    check_reset_forgets,
    check_admit_only_decides,
    check_compiled_kernel,
)


def check_policy(
    factory: Callable[[], Policy],
    seeds: tuple[int, ...] = (0, 1, 2),
    budgets: tuple[int, ...] = (1, 25, 60, 400),
    alternative_seeds: tuple[int, ...] = (0,),
) -> None:
    """Run every check in :data:`CHECKS`; raise :class:`CheckFailed` at the first failure."""
    runs = [(seed, False) for seed in seeds] + [(seed, True) for seed in alternative_seeds]
    for seed, alternatives in runs:
        rng = np.random.default_rng(seed)
        events = random_events(rng)
        if alternatives:  # the same kind of workload, with alternatives in its needs
            events = with_alternatives(events, rng)
        name = f"<random-{seed}{'-alternatives' if alternatives else ''}>"
        trace = trace_from_events(events, source=name)
        other = trace_from_events(random_events(rng, n_events=60), source=f"<other-{seed}>")
        for budget in budgets:
            for demand_fetch in (False, True):
                case = Case(factory, trace, other, budget, demand_fetch, seed)
                for check in CHECKS:
                    check(case)


# ----------------------------------------------------------------- budget monotonicity
#: The budgets :func:`check_budget_monotone` doubles through by default.
MONOTONE_BUDGETS = (128, 256, 512, 1024, 2048, 4096)


def budget_anomaly(policy: Policy) -> str | None:
    """The named budget anomaly ``policy`` declares for its configuration (its
    ``budget_anomaly()`` method; None: it declares none).  The name must appear in the
    class's docstring, which says why more budget may lose hits (like Belady's anomaly for
    FIFO)."""
    name = getattr(policy, "budget_anomaly", lambda: None)()
    if name is not None and name not in (type(policy).__doc__ or "") + _module_doc(policy):
        raise CheckFailed(f"{type(policy).__name__} declares the budget anomaly {name!r}, "
                          "but neither its class nor its module docstring names it: say why "
                          "more budget may lose hits there")  # fmt: skip
    return name


def _module_doc(policy: Policy) -> str:
    module = sys.modules.get(type(policy).__module__)
    return (module.__doc__ or "") if module is not None else ""


def budget_violations(factory: Callable[[], Policy], trace: Trace,
                      budgets: tuple[int, ...] = MONOTONE_BUDGETS,
                      demand_fetch: bool = False) -> list[tuple[int, float, float]]:  # fmt: skip
    """``(B, hit rate at B, hit rate at 2B)`` for every ``B`` in ``budgets`` whose double holds
    fewer hits (the overall hit rate: hits over needed references)."""
    grid = sorted({*budgets, *(2 * b for b in budgets)})
    rate = {}
    for b in grid:
        r = simulate(trace, factory(), b, demand_fetch=demand_fetch, seed=0, engine="auto",
                     progress=False)  # fmt: skip
        rate[b] = float(r.need_hit.mean()) if len(r.need_hit) else 1.0
    return [(b, rate[b], rate[2 * b]) for b in sorted(budgets) if rate[2 * b] < rate[b]]


def check_budget_monotone(factory: Callable[[], Policy], trace: Trace,
                          budgets: tuple[int, ...] = MONOTONE_BUDGETS,
                          demand_fetch: bool = False) -> str | None:  # fmt: skip
    """Hit rate at budget 2B is at least the rate at B for every B in ``budgets`` on ``trace``
    (one of the bundled traces), unless the policy names its anomaly (:func:`budget_anomaly`);
    returns that name (None when it names none and the check held)."""
    anomaly = budget_anomaly(factory())
    found = budget_violations(factory, trace, budgets, demand_fetch)
    if found and anomaly is None:
        b, at_b, at_2b = found[0]
        raise CheckFailed(f"check_budget_monotone: {type(factory()).__name__} on "
                          f"{trace.source}: hit rate {at_b:.3f} at budget {b} but {at_2b:.3f} at "
                          f"{2 * b} ({len(found)} such budget(s)); fix the policy, or name the "
                          "anomaly in its budget_anomaly() and explain it in its "
                          "docstring")  # fmt: skip
    return anomaly
