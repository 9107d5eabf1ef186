"""MemoryBank: Ebbinghaus forgetting, evict the memory least likely to be retained.

Zhong, Guo, Gao, Ye and Wang, "MemoryBank: Enhancing Large Language Models with Long-Term
Memory", AAAI 2024 (arXiv:2305.10250).  Each memory's retention follows the Ebbinghaus curve

    R = exp(-t / S)

with ``t`` the time since the memory was learned or last recalled and ``S`` its strength:
``S`` starts at 1 and grows by 1 each time the memory is recalled, which also resets ``t`` to
0.  Here a memory is recalled when a request needs it (resident or not; being needed is the
recall), and time is measured in ``time_unit_hours`` (a day in the paper's setting).

Deterministic by default: evict the lowest retention first (ties: least recently used).  With
``stochastic: true`` the released code's rule is followed instead: each resident memory is
forgotten with probability ``1 - R`` (a seeded draw from the stream's generator per victim
choice); forgotten memories go first, lowest retention first, then the rest by retention.

The released code differs from the paper in two ways noted in ``conf/policy/memorybank.yaml``:
it computes ``exp(-t / 5*S)``, which Python parses as ``exp(-(t / 5) * S)`` (strength then
*speeds up* forgetting), and it forgets stochastically.  We follow the paper.
"""

from __future__ import annotations

import math

from memlens.policies.scan import ScanPolicy

from memlens.policy import PolicyContext, compiled_kernel


@compiled_kernel("memlens.kernels.memorybank:replay")
class MemoryBank(ScanPolicy):
    name = "memorybank"

    def __init__(
        self,
        initial_strength: float = 1.0,
        strength_increment: float = 1.0,
        time_unit_hours: float = 24.0,
        stochastic: bool = False,
    ) -> None:
        if initial_strength <= 0 or strength_increment < 0 or time_unit_hours <= 0:
            raise ValueError("memorybank: strengths and time unit must be positive")
        self.initial_strength = float(initial_strength)
        self.strength_increment = float(strength_increment)
        self.time_unit_s = float(time_unit_hours) * 3600.0
        self.stochastic = bool(stochastic)
        self.stochastic_order = self.stochastic

    def kernel_supported(self) -> bool:
        """The compiled kernel replays the deterministic rule only (no generator draws)."""
        return not self.stochastic

    def reset(self, ctx: PolicyContext) -> None:
        super().reset(ctx)
        self._strength: dict[int, float] = {}
        self._learned: dict[int, float] = {}  # trace time of learning or last recall

    def insert(self, item: int, now: int) -> None:
        super().insert(item, now)
        if item not in self._learned:
            self._learned[item] = self._t[now]
            self._strength[item] = self.initial_strength

    def used(self, item: int, now: int) -> None:
        self._strength[item] = self._strength.get(item, self.initial_strength) + (
            self.strength_increment
        )
        self._learned[item] = self._t[now]

    def retention(self, item: int, t: float) -> float:
        return math.exp(-(t - self._learned[item]) / self.time_unit_s / self._strength[item])

    def scores(self, items: list[int], t: float) -> list[float]:
        learned, strength, unit = self._learned, self._strength, self.time_unit_s
        # rank by the exponent: exp is monotone, and the exponent does not underflow to ties
        return [-(t - learned[i]) / unit / strength[i] for i in items]

    def rng_order(self, ranked: list[int], scores: list[float], t: float) -> list[int]:
        if not self.stochastic:
            return ranked
        draws = self.ctx.rng.random(len(ranked)).tolist()
        forgotten = [k for k, u in zip(ranked, draws) if u > math.exp(scores[k])]
        kept = [k for k, u in zip(ranked, draws) if u <= math.exp(scores[k])]
        return forgotten + kept
