"""Folders a command created on its way to its run folder, removed again when the run fails.

Why: Hydra makes ``outputs/<date>/<time>`` before the command starts.  When the run then fails
or is stopped (SIGTERM), ``memlens.runs.writers.run_folder`` removes the run folder it left
empty, but ``outputs/<date>`` (and ``outputs``) stayed behind, empty.  The pre-flight checks
note which folders on the way did not exist yet (:func:`note_missing_parents`, before Hydra
runs); a failed run removes those of them that are empty (:func:`remove_created_parents`).
A folder that existed before the command is never removed.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

_MISSING: set[Path] = set()


def note_missing_parents(path: str | os.PathLike) -> None:
    """Remember the parents of run folder ``path`` that do not exist yet."""
    here = Path(os.path.abspath(path)).parent
    while not here.exists() and here != here.parent:
        _MISSING.add(here)
        here = here.parent


def remove_created_parents(path: str | os.PathLike) -> None:
    """Remove the parents of ``path`` noted as missing before the command, while empty."""
    here = Path(os.path.abspath(path)).parent
    while here in _MISSING:
        with contextlib.suppress(OSError):
            here.rmdir()  # only if empty
        if here.exists():
            return
        _MISSING.discard(here)
        here = here.parent
