"""Where MemLens keeps derived data that is expensive to recompute.

One root for every cache (oracle bounds, embeddings, columnar traces): ``$MEMLENS_CACHE`` if
set, else ``~/.cache/memlens``.  Each kind of cache has its own sub-folder (``KINDS``), and every
entry is keyed by a content hash, so a stale entry is never served for changed inputs and
deleting the folder is always safe.  How entries are stored and checked: ``memlens._util.safecache``.
"""

from __future__ import annotations

import os
from pathlib import Path

#: the sub-folders of the cache root, one per kind of cache
KINDS = ("traces", "derived", "oracle", "embeddings")


def cache_root() -> Path:
    root = os.environ.get("MEMLENS_CACHE")
    return Path(root).expanduser() if root else Path.home() / ".cache" / "memlens"


def cache_dir(kind: str, override: str | os.PathLike | None = None) -> Path:
    """``override`` if given, else ``<cache_root>/<kind>``."""
    return Path(override).expanduser() if override else cache_root() / kind
