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

Two variants (``variant``), checked against github.com/zhongwanjun/MemoryBank-SiliconFriend at
commit cf61c4196e4cfdb0f2b7a0316249fa40312dc3a9,
``memory_bank/memory_retrieval/forget_memory.py``:

* ``paper`` (the default: the paper's formula): ``R = exp(-t / S)``, ``t`` in
  ``time_unit_hours`` (a day) as a real number.
* ``code``: ``forgetting_curve`` (line 36) computes ``math.exp(-t / 5*S)``, which Python
  reads as ``exp(-(t / 5) * S)``: strength then *speeds up* forgetting; ``t`` is a whole
  number of days (``_get_date_difference``, lines 56-60, ``(d2 - d1).days`` of two dates:
  here the difference of the day numbers ``floor(time / time_unit)``).  Both variants share
  ``S = 1`` for a new memory and ``+1`` with ``t`` reset per recall (lines 63-71, 106-107).
  The released code draws ``random.random() > R`` once per memory when it loads the memory
  file (lines 115-120), and only with ``enable_forget_mechanism``, off by default
  (``utils/sys_args.py:10``); ``stochastic: true`` here is the nearest rule for an eviction
  order (a draw per victim choice), in either variant.

With whole-day ``t`` every memory learned or recalled on the current day has ``t = 0`` and
``R = 1``: all tie, and the tie-break (least recently written or used) decides, so on a trace
shorter than a day (the bundled agent-small) ``variant=code`` evicts exactly as LRU does.  Both
deterministic variants replay on the compiled kernel (``memlens/kernels/memorybank.py``: the
code variant's whole days in a mode of their own); ``stochastic: true`` on the reference engine.
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
        variant: str = "paper",
        initial_strength: float = 1.0,
        strength_increment: float = 1.0,
        time_unit_hours: float = 24.0,
        stochastic: bool = False,
    ) -> None:
        if variant not in ("paper", "code"):
            raise ValueError(f"memorybank: variant must be paper or code, not {variant!r}")
        if initial_strength <= 0 or strength_increment < 0 or time_unit_hours <= 0:
            raise ValueError("memorybank: strengths and time unit must be positive")
        self.variant, self.whole_days = variant, variant == "code"
        self.initial_strength = float(initial_strength)
        self.strength_increment = float(strength_increment)
        self.time_unit_s = float(time_unit_hours) * 3600.0
        self.stochastic = bool(stochastic)
        self.stochastic_order = self.stochastic

    def kernel_supported(self) -> bool:
        """The compiled kernel replays both deterministic variants (no generator draws)."""
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

    def _code_exponent(self, item: int, t: float) -> float:
        """``-t / 5*S`` as the released code evaluates it, ``t`` in whole days."""
        unit = self.time_unit_s
        days = math.floor(t / unit) - math.floor(self._learned[item] / unit)
        return -days / 5 * self._strength[item]

    def retention(self, item: int, t: float) -> float:
        if self.whole_days:
            return math.exp(self._code_exponent(item, t))
        return math.exp(-(t - self._learned[item]) / self.time_unit_s / self._strength[item])

    def scores(self, items: list[int], t: float) -> list[float]:
        if self.whole_days:
            return [self._code_exponent(i, t) for i in items]
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
