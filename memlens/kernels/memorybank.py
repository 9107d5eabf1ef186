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

Deterministic MemoryBank only: with ``stochastic: true`` the class draws from the stream's
generator for every victim choice, which this kernel does not reproduce (``kernel_supported``
is False there, and ``engine=auto`` replays it on the reference engine).
"""

from __future__ import annotations

import numpy as np

from memlens.kernels.common import result, timed, warm_up
from memlens.kernels.scantree import MEMORYBANK, replay_scan, scan_arguments
from memlens.trace.model import Trace


def strengths(policy, max_uses: int) -> np.ndarray:
    """The strength after ``k`` recalls for every ``k <= max_uses``, summed one increment at a
    time from the initial strength, as ``MemoryBank.used`` does."""
    out = [policy.initial_strength]
    for _ in range(max_uses):
        out.append(out[-1] + policy.strength_increment)
    return np.array(out, np.float64)


def _arguments(policy, trace: Trace, budget: int, demand_fetch: bool):
    max_uses = int(trace.item_n_uses.max()) if trace.n_items else 0
    X = np.zeros((3, trace.n_items))
    t0 = np.array([float(trace.ev_t[ev[0]]) if len(ev) else 0.0 for ev in trace.stream_events])
    # inner nodes: the bound reads the envelope (3, 4) alone (``scantree._bound``)
    return scan_arguments(trace, budget, demand_fetch, MEMORYBANK, [policy.time_unit_s], X,
                          [(0, 1.0), (1, 1.0), (2, 1.0), (3, 1.0), (4, 1.0)],
                          strength=strengths(policy, max_uses), t0=t0,
                          inner=[3, 4])  # fmt: skip


def replay(policy, trace: Trace, budget: int, demand_fetch: bool, seed: int):
    """The ``memorybank`` kernel: the reference engine's result."""
    if policy.stochastic:
        raise ValueError("the memorybank kernel replays deterministic MemoryBank only")
    warm_up(replay_scan, lambda tiny: _arguments(policy, tiny, 1, False)[1])
    out, args = _arguments(policy, trace, budget, demand_fetch)
    m, wall = timed(replay_scan, *args)
    return result(out, m, policy.name, budget, demand_fetch, wall)
