"""A checker every registered policy must pass (in the spirit of Gymnasium's env checker).

``check_policy(factory)`` replays random traces (all event kinds, several streams, pins that
may exceed the budget) at several budgets, with and without demand fetch, and checks what the
contract promises regardless of a policy's strategy:

* the simulator accepts every decision (no pinned or absent victim, no empty victim list while
  something evictable is over budget) — it raises :class:`PolicyError` otherwise;
* working memory is within budget at every request unless pins alone exceed it;
* pinned items are resident at every request while pinned;
* hits never exceed needs; evictions equal the WM->STC moves in the log;
* the same seed gives identical results, and ``reset`` really forgets: replaying trace B after
  trace A on one instance equals a fresh instance on B;
* a policy that declares a fast kernel gives exactly the reference result through it.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from memlens.policy import Policy
from memlens.simulator import MOVE_EVICT, SimResult, simulate
from memlens.trace import ITEM_TYPES, PIN, REQUEST, UNPIN, Trace
from memlens.trace_io import trace_from_events

RESULT_FIELDS = (
    "need_hit",
    "context_tokens",
    "pinned_tokens",
    "evictions",
    "false_evictions",
    "move_event",
    "move_item",
    "move_kind",
)


class CheckFailed(AssertionError):
    pass


def random_events(rng: np.random.Generator, n_events: int = 120, n_streams: int = 2) -> list[dict]:
    """A random valid trace exercising every event kind."""
    events: list[dict] = []
    written: list[list[str]] = [[] for _ in range(n_streams)]
    pinned: list[set[str]] = [set() for _ in range(n_streams)]
    words = ["error", "final", "answer", "flight", "refund", "42", "ID-7", "Alice", "maybe"]
    for k in range(n_events):
        s = int(rng.integers(n_streams))
        name = f"s{s}"
        t = float(k)
        roll = rng.random()
        have = written[s]
        if not have or roll < 0.45:
            ident = f"{name}-w{k}"
            have.append(ident)
            text = " ".join(rng.choice(words, size=int(rng.integers(1, 5))).tolist())
            events.append(
                {
                    "event": "write",
                    "id": ident,
                    "stream": name,
                    "t": t,
                    "tokens": int(rng.integers(1, 40)),
                    "type": ITEM_TYPES[int(rng.integers(4))],
                    "cost": float(rng.choice([0.0, 0.001, 0.5])),
                    "text": text,
                }
            )
        elif roll < 0.85:
            n = int(rng.integers(0, min(4, len(have)) + 1))
            needs = rng.choice(have, size=n).tolist() if n else []
            events.append(
                {
                    "event": "request",
                    "id": f"{name}-r{k}",
                    "stream": name,
                    "t": t,
                    "needs": needs,
                    "text": " ".join(rng.choice(words, size=2).tolist()),
                }
            )
        elif roll < 0.92:
            target = have[int(rng.integers(len(have)))]
            kind = "unpin" if target in pinned[s] else "pin"
            (pinned[s].discard if kind == "unpin" else pinned[s].add)(target)
            events.append({"event": kind, "target": target, "t": t})
        else:
            target = have[int(rng.integers(len(have)))]
            events.append(
                {
                    "event": "annotate",
                    "target": target,
                    "t": t,
                    "value": float(rng.random()),
                    "note": "checked",
                }
            )
    return events


def _same(a: SimResult, b: SimResult) -> bool:
    return all(np.array_equal(getattr(a, f), getattr(b, f)) for f in RESULT_FIELDS)


def _check_invariants(trace: Trace, res: SimResult, budget: int, label: str) -> None:
    over = (res.context_tokens > budget) & (res.pinned_tokens <= budget)
    if over.any():
        r = int(np.flatnonzero(over)[0])
        raise CheckFailed(f"{label}: {res.context_tokens[r]} tokens in WM at request {r}")
    if int((res.move_kind == MOVE_EVICT).sum()) != int(res.evictions.sum()):
        raise CheckFailed(f"{label}: eviction count disagrees with the move log")
    # pinned items must be resident at every request while pinned
    resident: set[int] = set()
    pinned: set[int] = set()
    moves = iter(zip(res.move_event.tolist(), res.move_item.tolist(), res.move_kind.tolist()))
    pending = next(moves, None)
    for e in range(trace.n_events):
        kind = int(trace.ev_kind[e])
        if kind == REQUEST:
            missing = pinned - resident
            if missing:
                raise CheckFailed(f"{label}: pinned item {min(missing)} absent at event {e}")
        while pending is not None and pending[0] == e:
            _, item, mk = pending
            (resident.discard if mk in (1, MOVE_EVICT) else resident.add)(item)
            pending = next(moves, None)
        if kind == PIN:
            pinned.add(int(trace.ev_ref[e]))
        elif kind == UNPIN:
            pinned.discard(int(trace.ev_ref[e]))


def check_policy(
    factory: Callable[[], Policy],
    seeds: tuple[int, ...] = (0, 1, 2),
    budgets: tuple[int, ...] = (1, 25, 60, 400),
) -> None:
    """Raise :class:`CheckFailed` (or the simulator's ``PolicyError``) if the policy misbehaves."""
    for seed in seeds:
        rng = np.random.default_rng(seed)
        trace = trace_from_events(random_events(rng), source=f"<random-{seed}>")
        other = trace_from_events(random_events(rng, n_events=60), source=f"<other-{seed}>")
        for budget in budgets:
            for demand_fetch in (False, True):
                label = f"{factory().name} seed={seed} budget={budget} demand_fetch={demand_fetch}"
                kw = dict(budget=budget, demand_fetch=demand_fetch, seed=seed, engine="reference")
                res = simulate(trace, factory(), **kw)
                if (res.need_hit > 1).any():
                    raise CheckFailed(f"{label}: need_hit is not 0/1")
                _check_invariants(trace, res, budget, label)
                if not _same(res, simulate(trace, factory(), **kw)):
                    raise CheckFailed(f"{label}: two runs with the same seed differ")
                reused = factory()
                simulate(other, reused, **kw)
                if not _same(res, simulate(trace, reused, **kw)):
                    raise CheckFailed(f"{label}: reset() does not forget the previous trace")
                policy = factory()
                if policy.fast_kernel is not None:
                    fast = simulate(trace, policy, **{**kw, "engine": "fast"})
                    if not _same(res, fast):
                        raise CheckFailed(f"{label}: fast kernel differs from the reference")
