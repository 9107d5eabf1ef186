"""Compiled replay kernels: one numba loop per bundled policy, each equal to the reference engine.

The reference simulator (``memlens.simulator``) with a policy's readable Python class is the
specification; a kernel is an optimisation of that pair for one policy class, registered with
``@memlens.policy.compiled_kernel(name)`` (``memlens.policy.KERNELS`` maps the name to the
function).  ``tests/test_kernels_*.py`` check each one event for event against the reference
engine on hypothesis-generated traces (hits, context tokens, evictions, the whole move log).

Layout: ``common`` (the output buffers and the ``SimResult`` every kernel fills), ``heap`` (an
indexed binary heap per stream, for priority orders that are not a queue), then one module per
kernel.  A kernel function is called as ``replay(policy, trace, budget, demand_fetch, seed)``.
"""

from __future__ import annotations

import importlib

from memlens.policy import KERNELS


def kernel_function(name: str):
    """The replay function of compiled kernel ``name`` (imported on first use)."""
    if name not in KERNELS:
        raise ValueError(f"unknown compiled kernel {name!r}; known: {', '.join(KERNELS)}")
    module, _, func = KERNELS[name].partition(":")
    return getattr(importlib.import_module(module), func)


def run_kernel(name: str, policy, trace, budget: int, demand_fetch: bool, seed: int):
    """Replay ``trace`` against ``policy`` with its compiled kernel ``name``."""
    return kernel_function(name)(policy, trace, int(budget), bool(demand_fetch), int(seed))
