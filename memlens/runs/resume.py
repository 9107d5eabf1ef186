"""Finished sweep jobs, kept so that rerunning a sweep skips them.

A sweep (``memlens compare``, ``recommend``) that stops half-way (a crash, a signal, a laptop
lid) should not start from zero.  Each job's :class:`~memlens.analyze.report.Report` is stored when it
finishes, under a key that says everything the numbers depend on:

* the job's resolved settings (trace path, policy and its parameters, budget, every shared
  setting, where it is recorded in MLflow, a local store by its absolute path: a rerun into
  another store records again),
* the SHA-256 of the trace's bytes (an edited trace is a new job),
* the code version: a hash of every ``.py`` file of the installed ``memlens`` package (policies
  included), so an edited policy or simulator never serves numbers it did not compute.

Entries go through ``memlens._util.safecache`` (numbers and JSON only, verified on read, LRU size
cap), in ``<cache root>/jobs/``, so a stored job can never execute code.  A damaged entry is
discarded with one warning and the job simply runs again.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from pathlib import Path

import numpy as np

from memlens._util import safecache
from memlens._util.cachedir import cache_dir
from memlens._util.sources import package_digest
from memlens.analyze.report import Report
from memlens.analyze.stats import Interval

KIND = "jobs"
FORMAT = 1  # of the stored report layout below


def code_version() -> str:
    """SHA-256 over every ``.py`` file of the installed package (path and bytes), in order
    (``memlens._util.sources``)."""
    return package_digest(f"memlens-resume-v{FORMAT}\n")


def _files_named(value, skip=("trace", "traces")) -> list[str]:
    """Every string in the settings (outside ``skip``) that names an existing file: a learned
    model, a feedback store.  Retrained or edited in place, such a file changes the result."""
    if isinstance(value, dict):
        return [f for k, v in sorted(value.items()) if k not in skip for f in _files_named(v, skip)]
    if isinstance(value, list | tuple):
        return [f for v in value for f in _files_named(v, skip)]
    if isinstance(value, str) and value and len(value) < 4096:
        try:
            return [value] if Path(value).is_file() else []
        except OSError:
            return []
    return []


def _file_digest(path: str) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return f"{Path(path).resolve()}:{digest.hexdigest()}"


def _plain(value):
    """JSON for numpy scalars (reports hold a few)."""
    if isinstance(value, np.generic):
        return value.item()
    raise TypeError(f"not JSON: {type(value).__name__}")


def _store_identity(uri: str) -> str:
    """A tracking URI naming a local file, made absolute: ``sqlite:///mlflow.db`` started in two
    folders is two stores, and a job recorded in one is not recorded in the other."""
    if uri.startswith("sqlite:///") and not uri.startswith("sqlite:////"):
        return "sqlite:///" + str(Path(uri.removeprefix("sqlite:///")).resolve())
    if "://" not in uri and ":" not in uri[:2]:
        return str(Path(uri).resolve())
    return uri


#: Settings that say where a job runs, not what it computes (a sharded run is exact).
NOT_IN_KEY = ("backend", "ray_address", "shards")


def job_key(settings, trace_sha256: str) -> str:
    """The resume key of one job: resolved settings + trace hash + code version + the bytes of
    every other file the settings name (a model retrained at the same path is a new job)."""
    data = dataclasses.asdict(settings)
    for where in NOT_IN_KEY:  # where the work runs changes no number
        data.pop(where, None)
    mlflow = data.get("mlflow") or {}
    if "tracking_uri" in mlflow:
        mlflow["tracking_uri"] = _store_identity(mlflow["tracking_uri"])
    resolved = json.dumps(data, sort_keys=True, default=_plain)
    files = "\n".join(_file_digest(f) for f in _files_named(data))
    text = f"{resolved}\n{trace_sha256}\n{code_version()}\n{files}"
    return hashlib.sha256(text.encode()).hexdigest()


def entry_path(key: str, directory: str | Path | None = None) -> Path:
    return cache_dir(KIND, directory) / f"{key}.npz"


def save(key: str, report: Report, directory: str | Path | None = None) -> bool:
    """Store a finished job's report (False if the cache folder cannot be written)."""
    arrays, parts = {}, {}
    for i, (name, (num, den)) in enumerate(report.stream_parts.items()):
        arrays[f"p{i}_num"] = np.asarray(num)
        if den is not None:
            arrays[f"p{i}_den"] = np.asarray(den)
        parts[name] = i
    fields = {f.name: getattr(report, f.name) for f in dataclasses.fields(Report)}
    fields["intervals"] = {k: iv.to_dict() for k, iv in report.intervals.items()}
    fields["stream_parts"] = parts
    # encoded once, by the entry's header (a round trip through json first doubled the cost),
    # deflated at level 1: a 5,800-stream job's entry took 0.35 s of the main process, 40 of
    # them 14 s of a compare's one core
    return safecache.store(entry_path(key, directory), KIND, arrays, fields, default=_plain,
                           level=1)  # fmt: skip


def _decode(arrays: dict, meta: dict) -> Report:
    meta = dict(meta)
    meta["stream_parts"] = {
        name: (arrays[f"p{i}_num"], arrays.get(f"p{i}_den"))
        for name, i in meta["stream_parts"].items()
    }
    meta["intervals"] = {k: Interval.from_dict(d) for k, d in meta["intervals"].items()}
    return Report(**meta)


def load(key: str, directory: str | Path | None = None) -> Report | None:
    """The stored report of a finished job, or None (never stored, or discarded as damaged)."""
    return safecache.load(entry_path(key, directory), KIND, _decode)
