"""A digest of MemLens's own code, for caches whose entries a code change must invalidate.

Sweep jobs kept for resuming (``memlens.runs.resume``) and composed policy configs kept between
processes (``memlens.config.memo``) are both keyed by it: every ``.py`` file of the package
(policies included) and the shipped learned model, by path and bytes, in order.
"""

from __future__ import annotations

import hashlib
from functools import cache
from pathlib import Path


@cache
def package_digest(salt: str) -> str:
    """SHA-256 of ``salt``, then every ``.py`` file of the installed package (path and bytes,
    in order), then the shipped model files.  Once per process and salt (about 10 ms)."""
    root = Path(__file__).resolve().parents[1]  # the memlens package
    digest = hashlib.sha256(salt.encode())
    for path in sorted(root.rglob("*.py")):
        digest.update(str(path.relative_to(root)).encode() + b"\0" + path.read_bytes())
    # policies/, datasets/ and conf/ install as memlens.* subpackages; in a source checkout they
    # sit beside memlens/ and are reached through the package-dir mapping instead
    for sub in ("policies",):
        other = root.parent / sub
        if other.is_dir() and not (root / sub).is_dir():
            for path in sorted(other.rglob("*.py")):
                digest.update(f"{sub}/{path.relative_to(other)}".encode() + b"\0")
                digest.update(path.read_bytes())
    for path in sorted((root / "models").glob("*")):  # the shipped learned model is code too
        if path.is_file():
            digest.update(f"models/{path.name}".encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()
