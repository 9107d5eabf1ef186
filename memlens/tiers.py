"""The lower tiers: what happens to items after they leave working memory.

Working memory (WM) decides hits; without request-time retrieval nothing below it changes what
the agent sees, so the short-term cache (STC) and the long-term store (LTS) are replayed from
the simulator's WM move log after the fact.  That keeps the hot replay loop free of tier
bookkeeping and lets the compiled kernels serve every policy's tier accounting.

* STC: bounded in tokens (``short_term_tokens``), least recently entered leaves first, optional
  TTL in trace seconds; what it evicts moves to the LTS.
* LTS: unbounded; holds everything that left WM and the STC.

Every move is recorded as (event, item, from tier, to tier).
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass

import numpy as np

from memlens.simulator import MOVE_ADMIT, MOVE_BYPASS, MOVE_EVICT, SimResult
from memlens.trace import Trace

NOWHERE, WM, STC, LTS = -1, 0, 1, 2
TIER_NAMES = {NOWHERE: "new", WM: "wm", STC: "stc", LTS: "lts"}


@dataclass
class TierLog:
    event: np.ndarray  # int64
    item: np.ndarray  # int32
    src: np.ndarray  # int8 tier
    dst: np.ndarray  # int8 tier
    final_tier: np.ndarray  # int8 per item

    def counts(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for a, b in zip(self.src.tolist(), self.dst.tolist()):
            key = f"{TIER_NAMES[a]}->{TIER_NAMES[b]}"
            out[key] = out.get(key, 0) + 1
        return dict(sorted(out.items()))


def replay_tiers(
    trace: Trace, result: SimResult, short_term_tokens: int, ttl_s: float | None = None
) -> TierLog:
    """Replay the WM move log through the STC and LTS."""
    if short_term_tokens < 0:
        raise ValueError("short_term_tokens must be >= 0")
    tokens = trace.item_tokens.tolist()
    ev_t = trace.ev_t
    item_stream = trace.item_stream.tolist()
    where = [NOWHERE] * trace.n_items
    stc: list[OrderedDict[int, float]] = [OrderedDict() for _ in range(trace.n_streams)]
    stc_used = [0] * trace.n_streams
    log_e: list[int] = []
    log_i: list[int] = []
    log_s: list[int] = []
    log_d: list[int] = []

    def move(e: int, i: int, dst: int) -> None:
        log_e.append(e)
        log_i.append(i)
        log_s.append(where[i])
        log_d.append(dst)
        where[i] = dst

    def to_stc(e: int, i: int, now: float) -> None:
        s = item_stream[i]
        if tokens[i] > short_term_tokens:
            move(e, i, LTS)
            return
        move(e, i, STC)
        stc[s][i] = now
        stc_used[s] += tokens[i]
        q = stc[s]
        while stc_used[s] > short_term_tokens:
            old, _ = q.popitem(last=False)
            stc_used[s] -= tokens[old]
            move(e, old, LTS)

    def expire(e: int, s: int, now: float) -> None:
        q = stc[s]
        while q:
            old, since = next(iter(q.items()))
            if now - since <= ttl_s:
                break
            del q[old]
            stc_used[s] -= tokens[old]
            move(e, old, LTS)

    for e, i, k in zip(
        result.move_event.tolist(), result.move_item.tolist(), result.move_kind.tolist()
    ):
        now = float(ev_t[e])
        if ttl_s is not None:
            expire(e, item_stream[i], now)
        if k == MOVE_ADMIT:
            move(e, i, WM)
        elif k in (MOVE_BYPASS, MOVE_EVICT):
            to_stc(e, i, now)
        else:  # fetch or pin: back into WM from wherever it is
            if where[i] == STC:
                s = item_stream[i]
                del stc[s][i]
                stc_used[s] -= tokens[i]
            move(e, i, WM)
    return TierLog(
        event=np.asarray(log_e, dtype=np.int64),
        item=np.asarray(log_i, dtype=np.int32),
        src=np.asarray(log_s, dtype=np.int8),
        dst=np.asarray(log_d, dtype=np.int8),
        final_tier=np.asarray(where, dtype=np.int8),
    )
