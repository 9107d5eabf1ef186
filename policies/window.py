"""Sliding window: keep the most recent writes that fit (FIFO eviction).

The baseline every agent framework ships: the context is the tail of the conversation.  Being
needed does not keep an item; with demand fetch, a re-admitted item counts as new.
"""

from __future__ import annotations

from memlens.policy import OrderedPolicy, compiled_kernel


@compiled_kernel("memlens.kernels.queues:replay_fifo")
class SlidingWindow(OrderedPolicy):
    name = "window"
