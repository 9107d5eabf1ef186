"""Shared machinery of the score-scanning baselines (MemoryBank, MemoryOS heat, Generative Agents).

Their published scores mix terms that move at different speeds (a recency decay shared by all
items plus per-item constants, or a similarity to the latest request), so the eviction order
changes between events in ways no fixed-key heap can follow.  They are also what the systems
themselves do: rank every memory when memory must be freed.  So these policies keep the
resident set and score it when ``victims`` is called, the cost growing with the items held; the
rule scorer (``policies/rule.py``) is the one built to avoid that.

Victims are the lowest scores, ties by recency (least recently written or used first); several
are returned at once when one does not cover the excess.  The resident set is kept in recency
order (an ``OrderedDict``, moved to the end on use), so the first minimum of the score list is
also the least recent among equals, found by C-level ``min`` and ``index``.
"""

from __future__ import annotations

from collections import OrderedDict

from memlens.policy import Policy, PolicyContext


class ScanPolicy(Policy):
    """Keeps the resident, unpinned items; subclasses supply ``scores(items, t)``."""

    #: True when ``rng_order`` may reorder the ranking (then the fast single-minimum path is off)
    stochastic_order = False

    def reset(self, ctx: PolicyContext) -> None:
        super().reset(ctx)
        trace = ctx.trace
        if getattr(self, "_scan_trace", None) is not trace:
            self._scan_trace = trace
            self._t = trace.ev_t.tolist()
            self._tok = trace.item_tokens.tolist()
            # every item a need lists is used, alternatives too (trace format 1.1)
            self._needs_ptr = trace.request_items_ptr.tolist()
            self._needs = trace.group_items.tolist()
            self.prepare(trace)
        self._res: OrderedDict[int, None] = OrderedDict()  # resident, unpinned; by recency
        self._last: dict[int, int] = {}  # event of the last write/use (for unpin)

    def prepare(self, trace) -> None:
        """Per-trace precomputation (once per trace, shared by every stream and budget)."""

    def scores(self, items: list[int], t: float) -> list[float]:
        raise NotImplementedError

    def rng_order(self, ranked: list[int], scores: list[float], t: float) -> list[int]:
        """Hook for stochastic variants: reorder the ranked candidates (default: as ranked)."""
        return ranked

    # ------------------------------------------------------------- interface
    def insert(self, item: int, now: int) -> None:
        self._res[item] = None
        self._last[item] = now

    def victims(self, excess: int, now: int) -> list[int]:
        res = self._res
        if not res:
            return []
        items = list(res)
        scores = self.scores(items, self._t[now])
        tok = self._tok
        if not self.stochastic_order:
            best = scores.index(min(scores))  # first minimum = least recent among ties
            i = items[best]
            if tok[i] >= excess:
                del res[i]
                return [i]
        ranked = sorted(range(len(items)), key=scores.__getitem__)  # stable: recency ties
        ranked = self.rng_order(ranked, scores, self._t[now])
        out: list[int] = []
        freed = 0
        for k in ranked:
            i = items[k]
            out.append(i)
            freed += tok[i]
            if freed >= excess:
                break
        for i in out:
            del res[i]
        return out

    def observe(self, request: int, now: int) -> None:
        last, res = self._last, self._res
        needs = self._needs
        for j in range(self._needs_ptr[request], self._needs_ptr[request + 1]):
            i = needs[j]
            last[i] = now
            if i in res:
                res.move_to_end(i)
            self.used(i, now)

    def used(self, item: int, now: int) -> None:
        """A request needed ``item`` (resident or not)."""

    def pin(self, item: int) -> None:
        self._res.pop(item, None)

    def unpin(self, item: int) -> None:
        """Back among the candidates, at the place its last write or use gives it."""
        res, last = self._res, self._last
        res[item] = None
        mine = last[item]
        for other in [o for o in res if o != item and last[o] > mine]:  # rare: O(n) is fine
            res.move_to_end(other)
