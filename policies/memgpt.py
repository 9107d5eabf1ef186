"""MemGPT's message queue: FIFO with memory pressure and a recursive summary on flush.

Packer, Wooders, Lin, Fang, Patil, Stoica and Gonzalez, "MemGPT: Towards LLMs as Operating
Systems", 2023 (arXiv:2310.08560), section 2.2 "Queue manager"; continued as Letta (its
summarizer).  The main context holds a FIFO queue of messages.  When the prompt reaches a
*warning* fraction of the context window (70% in the paper) the agent is told memory is under
pressure (it may then save facts to archival memory by itself); when it reaches the *flush*
point (100%) the queue manager evicts messages, 50% of the context window in the paper, and
replaces them, together with the existing recursive summary, by a new recursive summary.

In MemLens:

* the queue is the resident, unpinned items in the order they entered working memory; being
  needed does not reorder it (MemGPT's queue is chronological);
* the flush happens exactly when the context (items + summary) would exceed the budget: the
  simulator asks for ``victims`` only then.  A flush evicts the oldest items until at least
  ``evict_fraction`` of the budget is freed *and* the context including the new summary fits;
* the summary is modelled by its size only (``extra_tokens``, which the simulator counts in
  every request's context and against the budget): ``ceil(summary_ratio * (old summary +
  evicted tokens))``, truncated to what pinned items leave of the budget (pins outrank it).
  It is lossy: an item that went into the summary is a miss when needed;
* crossing the pressure fraction is counted in ``pressure_warnings`` (it changes nothing by
  itself: what the agent saves on a warning is the agent's decision, not the policy's).

The released MemGPT code differs from the paper's numbers (see ``conf/policy/memgpt.yaml``):
it warns at 75% of the context window and, when summarising, truncates about 75% of the
message tokens while keeping the last few messages.  We follow the paper.
"""

from __future__ import annotations

import math
from collections import OrderedDict

from memlens.policy import Policy, PolicyContext, compiled_kernel


@compiled_kernel("memlens.kernels.memgpt:replay")
class MemGPT(Policy):
    name = "memgpt"
    grows = True  # live use: ``grow`` extends the token list (memlens.live)

    def grow(self, columns) -> None:
        """Live use: the new items' tokens (the rest of the state is per resident item)."""
        self._tok.extend(columns.item_tokens[len(self._tok) :])

    _summary = 0  # (before the first reset: no summary)

    def __init__(
        self,
        pressure_fraction: float = 0.7,
        evict_fraction: float = 0.5,
        summary_ratio: float = 0.1,
    ) -> None:
        if not 0.0 < pressure_fraction <= 1.0:
            raise ValueError("memgpt: pressure_fraction must be in (0, 1]")
        if not 0.0 <= evict_fraction <= 1.0:
            raise ValueError("memgpt: evict_fraction must be in [0, 1]")
        if not 0.0 <= summary_ratio < 0.5:
            # below 1/2 the recursive summary stays under the budget: S <= r * (S + B)
            raise ValueError("memgpt: summary_ratio must be in [0, 0.5)")
        self.pressure_fraction = float(pressure_fraction)
        self.evict_fraction = float(evict_fraction)
        self.summary_ratio = float(summary_ratio)

    def reset(self, ctx: PolicyContext) -> None:
        super().reset(ctx)
        self._tok = ctx.trace.item_tokens.tolist()
        self._memory = ctx.memory  # resident and pinned tokens, kept by the simulator
        self._queue: OrderedDict[int, None] = OrderedDict()
        self._summary = 0  # size of the recursive summary
        self._under_pressure = False
        self.pressure_warnings = 0
        self.flushes = 0

    @property
    def extra_tokens(self) -> int:  # type: ignore[override]
        """The summary's tokens in working memory: what pinned items leave of the budget."""
        if not self._summary:
            return 0
        return min(self._summary, max(0, self.ctx.budget - self._memory.pinned_tokens))

    def _check_pressure(self, used: int) -> None:
        """Count a warning when the context (``used`` item tokens + summary) crosses the line."""
        over = used + self.extra_tokens >= self.pressure_fraction * self.ctx.budget
        if over and not self._under_pressure:
            self.pressure_warnings += 1
        self._under_pressure = over

    def insert(self, item: int, now: int) -> None:
        if not self._memory.is_pinned(item):
            self._queue[item] = None
        self._check_pressure(self._memory.used_tokens)  # the item is already counted

    def victims(self, excess: int, now: int) -> list[int]:
        budget = self.ctx.budget
        summary = self._summary
        used = self._memory.used_tokens  # the victims are still counted
        target = self.evict_fraction * budget
        ratio = self.summary_ratio
        tok = self._tok
        queue = self._queue
        out: list[int] = []
        evicted = 0
        new_summary = summary
        while queue:
            i, _ = queue.popitem(last=False)
            out.append(i)
            evicted += tok[i]
            new_summary = math.ceil(ratio * (summary + evicted))
            if evicted >= target and used - evicted + new_summary <= budget:
                break
        self._summary = new_summary
        self.flushes += 1
        self._check_pressure(used - evicted)
        return out

    def pin(self, item: int) -> None:
        self._queue.pop(item, None)

    def unpin(self, item: int) -> None:
        self._queue[item] = None  # back in the queue as its newest message
