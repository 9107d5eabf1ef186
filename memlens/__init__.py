"""MemLens: which memory policy should an agent use, at which token budget, and at what cost.

The public API, imported lazily so that ``import memlens`` costs nothing until a name is used:

* :class:`Policy` (``memlens.policy``): the placement-policy contract;
* :func:`simulate` (``memlens.simulator``): replay a trace against a policy;
* :func:`load_trace` (``memlens.trace.io``): parse and validate a JSON Lines trace;
* :func:`check_policy` (``memlens.checker``): the checks every policy must pass;
* :func:`run` (``memlens.runs.pipeline``): one configured job, replay and report.

The packages, bottom first (each may import only those below it; CONTRIBUTING.md):
``_util`` -> ``trace`` -> engine (``policy``, ``simulator``, ``kernels``, ``retrieval``,
``oracle``, ``scorer``) -> ``policies``/``datasets``/``testing``/``checker`` -> ``analyze`` ->
``config`` -> ``present`` -> ``runs`` -> ``learn`` -> ``ui`` -> ``cli``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from memlens._util.kernelcache import configure as _configure_kernel_cache

# numba's cache folder, set before anything imports numba (memlens._util.kernelcache)
_configure_kernel_cache()

#: Public name -> "module:attribute", imported on first use.
_PUBLIC = {
    "Policy": "memlens.policy:Policy",
    "simulate": "memlens.simulator:simulate",
    "load_trace": "memlens.trace.io:load_trace",
    "check_policy": "memlens.checker:check_policy",
    "run": "memlens.runs.pipeline:run",
}

__all__ = ["Policy", "check_policy", "load_trace", "run", "simulate"]

if TYPE_CHECKING:  # for type checkers and editors only; never imported at run time
    from memlens.checker import check_policy
    from memlens.policy import Policy
    from memlens.runs.pipeline import run
    from memlens.simulator import simulate
    from memlens.trace.io import load_trace


def __getattr__(name: str):
    target = _PUBLIC.get(name)
    if target is None:
        raise AttributeError(f"module 'memlens' has no attribute {name!r}")
    import importlib

    module, _, attribute = target.partition(":")
    value = getattr(importlib.import_module(module), attribute)
    globals()[name] = value  # looked up once
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_PUBLIC})
