"""Shared machinery of the score-scanning baselines (MemoryBank, MemoryOS heat, Generative Agents).

Their published scores mix terms that move at different speeds (a recency decay shared by all
items plus per-item constants, or a similarity to the latest request), so the eviction order
changes between events in ways no fixed-key heap can follow.  They are also what the systems
themselves do: rank every memory when memory must be freed.  So these policies keep the
resident set and score it when ``victims`` is called, the cost growing with the items held; the
rule scorer (``policies/rule.py``) is the one built to avoid that.

Victims are the lowest scores, ties by recency (least recently written or used first), then by
item index; several are returned at once when one does not cover the excess.
"""

from __future__ import annotations

from memlens.policy import Policy, PolicyContext


class ScanPolicy(Policy):
    """Keeps the resident, unpinned items; subclasses supply ``scores(items, t)``."""

    def reset(self, ctx: PolicyContext) -> None:
        super().reset(ctx)
        trace = ctx.trace
        if getattr(self, "_scan_trace", None) is not trace:
            self._scan_trace = trace
            self._t = trace.ev_t.tolist()
            self._tok = trace.item_tokens.tolist()
            self._needs_ptr = trace.needs_ptr.tolist()
            self._needs = trace.needs.tolist()
            self.prepare(trace)
        self._res: dict[int, None] = {}  # resident and unpinned
        self._pinned: set[int] = set()
        self._last: dict[int, int] = {}  # event of the last write/use, for ties

    def prepare(self, trace) -> None:
        """Per-trace precomputation (once per trace, shared by every stream and budget)."""

    def scores(self, items: list[int], t: float) -> list[float]:
        raise NotImplementedError

    def rng_order(self, ranked: list[tuple], t: float) -> list[tuple]:
        """Hook for stochastic variants: reorder the ranked candidates (default: as ranked)."""
        return ranked

    # ------------------------------------------------------------- interface
    def insert(self, item: int, now: int) -> None:
        self._res[item] = None
        self._last[item] = now

    def victims(self, excess: int, now: int) -> list[int]:
        items = list(self._res)
        if not items:
            return []
        t = self._t[now]
        last = self._last
        ranked = sorted(zip(self.scores(items, t), [last[i] for i in items], items))
        ranked = self.rng_order(ranked, t)
        out: list[int] = []
        freed = 0
        tok = self._tok
        for entry in ranked:
            i = entry[2]
            out.append(i)
            freed += tok[i]
            if freed >= excess:
                break
        for i in out:
            del self._res[i]
        return out

    def observe(self, request: int, now: int) -> None:
        last = self._last
        needs = self._needs
        for j in range(self._needs_ptr[request], self._needs_ptr[request + 1]):
            i = needs[j]
            last[i] = now
            self.used(i, now)

    def used(self, item: int, now: int) -> None:
        """A request needed ``item`` (resident or not)."""

    def pin(self, item: int) -> None:
        self._pinned.add(item)
        self._res.pop(item, None)

    def unpin(self, item: int) -> None:
        if item in self._pinned:
            self._pinned.discard(item)
            self._res[item] = None
