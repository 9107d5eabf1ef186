"""Where numba keeps MemLens's compiled kernels: one folder that every process finds.

Numba's default puts a kernel's cache in a ``__pycache__`` beside its source, which an installed
package may not be allowed to write and which no ``memlens cache`` command knows of.  MemLens
points numba at one folder instead: ``$MEMLENS_KERNEL_CACHE`` if set, else ``$NUMBA_CACHE_DIR``
if set (a user's own choice wins), else ``<cache root>/kernels`` (``memlens._util.cachedir``:
``$MEMLENS_CACHE`` or ``~/.cache/memlens``).  :func:`configure` runs when ``memlens`` is first
imported, before numba is, and exports the folder as ``NUMBA_CACHE_DIR``, so every process a
command starts (sweep workers, Ray workers on this machine, pytest-xdist workers, the
processes tests start) inherits it and loads what one of them compiled.

Numba keys each entry by the source file's path and modification stamp and by the CPU, so an
entry is never served for changed code or another machine; deleting the folder is always safe
(the kernels compile again).  ``memlens.kernels.warm`` compiles what a run needs once, before
any fan-out, and leaves a stamp per stage here.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from memlens._util.cachedir import cache_root

ENV = "MEMLENS_KERNEL_CACHE"


def kernel_cache_dir() -> Path:
    """The folder numba caches compiled kernels in (see the module docstring)."""
    for name in (ENV, "NUMBA_CACHE_DIR"):
        value = os.environ.get(name)
        if value:
            return Path(value).expanduser()
    return cache_root() / "kernels"


def configure() -> Path:
    """Point numba (this process and every child) at :func:`kernel_cache_dir`.

    Numba reads ``NUMBA_CACHE_DIR`` when it is imported; if something imported it earlier, its
    setting is changed in place as well."""
    folder = kernel_cache_dir()
    os.environ["NUMBA_CACHE_DIR"] = str(folder)
    config = sys.modules.get("numba.core.config")
    if config is not None:
        config.CACHE_DIR = str(folder)
    return folder
