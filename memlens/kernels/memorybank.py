"""The ``memorybank`` kernel: MemoryBank (``policies/memorybank.py``) in one compiled loop.

The class ranks its candidates by the Ebbinghaus exponent ``-(t - learned) / unit / strength``
(lowest first, ties by recency).  Each item's exponent is a line in ``t``, so the bound tree of
``memlens.kernels.scantree`` keeps per node the lowest exponent of its items at two times ``T``
and ``T + H`` and interpolates (the minimum of lines is concave; ``scantree._rebase``).  It
used to keep too the smallest ``learned`` and the smallest strength, whose expression is a
second bound; that one pruned no node the envelope kept at budget 65536, and cost a division
per node and two more minima per level updated (``scantree._bound`` has the figures).

A victim choice visits the items whose bound does not exceed the victim's exponent: the cost
follows the number of near-ties and the tree's depth (log of the items held), not a scan of
the items held.

The code variant (``variant=code``, ``MemoryBank._code_exponent``) counts whole days: its
exponent ``(learned day - day) / 5 * strength`` is a step function of ``t``, not a line, so
the envelope does not bound it.  It is constant within a day, though, so that mode
(``scantree.MEMORYBANK_DAYS``) keeps in every leaf the item's exact exponent on the stream's
current day, and in every inner node the least of its leaves' (an exact bound, no margin);
when an event falls on a later day every candidate is re-scored (``scantree._rebase``).  The
day numbers are ``floor(t / unit)`` as floats, exact (as are their differences, and so
``-days / 5``) while they stay below 2**52 in magnitude, which the replay checks.

Deterministic MemoryBank only: with ``stochastic: true`` the class draws from the stream's
generator for every victim choice, which this kernel does not reproduce (``kernel_supported``
is False there, and ``engine=auto`` replays it on the reference engine).
"""

from __future__ import annotations

import numpy as np

from memlens.kernels.common import result, timed, warm_up
from memlens.kernels.scantree import MEMORYBANK, MEMORYBANK_DAYS, replay_scan, scan_arguments
from memlens.trace.model import Trace


def strengths(policy, max_uses: int) -> np.ndarray:
    """The strength after ``k`` recalls for every ``k <= max_uses``, summed one increment at a
    time from the initial strength, as ``MemoryBank.used`` does."""
    out = [policy.initial_strength]
    for _ in range(max_uses):
        out.append(out[-1] + policy.strength_increment)
    return np.array(out, np.float64)


#: the largest day number (``floor(t / unit)``) the code variant's float arithmetic is exact for
MAX_DAY = 2.0**52


def _first_times(policy, trace: Trace) -> np.ndarray:
    """Per stream the base of the score: its first event's time (the paper's envelope), or
    that time's day number (the code variant's whole days, ``scantree._rebase``)."""
    t0 = np.array([float(trace.ev_t[ev[0]]) if len(ev) else 0.0 for ev in trace.stream_events])
    if not policy.whole_days:
        return t0
    days = np.floor(trace.ev_t / policy.time_unit_s)
    if len(days) and float(np.abs(days).max()) >= MAX_DAY:
        raise ValueError(f"the memorybank kernel counts days exactly below {MAX_DAY:.0f}: "
                         "a trace time is too far from 0 for time_unit_hours")  # fmt: skip
    return np.floor(t0 / policy.time_unit_s)


def _arguments(policy, trace: Trace, budget: int, demand_fetch: bool):
    max_uses = int(trace.item_n_uses.max()) if trace.n_items else 0
    X = np.zeros((3, trace.n_items))
    t0 = _first_times(policy, trace)
    mode = MEMORYBANK_DAYS if policy.whole_days else MEMORYBANK
    # inner nodes: the bound reads the envelope (3, 4) alone (``scantree._bound``)
    return scan_arguments(trace, budget, demand_fetch, mode, [policy.time_unit_s], X,
                          [(0, 1.0), (1, 1.0), (2, 1.0), (3, 1.0), (4, 1.0)],
                          strength=strengths(policy, max_uses), t0=t0,
                          inner=[3] if policy.whole_days else [3, 4])  # fmt: skip


def replay(policy, trace: Trace, budget: int, demand_fetch: bool, seed: int):
    """The ``memorybank`` kernel: the reference engine's result."""
    if policy.stochastic:
        raise ValueError("the memorybank kernel replays deterministic MemoryBank only")
    warm_up(replay_scan, lambda tiny: _arguments(policy, tiny, 1, False)[1])
    out, args = _arguments(policy, trace, budget, demand_fetch)
    m, wall = timed(replay_scan, *args)
    return result(out, m, policy.name, budget, demand_fetch, wall)
