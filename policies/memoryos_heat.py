"""MemoryOS: a short-term FIFO page queue in front of a mid-term store evicted by heat (paper)
or by access frequency (released code).

Kang, Ji, Zhao, Chen, Pang, Chen and Wang, "Memory OS of AI Agent", 2025 (arXiv:2506.06326);
released code github.com/BAI-LAB/MemoryOS, commit 1d717060350931af33d1d0dc3d4e50a72c125a48,
package ``memoryos-pypi`` (the paper is ``Paper-MemoryOS.pdf`` in the same commit).  Mapped
onto MemLens, one item is one dialogue page (one segment of one page), working memory is the
short-term queue plus the mid-term store, and the token budget replaces the store's capacity:

* **short-term queue** (STM).  Every written item enters a FIFO queue of ``short_term_pages``
  pages; the page the queue pushes out enters mid-term memory (paper sec. 3.3 "STM-MTM
  Update"; ``short_term.py:10-14`` ``deque(maxlen=max_capacity)``, ``updater.py:100-104``
  ``process_short_term_to_mid_term`` pops the oldest while full).  Paper sec. 4.1: 7 pages;
  code ``memoryos.py:35`` ``short_term_capacity=10``.  Queue pages are never counted as
  visits (retrieval searches mid-term sessions only, ``mid_term.py:281``) and are evicted only
  when the mid-term store holds nothing unpinned (then the oldest unpinned queue page goes:
  MemLens's budget is a hard limit, MemoryOS's queue is not).  Items that re-enter working
  memory other than by their write (demand fetch, a pin) enter mid-term memory directly.
* **heat** (paper eq. 4; ``mid_term.py:26-36`` ``compute_segment_heat``):
  ``alpha * N_visit + beta * L_interaction + gamma * exp(-dt / mu)``, ``alpha = beta = gamma =
  1`` (paper sec. 4.1 "equally set to 1"; ``mid_term.py:21-23`` ``HEAT_ALPHA`` etc.).
  ``N_visit``: requests served by the item while in mid-term memory (a retrieval that matched
  the segment, ``mid_term.py:344-351``), forgotten on eviction (the session is deleted).
  ``L_interaction``: the segment's page count, so 1 per item (``mid_term.py:162``
  ``len(processed_details)``); ``length="tokens"`` opts into ``tokens / length_unit_tokens``
  instead (what this class used before, which neither source has).  ``dt``: time since the
  item entered mid-term memory or was last visited (``mid_term.py:167, 347``).  ``mu``: paper
  sec. 3.3 and 4.1 ``1e+7`` seconds; code ``mid_term.py:24`` ``RECENCY_TAU_HOURS = 24`` with
  ``utils.py:228-235`` ``compute_time_decay`` in hours.
* **promotion** to long-term personal memory at heat >= 5 (paper sec. 3.3 "LPM Update", 4.1;
  ``memoryos.py:26`` ``H_PROFILE_UPDATE_THRESHOLD = 5.0``), after which the paper resets
  ``L_interaction`` to zero (sec. 3.3 "the number of pages L_interaction in Eq. 4 is reset to
  zero"); checked when a visit raises the item's heat.  The code also resets ``N_visit`` and the
  visit time (``memoryos.py:211-215``), but under the code's eviction rule heat orders nothing
  (below), so ``variant="code"`` does not track promotion.
* **eviction**.  ``variant="paper"`` (the default: the paper's stated rule, sec. 3.3 "segments
  with the lowest heat are evicted"): lowest heat, ties by least recent visit or entry.
  ``variant="code"``: the released package evicts by least ``access_frequency``
  (``mid_term.py:71-101`` ``evict_lfu``, ``min(self.access_frequency, key=...)``: ties go to
  the first inserted key), the count starting at 0 on entry (``mid_term.py:172``) and +1 per
  visit (``mid_term.py:348-349``); heat there only picks the segment to promote.

Budget monotonicity (``memlens.checker.check_budget_monotone``): both variants' hit rates
grow with the budget on the bundled trace.  The **long-item anomaly** is the named exception
of ``length="tokens"`` without the queue: an item longer than B bypasses working memory at
budget B, but at 2B it is admitted and its length alone (1.5 heat units for 1,500 tokens)
outranks visits and recency, so the few long items crowd out the many short needed ones.  On
agent-small (this class's old default) the 226 items over 1024 tokens take 0.9% of the needs;
at 2048 they are admitted and the hit rate on the other items falls from 0.747 to 0.681
(overall 0.741 at 1024, 0.678 at 2048).
"""

from __future__ import annotations

import math
from collections import OrderedDict

from memlens.policy import Policy, PolicyContext, compiled_kernel
from memlens.trace.model import EventKind

#: Per variant: (recency time constant mu in seconds, short-term queue pages).
VARIANT_DEFAULTS = {"paper": (1.0e7, 7), "code": (24.0 * 3600.0, 10)}
LENGTHS = ("pages", "tokens")


