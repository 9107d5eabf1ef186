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
  simulator asks for ``victims`` only then.  What a flush evicts is the variant's rule below;
  the target is a fraction of the message tokens (the queue and the summary), not of the
  budget: with the budget's 50%, a trace whose pins hold most of the budget (tau-bench's
  1,278-token system prompt at 2048) emptied the whole queue at every flush;
* the summary is modelled by its size only (``extra_tokens``, which the simulator counts in
  every request's context and against the budget): ``ceil(summary_ratio * (old summary +
  evicted tokens))``, or a fixed ``summary_tokens``, truncated to what pinned items leave of
  the budget (pins outrank it).
  It is lossy: an item that went into the summary is a miss when needed;
* crossing the pressure fraction is counted in ``pressure_warnings`` (it changes nothing by
  itself: what the agent saves on a warning is the agent's decision, not the policy's).

Two variants (``variant``; constants overridable one by one):

* ``paper`` (the default, the paper's numbers): warning at 70% of the context; a flush evicts
  the oldest messages until at least ``evict_fraction`` = 50% of the *message* tokens (the
  queue plus the summary; pinned items, MemGPT's system prompt and working context, are never
  flushed, so they do not count) is freed; no message is kept back; summary size
  ``ceil(summary_ratio * (old summary + evicted))`` (the paper gives no size).
* ``code``: letta-ai/letta at commit 8bd29c90baaf3573e1fb5a4d2f0f4908c611d734 (2023-11-29, the
  MemGPT of the paper's release): ``memgpt/constants.py:40`` ``MESSAGE_SUMMARY_WARNING_FRAC =
  0.75``; ``constants.py:44`` ``MESSAGE_SUMMARY_TRUNC_TOKEN_FRAC = 0.75`` and ``:48``
  ``MESSAGE_SUMMARY_TRUNC_KEEP_N_LAST = 3`` used by ``memgpt/agent.py:662-742``
  ``summarize_messages_inplace``: the target is ``int(0.75 * message tokens)`` (all messages but
  the system one, ``agent.py:668-670``), the last 3 messages are never candidates
  (``agent.py:673-675``), and the walk from the oldest message (the previous summary first)
  summarises the longest prefix whose tokens stay within the target (``agent.py:691-698``:
  the message that crosses it is kept).  The summary is asked for in under 100 words
  (``memgpt/prompts/gpt_summarize.py:1`` ``WORD_LIMIT = 100``): ``summary_tokens`` = 130 stands
  in for it (about 1.3 tokens per English word).

Recall storage (MemGPT's searchable store of every evicted message) is MemLens's retrieval tier:
with ``retrieval.enabled=true`` every victim, a summarised message included, goes to the
short-term cache and then the long-term store, where request-time retrieval finds it (tested;
agent-small at 1024: hit rate 0.385, context recall 0.632).

MemLens's budget is a hard limit, which MemGPT's context window is only through the API's
error: when the rule above leaves the context over budget (or frees nothing: the released
code then raises, ``agent.py:684-687``, or finds an empty prefix), the oldest messages go on
being flushed, the kept-back ones last, until it fits.
"""

from __future__ import annotations

import math
from collections import OrderedDict

from memlens.policy import Policy, PolicyContext, compiled_kernel

#: Per variant: (pressure_fraction, evict_fraction, keep_last, summary_tokens; 0 = by ratio).
VARIANT_DEFAULTS = {"paper": (0.7, 0.5, 0, 0), "code": (0.75, 0.75, 3, 130)}


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
        variant: str = "paper",
        pressure_fraction: float | None = None,
        evict_fraction: float | None = None,
        keep_last: int | None = None,
        summary_ratio: float = 0.1,
        summary_tokens: int | None = None,
    ) -> None:
        if variant not in VARIANT_DEFAULTS:
            raise ValueError(f"memgpt: variant must be paper or code, not {variant!r}")
        defaults = VARIANT_DEFAULTS[variant]
        given = (pressure_fraction, evict_fraction, keep_last, summary_tokens)
        pressure, evict, keep, fixed = (d if g is None else g for g, d in zip(given, defaults))
        if not 0.0 < pressure <= 1.0:
            raise ValueError("memgpt: pressure_fraction must be in (0, 1]")
        if not 0.0 <= evict <= 1.0:
            raise ValueError("memgpt: evict_fraction must be in [0, 1]")
        if not 0.0 <= summary_ratio < 0.5:
            # below 1/2 the recursive summary stays under the budget: S <= r * (S + B)
            raise ValueError("memgpt: summary_ratio must be in [0, 0.5)")
        if keep < 0 or fixed < 0:
            raise ValueError("memgpt: keep_last and summary_tokens must be >= 0")
        self.variant, self.at_most = variant, variant == "code"
        self.pressure_fraction, self.evict_fraction = float(pressure), float(evict)
        self.keep_last, self.summary_tokens = int(keep), int(fixed)
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

    def _rule(self, summary: int) -> list[int]:
        """The variant's flush rule: the oldest messages it summarises (removed from the queue)."""
        queue, tok = self._queue, self._tok
        memory = self._memory
        target = self.evict_fraction * (memory.used_tokens - memory.pinned_tokens + summary)
        out: list[int] = []
        taken = summary if self.at_most else 0  # code: the old summary is the first message
        for _ in range(len(queue) - self.keep_last):
            i = next(iter(queue))
            done = taken + tok[i] > target if self.at_most else taken >= target
            if done:
                break
            del queue[i]
            out.append(i)
            taken += tok[i]
        return out

    def _summary_after(self, summary: int, evicted: int) -> int:
        if self.summary_tokens:
            return self.summary_tokens
        return math.ceil(self.summary_ratio * (summary + evicted))

    def victims(self, excess: int, now: int) -> list[int]:
        budget, summary, tok, queue = self.ctx.budget, self._summary, self._tok, self._queue
        used = self._memory.used_tokens  # the victims are still counted
        out = self._rule(summary)
        evicted = sum(tok[i] for i in out)
        new_summary = self._summary_after(summary, evicted) if out else summary
        while queue and (not out or used - evicted + new_summary > budget):
            i, _ = queue.popitem(last=False)  # the hard budget: flush on, oldest first
            out.append(i)
            evicted += tok[i]
            new_summary = self._summary_after(summary, evicted)
        self._summary = new_summary
        self.flushes += 1
        self._check_pressure(used - evicted)
        return out

    def pin(self, item: int) -> None:
        self._queue.pop(item, None)

    def unpin(self, item: int) -> None:
        self._queue[item] = None  # back in the queue as its newest message
