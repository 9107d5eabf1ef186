"""Compiled replay kernels: one numba loop per bundled policy, each equal to the reference engine.

The reference simulator (``memlens.simulator``) with a policy's readable Python class is the
specification; a kernel is an optimisation of that pair for one policy class, registered next
to the class with ``@memlens.policy.compiled_kernel("module:function")``.  A kernel takes what
it needs from the policy object it is given (settings, and the class's own helpers such as
``GenerativeAgents.relevance_csr``), so nothing here imports a policy.
``tests/kernels/test_kernels_table.py`` checks every registered kernel event for event against
the reference engine on hypothesis-generated traces (hits, context tokens, evictions, the
whole move log).

Layout: ``common`` (the output buffers, the ``SimResult`` every kernel fills, the warm-up),
``moves`` (the cursor over a need's alternatives and the move log), ``heap``/``intheap``
(indexed binary heaps per stream), ``scantree``/``simd`` (the scan policies' victim search),
then one module per kernel (``queues`` for FIFO and LRU).  A kernel function is called as
``replay(policy, trace, budget, demand_fetch, seed)``.

May import: ``memlens.simulator``, ``memlens.policy``, ``memlens.trace`` and ``memlens._util``.
"""

from __future__ import annotations

import importlib


def kernel_function(target: str):
    """The replay function at ``target`` (``"module:function"``), imported on first use."""
    module, _, func = target.partition(":")
    return getattr(importlib.import_module(module), func)


def run_kernel(target: str, policy, trace, budget: int, demand_fetch: bool, seed: int):
    """Replay ``trace`` against ``policy`` with its compiled kernel ``target``."""
    return kernel_function(target)(policy, trace, int(budget), bool(demand_fetch), int(seed))
