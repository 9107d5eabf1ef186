"""The replay simulator: the readable reference semantics of MemLens.

Contract (other tools, the fast kernels and the oracle are checked against it):

* Working memory (WM) holds items whose tokens sum to at most ``budget``.  An item larger than
  the budget is never admitted (unless a pin forces it).  Items evicted from WM move to the
  short-term cache and from there to the long-term store; every WM move is logged here and the
  lower tiers replay that log (``memlens.tiers``).
* A request's hits are its needed ids that are in WM after all earlier events and before the
  request's own updates.  Then the hits are touched in ``needs`` order, the policy observes the
  request, and with ``demand_fetch`` the misses are brought back in ``needs`` order (each one
  subject to the policy's ``admit``).
* A pin forces its target into WM (as the newest item if it was not there) and keeps it there
  until unpinned.  Pinned items count against the budget; when pins alone exceed it, the run
  says so (``pins_over_budget_requests``).
* Streams are independent agents with their own WM and budget; results are summed.
* Request-time retrieval (optional ``hook``, reference engine only): at each request, before
  its hits are decided, the hook brings the lower tiers up to date from the move log and
  assembles the request's retrieved context; hits stay WM-only.  With promotion, the items it
  returns are brought into WM after the request's demand fetch (each one subject to ``admit``,
  logged as ``promote``); such a run can place items outside writes, pins and demand fetch, so
  it is outside the oracle class (``extra["outside_oracle_class"]``).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np

from memlens.policy import ADMIT_FETCH, ADMIT_WRITE, Policy, PolicyContext, PolicyError
from memlens.trace import ANNOTATE, PIN, REQUEST, UNPIN, WRITE, Trace

# Kinds of working-memory moves in the move log.
MOVE_ADMIT = 0  # a write entered WM
MOVE_BYPASS = 1  # a write went straight to the short-term cache (declined or larger than budget)
MOVE_EVICT = 2  # WM -> short-term cache
MOVE_FETCH = 3  # lower tier -> WM after a request missed it (demand fetch)
MOVE_PIN = 4  # lower tier -> WM forced by a pin
MOVE_PROMOTE = 5  # lower tier -> WM because request-time retrieval brought it back
MOVE_NAMES = ("admit", "bypass", "evict", "fetch", "pin", "promote")


@dataclass
class SimResult:
    """Raw outcome of one replay; ``memlens.metrics`` turns it into numbers."""

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
    move_kind: np.ndarray  # int8 per move
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
    hook=None,
) -> SimResult:
    """Replay ``trace`` against ``policy`` at ``budget`` tokens per stream.

    ``engine``: ``reference`` (this module, any policy), ``fast`` (compiled kernel, only for
    policies that declare one) or ``auto`` (fast when available).
    """
    budget = _check_budget(budget)
    if engine not in ("auto", "fast", "reference"):
        raise ValueError(f"engine must be auto, fast or reference, got {engine!r}")
    kernel = getattr(policy, "fast_kernel", None)
    if hook is not None:  # the compiled kernels cannot call back into Python per request
        if engine == "fast":
            raise ValueError("request-time retrieval with promotion needs engine=reference or auto")
        kernel = None
    if engine == "fast" and kernel is None:
        raise ValueError(f"policy {policy.name!r} has no fast kernel; use engine=reference")
    if kernel is not None and engine in ("auto", "fast"):
        from memlens.fastpath import simulate_fast

        return simulate_fast(trace, kernel, policy.name, budget, demand_fetch)
    return _simulate_reference(trace, policy, budget, demand_fetch, seed, progress, hook)


def _simulate_reference(
    trace: Trace, policy: Policy, budget: int, demand_fetch: bool, seed: int, progress,
    hook=None,
) -> SimResult:  # fmt: skip
    from tqdm import tqdm

    n_streams = trace.n_streams
    tokens = trace.item_tokens.tolist()
    kinds = trace.ev_kind.tolist()
    refs = trace.ev_ref.tolist()
    needs_ptr = trace.needs_ptr.tolist()
    needs = trace.needs.tolist()
    n_uses = trace.item_n_uses.tolist()
    uses_seen = [0] * trace.n_items
    n_items = trace.n_items
    item_stream = trace.item_stream.tolist()
    in_wm = bytearray(trace.n_items)
    need_hit = bytearray(trace.n_references)
    context_tokens = [0] * trace.n_requests
    pinned_tokens_at = [0] * trace.n_requests
    evictions = [0] * n_streams
    false_evictions = [0] * n_streams
    mv_event: list[int] = []
    mv_item: list[int] = []
    mv_kind: list[int] = []
    annotations = trace.annotations
    bar = tqdm(
        total=trace.n_events,
        disable=None if progress is None else not progress,
        unit="ev",
        mininterval=0.5,
        leave=False,
    )

    t0 = time.perf_counter()
    for s in range(n_streams):
        policy.reset(
            PolicyContext(
                trace=trace,
                stream=s,
                budget=budget,
                demand_fetch=demand_fetch,
                rng=np.random.default_rng([seed, s]),
            )
        )
        insert, admit, touch, victims = policy.insert, policy.admit, policy.touch, policy.victims
        observe = policy.observe
        used = 0  # tokens of resident items
        pinned: set[int] = set()
        pinned_tok = 0
        n_ev = 0
        n_fev = 0

        def make_room(now: int) -> None:
            nonlocal used, n_ev, n_fev
            while used + policy.extra_tokens > budget and used > pinned_tok:
                chosen = victims(used + policy.extra_tokens - budget, now)
                if not chosen:
                    raise PolicyError(
                        f"{policy.name}: working memory is over budget but victims() chose nothing"
                    )
                for v in chosen:
                    if not (0 <= v < n_items and in_wm[v] and item_stream[v] == s) or v in pinned:
                        what = "pinned" if v in pinned else "not resident"
                        raise PolicyError(f"{policy.name}: victims() returned item {v}, {what}")
                    in_wm[v] = 0
                    used -= tokens[v]
                    n_ev += 1
                    if uses_seen[v] < n_uses[v]:
                        n_fev += 1
                    mv_event.append(now)
                    mv_item.append(v)
                    mv_kind.append(MOVE_EVICT)

        def bring_back(i: int, now: int, move: int) -> None:
            """After a request: a missed need (demand fetch) or a retrieved item (promotion)
            re-enters working memory if it fits the budget and the policy admits it."""
            nonlocal used
            if not in_wm[i] and tokens[i] <= budget and admit(i, now, ADMIT_FETCH):
                in_wm[i] = 1
                used += tokens[i]
                mv_event.append(now)
                mv_item.append(i)
                mv_kind.append(move)
                if used + policy.extra_tokens > budget:
                    make_room(now)

        events = trace.stream_events[s].tolist()
        for e in events:
            k = kinds[e]
            x = refs[e]
            if k == WRITE:
                tok = tokens[x]
                if tok <= budget and admit(x, e, ADMIT_WRITE):
                    in_wm[x] = 1
                    used += tok
                    mv_event.append(e)
                    mv_item.append(x)
                    mv_kind.append(MOVE_ADMIT)
                    if used + policy.extra_tokens > budget:
                        make_room(e)
                else:
                    mv_event.append(e)
                    mv_item.append(x)
                    mv_kind.append(MOVE_BYPASS)
            elif k == REQUEST:
                lo, hi = needs_ptr[x], needs_ptr[x + 1]
                if hook is not None:
                    promote = hook.request(x, e, mv_event, mv_item, mv_kind)
                context_tokens[x] = used + policy.extra_tokens
                pinned_tokens_at[x] = pinned_tok
                for j in range(lo, hi):
                    if in_wm[needs[j]]:
                        need_hit[j] = 1
                for j in range(lo, hi):
                    if need_hit[j]:
                        touch(needs[j], e)
                    uses_seen[needs[j]] += 1
                observe(x, e)
                if demand_fetch:
                    for j in range(lo, hi):
                        bring_back(needs[j], e, MOVE_FETCH)
                if hook is not None:
                    for i in promote:
                        bring_back(i, e, MOVE_PROMOTE)
            elif k == PIN:
                if x not in pinned:
                    if not in_wm[x]:
                        insert(x, e)
                        in_wm[x] = 1
                        used += tokens[x]
                        mv_event.append(e)
                        mv_item.append(x)
                        mv_kind.append(MOVE_PIN)
                    pinned.add(x)
                    pinned_tok += tokens[x]
                    policy.pin(x)
                    if used + policy.extra_tokens > budget:
                        make_room(e)
            elif k == UNPIN:
                if x in pinned:
                    pinned.discard(x)
                    pinned_tok -= tokens[x]
                    policy.unpin(x)
                    if used + policy.extra_tokens > budget:
                        make_room(e)
            elif k == ANNOTATE:
                value, note = annotations[e]
                policy.annotate(x, value, note, e)
        evictions[s] = n_ev
        false_evictions[s] = n_fev
        bar.update(len(events))
    if hook is not None:
        hook.finish(mv_event, mv_item, mv_kind)
    wall = time.perf_counter() - t0
    bar.close()
    # streams were replayed one after another; put the move log back into file order
    mv_event_arr = np.asarray(mv_event, dtype=np.int64)
    order = np.argsort(mv_event_arr, kind="stable")
    return SimResult(
        budget=budget,
        demand_fetch=demand_fetch,
        policy=policy.name,
        engine="reference",
        need_hit=np.frombuffer(bytes(need_hit), dtype=np.uint8).copy(),
        context_tokens=np.asarray(context_tokens, dtype=np.int64),
        pinned_tokens=np.asarray(pinned_tokens_at, dtype=np.int64),
        evictions=np.asarray(evictions, dtype=np.int64),
        false_evictions=np.asarray(false_evictions, dtype=np.int64),
        move_event=mv_event_arr[order],
        move_item=np.asarray(mv_item, dtype=np.int32)[order],
        move_kind=np.asarray(mv_kind, dtype=np.int8)[order],
        wall_s=wall,
        extra={"outside_oracle_class": True} if hook is not None and hook.promote else {},
    )
