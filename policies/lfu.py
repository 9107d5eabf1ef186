"""Least frequently used: evict the resident item needed least often, ties least recently used.

The classic frequency baseline of cache research.  Counts are in-cache counts, as in
cachetools' ``LFUCache``: an item starts at 1 when it enters working memory, gains 1 each time
a request needs it while resident, and forgets its count when evicted (a demand-fetched item
starts again at 1).  The order is a heap keyed by (count, last use, item) with lazy
invalidation, so each event costs O(log n).
"""

from __future__ import annotations

from heapq import heapify, heappop, heappush

from memlens.policy import Policy, PolicyContext, compiled_kernel


@compiled_kernel("memlens.kernels.lfu:replay")
class LFU(Policy):
    name = "lfu"
    grows = True  # live use: ``grow`` extends the token list (memlens.live)

    def grow(self, columns) -> None:
        """Live use: the new items' tokens (the rest of the state is per resident item)."""
        self._tok.extend(columns.item_tokens[len(self._tok) :])

    def reset(self, ctx: PolicyContext) -> None:
        super().reset(ctx)
        self._tok = ctx.trace.item_tokens.tolist()
        self._count: dict[int, int] = {}  # resident items (pinned included)
        self._key: dict[int, tuple] = {}  # current heap key of resident unpinned items
        self._last: dict[int, int] = {}  # event of the last insert/use
        self._pinned = ctx.memory.pinned  # the simulator's pins (read-only)
        self._heap: list[tuple] = []

    def _push(self, item: int) -> None:
        key = (self._count[item], self._last[item], item)
        self._key[item] = key
        heappush(self._heap, key)
        if len(self._heap) > 2 * len(self._key) + 1024:  # drop stale entries
            self._heap = list(self._key.values())
            heapify(self._heap)

    def insert(self, item: int, now: int) -> None:
        self._count[item] = 1
        self._last[item] = now
        if item not in self._pinned:
            self._push(item)

    def touch(self, item: int, now: int) -> None:
        self._count[item] += 1
        self._last[item] = now
        if item not in self._pinned:
            self._push(item)

    def victims(self, excess: int, now: int) -> list[int]:
        heap, key, tok = self._heap, self._key, self._tok
        out: list[int] = []
        freed = 0
        while freed < excess and heap:
            entry = heappop(heap)
            i = entry[2]
            if key.get(i) != entry:
                continue  # stale
            del key[i]
            del self._count[i]
            del self._last[i]
            out.append(i)
            freed += tok[i]
        return out

    def pin(self, item: int) -> None:
        self._key.pop(item, None)  # its heap entry is now stale

    def unpin(self, item: int) -> None:
        self._push(item)  # keeps the count and recency it had