@compiled_kernel("memlens.kernels.memoryos_heat:replay")
class MemoryOSHeat(Policy):
    name = "memoryos_heat"

    def __init__(
        self,
        variant: str = "paper",
        alpha: float = 1.0,
        beta: float = 1.0,
        gamma: float = 1.0,
        recency_tau_hours: float | None = None,
        length: str = "pages",
        length_unit_tokens: int = 1000,
        short_term_pages: int | None = None,
        heat_threshold: float | None = 5.0,
    ) -> None:
        if variant not in VARIANT_DEFAULTS:
            raise ValueError(f"memoryos_heat: variant must be paper or code, not {variant!r}")
        if length not in LENGTHS:
            raise ValueError(f"memoryos_heat: length must be pages or tokens, not {length!r}")
        tau_s, pages = VARIANT_DEFAULTS[variant]
        if recency_tau_hours is not None:
            tau_s = float(recency_tau_hours) * 3600.0
        pages = pages if short_term_pages is None else int(short_term_pages)
        if not tau_s > 0 or length_unit_tokens <= 0 or pages < 0:
            raise ValueError("memoryos_heat: recency_tau_hours and length_unit_tokens > 0, "
                             "short_term_pages >= 0")  # fmt: skip
        self.variant, self.lfu = variant, variant == "code"
        self.alpha, self.beta, self.gamma = float(alpha), float(beta), float(gamma)
        self.tau_s, self.short_term_pages = tau_s, pages
        self.length, self.length_unit = length, float(length_unit_tokens)
        self.threshold = math.inf if heat_threshold is None else float(heat_threshold)

    def budget_anomaly(self) -> str | None:
        """The named exception to budget monotonicity (module docstring), or None."""
        return "long-item anomaly" if self.length == "tokens" else None

    def item_lengths(self, trace) -> list[float]:
        """``L_interaction`` per item at its entry into mid-term memory."""
        if self.length == "tokens":
            return (trace.item_tokens / self.length_unit).tolist()
        return [1.0] * trace.n_items

    def reset(self, ctx: PolicyContext) -> None:
        super().reset(ctx)
        trace = ctx.trace
        self._t, self._kind = trace.ev_t.tolist(), trace.ev_kind.tolist()
        self._length = self.item_lengths(trace)
        self._pinned = ctx.memory.pinned
        self._stm: OrderedDict[int, None] = OrderedDict()  # the short-term queue, oldest first
        self._mtm: dict[int, None] = {}  # resident mid-term items (pinned too)
        self._visits: dict[int, int] = {}
        self._pages: dict[int, float] = {}  # L_interaction
        self._seen: dict[int, float] = {}  # trace time of the entry or last visit
        self._stamp: dict[int, int] = {}  # tie-break: entry order (code), recency (paper)
        self._seq = 0

    def _enter_mid_term(self, item: int, now: int) -> None:
        self._mtm[item] = None
        self._visits[item] = 0
        self._pages[item] = self._length[item]
        self._seen[item] = self._t[now]
        self._stamp[item] = self._seq
        self._seq += 1

    def insert(self, item: int, now: int) -> None:
        if self._kind[now] != EventKind.WRITE:  # fetched or pinned back: straight to mid-term
            self._enter_mid_term(item, now)
            return
        stm = self._stm
        stm[item] = None
        if len(stm) > self.short_term_pages:
            self._enter_mid_term(stm.popitem(last=False)[0], now)

    def touch(self, item: int, now: int) -> None:
        if item not in self._mtm:
            return  # in the short-term queue: always in context, never retrieved
        self._visits[item] += 1
        if self.lfu:
            return
        t = self._t[now]
        self._seen[item] = t
        self._stamp[item] = self._seq
        self._seq += 1
        if self.heat(item, t) >= self.threshold:
            self._pages[item] = 0.0  # promoted to long-term memory: L_interaction reset

    def heat(self, item: int, t: float) -> float:
        """The item's heat at trace time ``t`` (KeyError outside mid-term memory)."""
        return (self.alpha * self._visits[item] + self.beta * self._pages[item]
                + self.gamma * math.exp((self._seen[item] - t) / self.tau_s))  # fmt: skip

    def _mid_term_victim(self, t: float) -> int:
        pinned, stamp = self._pinned, self._stamp
        best, best_key = -1, None
        for i in self._mtm:
            if i in pinned:
                continue
            key = (self._visits[i] if self.lfu else self.heat(i, t), stamp[i])
            if best_key is None or key < best_key:
                best, best_key = i, key
        return best

    def victims(self, excess: int, now: int) -> list[int]:
        v = self._mid_term_victim(self._t[now])
        if v >= 0:
            del self._mtm[v]
            for d in (self._visits, self._pages, self._seen, self._stamp):
                del d[v]
            return [v]
        v = next((i for i in self._stm if i not in self._pinned), -1)
        if v < 0:
            return []
        del self._stm[v]
        return [v]
