"""Arrays derived from a trace's texts, kept on disk beside its parsed-trace entry.

Several policies' preparations read what the trace's texts say: the rule scorer, MemoryBank,
Generative Agents and the learned scorer read each item's content counts
(``memlens.trace.features.content_features``), the learned scorer the hashed bags of words
of every item and request (``memlens.scorer.decision_features``), and Generative Agents the
TF-IDF vectors of both as its scan reads them (``memlens.kernels.generative_agents``).  They
depend on the trace alone, but each process computed them again: on a 5,800-stream trace the
bags and counts were 2.4 s of the learned scorer's preparation, on the longest batch of a
``compare``, and every ``simulate policy=rule`` paid the counts (issue 34).

A trace loaded through the parsed-trace cache (``memlens.trace.cache``, ``trace_cache=true``)
therefore keeps them beside its entry, in ``<cache root>/derived/``: one ``memlens._util.safecache``
entry (numbers only, checksummed, under the cache's size cap) per (trace, kind of arrays),
keyed by the trace's SHA-256, the kind and a digest of MemLens's code, so that a changed
tokeniser or feature never serves old arrays.  Each entry is written uncompressed: read back in
a few hundredths of a second.  A trace not loaded through the cache keeps nothing.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from pathlib import Path

import numpy as np

from memlens._util import safecache
from memlens._util.sources import package_digest
from memlens.trace.model import Trace

KIND = "derived"
#: ``trace.__dict__`` key: the cache root the trace's entry lives under (set when it was loaded
#: through the parsed-trace cache)
CACHE_ROOT_KEY = "_memlens_cache_root"


def kept_arrays(trace: Trace, name: str, build: Callable[[], dict[str, np.ndarray]],
                check: Callable[[dict[str, np.ndarray]], None]) -> dict[str, np.ndarray]:  # fmt: skip
    """``build()``'s arrays for ``trace``, read from their entry when the trace has one and it
    passes ``check`` (which raises on arrays that cannot be this trace's), else built and
    stored."""
    root = trace.__dict__.get(CACHE_ROOT_KEY)
    if root is None:
        return build()
    path = entry_path(Path(root), trace.sha256, name)

    def decode(arrays: dict[str, np.ndarray], meta: dict) -> dict[str, np.ndarray]:
        if meta.get("name") != name:
            raise ValueError(f"an entry of {meta.get('name')!r}, not {name!r}")
        check(arrays)
        return arrays

    arrays = safecache.load(path, KIND, decode)
    if arrays is None:
        arrays = build()
        safecache.store(path, KIND, arrays, {"name": name}, level=0)
    return arrays


def entry_path(root: Path, trace_sha256: str, name: str) -> Path:
    key = hashlib.sha256(f"{trace_sha256}\0{name}\0".encode())
    key.update(package_digest("memlens-derived\n").encode())
    return root / KIND / f"{key.hexdigest()}.npz"


def check_lengths(arrays: dict[str, np.ndarray], lengths: dict[str, int], dtype) -> None:
    """Raise unless every named array is 1-d of ``dtype`` with its length."""
    for key, n in lengths.items():
        a = arrays[key]
        if a.ndim != 1 or len(a) != n or a.dtype != dtype:
            raise ValueError(f"{key}: {a.dtype} of shape {a.shape}, expected {dtype} ({n},)")


def check_pointers(ptr: np.ndarray, end: int, what: str) -> None:
    """Raise unless ``ptr`` are CSR row pointers from 0 to ``end``, never decreasing."""
    if len(ptr) < 1 or ptr[0] != 0 or ptr[-1] != end or np.any(np.diff(ptr) < 0):
        raise ValueError(f"{what}: pointers out of order")
