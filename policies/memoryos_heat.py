"""MemoryOS heat: evict the coldest memory, heat = visits + interaction length + recency.

Kang, Ji, Zhao, Chen, Pang, Chen and Wang, "Memory OS of AI Agent", 2025 (arXiv:2506.06326).
MemoryOS ranks mid-term memory segments by

    Heat = alpha * N_visit + beta * L_interaction + gamma * R_recency,
    R_recency = exp(-dt / mu)

and evicts the lowest heat when the mid-term store is full.  Mapped onto MemLens items:

* ``N_visit``        requests that needed the item (a retrieval of the segment);
* ``L_interaction``  the item's length, in units of ``length_unit_tokens`` tokens (MemoryOS
                     counts the dialogue pages in a segment; an item is one page of
                     ``tokens`` tokens, so a long tool result counts as several pages);
* ``dt``             hours since the item was last written or needed; ``mu`` = 24 hours.

``alpha = beta = gamma = 1`` and ``mu = 24 h`` are the released code's constants
(``HEAT_ALPHA``, ``HEAT_BETA``, ``HEAT_GAMMA``, ``RECENCY_TAU_HOURS``); the paper gives the
formula without fixing them.  Ties: least recently used first.
"""

from __future__ import annotations

import math

from memlens.policies.scan import ScanPolicy

from memlens.policy import PolicyContext, compiled_kernel


@compiled_kernel("memlens.kernels.memoryos_heat:replay")
class MemoryOSHeat(ScanPolicy):
    name = "memoryos_heat"

    def __init__(
        self,
        alpha: float = 1.0,
        beta: float = 1.0,
        gamma: float = 1.0,
        recency_tau_hours: float = 24.0,
        length_unit_tokens: int = 1000,
    ) -> None:
        if recency_tau_hours <= 0 or length_unit_tokens <= 0:
            raise ValueError("memoryos_heat: recency_tau_hours and length_unit_tokens > 0")
        self.alpha, self.beta, self.gamma = float(alpha), float(beta), float(gamma)
        self.tau_s = float(recency_tau_hours) * 3600.0
        self.length_unit = float(length_unit_tokens)

    def prepare(self, trace) -> None:
        self._length = (trace.item_tokens / self.length_unit).tolist()

    def reset(self, ctx: PolicyContext) -> None:
        super().reset(ctx)
        self._visits: dict[int, int] = {}
        self._seen: dict[int, float] = {}  # trace time of the last write or visit

    def insert(self, item: int, now: int) -> None:
        super().insert(item, now)
        self._seen[item] = self._t[now]

    def used(self, item: int, now: int) -> None:
        self._visits[item] = self._visits.get(item, 0) + 1
        self._seen[item] = self._t[now]

    def heat(self, item: int, t: float) -> float:
        return (
            self.alpha * self._visits.get(item, 0)
            + self.beta * self._length[item]
            + self.gamma * math.exp(-(t - self._seen[item]) / self.tau_s)
        )

    def scores(self, items: list[int], t: float) -> list[float]:
        a, b, g, tau = self.alpha, self.beta, self.gamma, self.tau_s
        visits, length, seen, exp = self._visits, self._length, self._seen, math.exp
        get = visits.get
        return [a * get(i, 0) + b * length[i] + g * exp((seen[i] - t) / tau) for i in items]
