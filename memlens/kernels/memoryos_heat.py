"""The ``memoryos_heat`` kernel: MemoryOS heat (``policies/memoryos_heat.py``), compiled.

The class evicts the lowest ``heat = alpha * visits + beta * length + gamma * exp((seen - t) /
tau)`` (ties by recency).  Heat is monotone in each of visits, length and the time last seen
(the direction given by the sign of its weight), so the bound tree of ``memlens.kernels.
scantree`` keeps per node the minima of the three (negated for a negative weight) and the heat
expression at those minima bounds every item below the node; the leaves give the class's exact
heat, computed with the same operations in the same order (``math.exp`` is the same C library
call).

The per-component minima of a node come from different items (the shortest item is rarely the
oldest), so the tree also keeps the envelope bound of ``scantree._rebase``: every item's
heat is a line in ``u = exp(-t / tau)`` (up to a per-stream base time), the node's lowest heat
is concave in ``u``, and the two values the tree keeps per node bound it from below by
interpolation.  Inner nodes are bounded by the envelope alone (no ``exp``: on the benchmark
trace the heat at the per-component minima never pruned a node the envelope kept), and the base time
follows the trace time within about one ``tau`` (``scantree._heat_rebase_due``), where the
envelope is tight.  A victim choice visits the items whose bound does not exceed the victim's
heat: those with nearly the lowest heat (many when many items have nearly the same length,
visits and age), and the paths to them; on the benchmark trace at budget 65536 (about 500
items held) following the time within one ``tau`` rather than 40 halved that number.
"""

from __future__ import annotations

import numpy as np

from memlens.kernels.common import result, timed, warm_up
from memlens.kernels.scantree import MEMORYOS_HEAT, replay_scan, scan_arguments
from memlens.trace.model import Trace


def _sign(w: float) -> float:
    return -1.0 if w < 0 else 1.0


def _arguments(policy, trace: Trace, budget: int, demand_fetch: bool):
    X = np.zeros((3, trace.n_items))
    X[1] = trace.item_tokens / policy.length_unit  # the class's ``_length`` (same division)
    pol = [policy.alpha, policy.beta, policy.gamma, policy.tau_s]
    store = [(0, _sign(policy.alpha)), (1, _sign(policy.beta)), (2, _sign(policy.gamma)),
             (3, 1.0), (4, 1.0)]  # fmt: skip
    t0 = np.array([float(trace.ev_t[ev[0]]) if len(ev) else 0.0 for ev in trace.stream_events])
    # inner nodes: the envelope (positions 3 and 4) is the whole bound (``scantree._bound``)
    return scan_arguments(trace, budget, demand_fetch, MEMORYOS_HEAT, pol, X, store, t0=t0,
                          inner=[3, 4])  # fmt: skip


def replay(policy, trace: Trace, budget: int, demand_fetch: bool, seed: int):
    """The ``memoryos_heat`` kernel: the reference result."""
    warm_up(replay_scan, lambda tiny: _arguments(policy, tiny, 1, False)[1])
    out, args = _arguments(policy, trace, budget, demand_fetch)
    m, wall = timed(replay_scan, *args)
    return result(out, m, policy.name, budget, demand_fetch, wall)
