"""Least recently used: evict the item least recently written or needed.

A request's hits are touched in the order its ``needs`` lists them, so ties in "recency"
inside one request are broken by that order.
"""

from __future__ import annotations

from memlens.policy import OrderedPolicy, compiled_kernel


@compiled_kernel("memlens.kernels.queues:replay_lru")
class LRU(OrderedPolicy):
    name = "lru"

    def touch(self, item: int, now: int) -> None:
        self._order.move_to_end(item)
