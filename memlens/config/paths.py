"""Files a setting names, checked before any work starts (nothing is opened or created).

A trace, a converter's source or a corpus must be a readable regular file: a directory fails
late with an unhelpful message, and a FIFO or ``/dev/zero`` is read forever.  A file a command
writes (``out=``) must not already exist unless the command was told ``overwrite=true``, its
folder must exist, and it must not be a directory.  A cache directory must not be a file.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from memlens.config.store import SettingsError


def check_input_file(key: str, path: str) -> None:
    """``path`` (named by setting ``key``) is a regular file this process can read."""
    if not str(path).strip():
        raise SettingsError(f"{key} must name a file, got an empty string")
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        raise SettingsError(f"{key}={path}: no such file") from None
    except OSError as exc:
        raise SettingsError(f"{key}={path}: {exc.strerror}") from None
    if stat.S_ISDIR(mode):
        raise SettingsError(f"{key}={path}: is a directory, not a file")
    if not stat.S_ISREG(mode):
        raise SettingsError(f"{key}={path}: not a regular file (a device, FIFO or socket "
                            "cannot be read as one)")  # fmt: skip
    if not os.access(path, os.R_OK):
        raise SettingsError(f"{key}={path}: permission denied")


def check_output_file(key: str, path: str, overwrite: bool) -> None:
    """``path`` can be written: not a directory, its folder exists, and it does not exist yet
    unless ``overwrite``."""
    if not str(path).strip():
        raise SettingsError(f"{key} must name a file, got an empty string")
    where = Path(path)
    if where.is_dir():
        raise SettingsError(f"{key}={path}: is a directory")
    if not where.parent.is_dir():
        raise SettingsError(f"{key}={path}: folder {where.parent} does not exist")
    if where.exists() and not overwrite:
        raise SettingsError(f"{key}={path} exists; overwrite=true replaces it")


def check_cache_dir(key: str, path: str | None) -> None:
    """A cache directory setting (null: the default) that is not an existing non-directory."""
    where = Path(path).expanduser() if path else None
    if where is not None and where.exists() and not where.is_dir():
        raise SettingsError(f"{key}={path}: exists and is not a directory")


#: Top-level folders of virtual file systems: nothing a run writes belongs there.
VIRTUAL_ROOTS = ("/proc", "/sys", "/dev")


def _existing_ancestor(path: Path) -> Path:
    """The deepest part of ``path`` that exists (``path`` itself if it exists)."""
    here = path
    while not here.exists() and here != here.parent:
        here = here.parent
    return here


def check_run_dir(key: str, path: str, inputs: list[str] = ()) -> None:
    """A run folder Hydra can create and MemLens can fill, checked before anything is written:
    not the file system's root, not on /proc, /sys or /dev, not an existing file (nor under
    one), on a writable file system with room left, and not the folder of a trace the run
    reads (its files would be mixed with the run's input)."""
    if not str(path).strip():
        raise SettingsError(f"{key} must name a folder, got an empty string")
    real = Path(os.path.realpath(os.path.abspath(path)))
    if real == Path(real.anchor):
        raise SettingsError(f"{key}={path}: the file system's root is not a run folder")
    for virtual in VIRTUAL_ROOTS:
        if real.is_relative_to(virtual):
            raise SettingsError(f"{key}={path}: {virtual} is a virtual file system, not a place "
                                "for a run's files")  # fmt: skip
    there = _existing_ancestor(real)
    if not there.is_dir():
        what = "exists and is not a folder" if there == real else f"{there} is not a folder"
        raise SettingsError(f"{key}={path}: {what}")
    try:
        fs = os.statvfs(there)
    except OSError as exc:
        raise SettingsError(f"{key}={path}: {exc.strerror or exc}") from None
    if fs.f_flag & os.ST_RDONLY:
        raise SettingsError(f"{key}={path}: {there} is on a read-only file system")
    if not os.access(there, os.W_OK | os.X_OK):
        raise SettingsError(f"{key}={path}: permission denied ({there} cannot be written)")
    if fs.f_bavail == 0:
        raise SettingsError(f"{key}={path}: no space left on the device of {there}")
    for trace in inputs:
        if Path(os.path.realpath(trace)).parent == real:
            raise SettingsError(f"{key}={path}: holds the trace {trace}; a run folder must not "
                                "be a trace's folder (its files would mix with the input)")  # fmt: skip
