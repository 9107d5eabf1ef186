"""Which run folders the analytics page may read: only folders under the configured root.

Why a module of its own: this is the UI's security boundary for reads.  A run is named by its
path relative to the root (``.``: the root itself); a name that is absolute, contains ``..``,
or resolves (through symlinks) outside the root is refused, and so is a run file
(``metrics.json``, ``events.parquet``, ``resolved_config.yaml``) that resolves outside it,
whatever the rest of the server does with it.  A run folder's files are data: a
``metrics.json`` that is not shaped like a report is a :class:`RunFileError` (a 4xx), and a
listing leaves such a folder out, naming it, rather than failing for every run.  Paths a run
folder names (its trace, a model) are :func:`contained` under the folders the page may read.
"""

from __future__ import annotations

import json
import os
from pathlib import Path, PurePosixPath

MAX_DEPTH = 6  # how deep under the root run folders are looked for
MAX_RUNS = 2000
#: The largest ``metrics.json`` read (a report of 10,000 streams is a few megabytes).
MAX_METRICS_BYTES = 64 << 20


class RunAccessError(ValueError):
    """A run name the page may not read (outside the root, or not a run folder)."""


class RunFileError(ValueError):
    """A run folder the page may read whose files are damaged or wrongly shaped (a 4xx, never
    a 500: it is the folder that is bad, not the request or the server)."""


def first_line(exc: BaseException, limit: int = 200) -> str:
    """The first line of an exception's message (its type when it has none), cut to ``limit``:
    what an error answer of the page says about a file it could not use."""
    lines = str(exc).strip().splitlines()
    return (lines[0].strip() if lines else type(exc).__name__)[:limit]


def _relative(name: str) -> PurePosixPath:
    """``name`` as a relative path with no ``..`` (``.`` or ``./``: the root itself)."""
    if not isinstance(name, str) or not name.strip():
        raise RunAccessError("run: empty run name")
    pure = PurePosixPath(name.replace("\\", "/"))
    first = pure.parts[0] if pure.parts else ""
    if pure.is_absolute() or name.startswith(("/", "\\")) or ":" in first:
        raise RunAccessError(
            f"run {name!r}: absolute paths are refused (name a run under the root)"
        )
    if ".." in pure.parts:
        raise RunAccessError(f"run {name!r}: '..' is refused")
    return pure


def resolve_run(root: Path, name: str) -> Path:
    """The run folder ``name`` (relative to ``root``), checked to lie under ``root``, with a
    ``metrics.json`` that lies under it too (a symlink out of the root is refused)."""
    pure = _relative(name)
    base = root.resolve()
    folder = (base / pure).resolve()
    if not folder.is_relative_to(base):
        raise RunAccessError(f"run {name!r}: resolves outside the root")
    metrics = folder / "metrics.json"
    if not metrics.is_file():
        raise RunAccessError(f"run {name!r}: not a run folder (no metrics.json)")
    if not metrics.resolve().is_relative_to(base):
        raise RunAccessError(f"run {name!r}: metrics.json resolves outside the root")
    return folder


def run_file(root: Path, name: str, file: str) -> Path:
    """A file of a run (``events.parquet`` ...), itself checked to lie under the root (a
    symlinked file pointing elsewhere is refused)."""
    folder = resolve_run(root, name)
    path = (folder / file).resolve()
    if not path.is_relative_to(root.resolve()):
        raise RunAccessError(f"run {name!r}: {file} resolves outside the root")
    if not path.is_file():
        raise RunAccessError(f"run {name!r}: no {file} (run it with events.enabled=true)")
    return path


def read_metrics(folder: Path) -> dict:
    """A run's ``metrics.json``, checked to have the shape of a report: an object whose
    ``trace`` and ``overall`` are objects (one wrongly shaped file must not break a listing)."""
    path = folder / "metrics.json"
    try:
        if path.stat().st_size > MAX_METRICS_BYTES:
            raise RunFileError(f"{folder.name}/metrics.json: larger than "
                               f"{MAX_METRICS_BYTES >> 20} MiB")  # fmt: skip
        with open(path, encoding="utf-8") as f:
            m = json.load(f)
    except (OSError, UnicodeDecodeError, json.JSONDecodeError, RecursionError) as exc:
        raise RunFileError(f"{folder.name}/metrics.json: cannot be read "
                           f"({type(exc).__name__}: {first_line(exc, 120)})") from None  # fmt: skip
    if not isinstance(m, dict):
        raise RunFileError(f"{folder.name}/metrics.json: not a JSON object")
    for key in ("trace", "overall"):
        if not isinstance(m.get(key, {}), dict):
            raise RunFileError(f"{folder.name}/metrics.json: field {key!r} must be an object")
    trace = m.get("trace", {})
    for key in ("path", "sha256"):
        if key in trace and not isinstance(trace[key], str):
            raise RunFileError(f"{folder.name}/metrics.json: field 'trace.{key}' must be text")
    return m


def run_identity(folder: Path) -> dict:
    """The run's policy, budget and trace (from its metrics.json)."""
    m = read_metrics(folder)
    ov = m.get("overall", {})
    return {"policy": m.get("policy"), "budget": m.get("budget"), "trace": m.get("trace", {}),
            "hit_rate": ov.get("hit_rate"), "request_success": ov.get("request_success"),
            "overall": ov}  # fmt: skip


def _listed(base: Path, folder: Path) -> dict:
    """One run of the listing (a :class:`RunFileError` if its files cannot be listed)."""
    events = folder / "events.parquet"
    for path in (folder / "metrics.json", events):
        if not path.resolve().is_relative_to(base):
            raise RunFileError(f"{path.name} resolves outside the root")
    ident = run_identity(folder)
    return {"run": folder.relative_to(base).as_posix() or ".", "source": "local",
            "mtime": os.stat(folder / "metrics.json").st_mtime,
            "policy": ident["policy"], "budget": ident["budget"],
            "trace_sha256": ident["trace"].get("sha256"), "hit_rate": ident["hit_rate"],
            "trace": PurePosixPath(str(ident["trace"].get("path", ""))).name}  # fmt: skip


def local_runs(root: Path, problems: list | None = None) -> list[dict]:
    """Run folders under ``root`` (not following symlinks), newest first.  A folder whose
    files cannot be listed is left out (and, given ``problems``, named there with why), so one
    bad folder never hides the others."""
    base = root.resolve()
    out = []
    for dirpath, dirnames, filenames in os.walk(base):
        rel = Path(dirpath).relative_to(base)
        if len(rel.parts) >= MAX_DEPTH:
            dirnames[:] = []
        dirnames[:] = [d for d in dirnames if not d.startswith(".")]
        if "metrics.json" not in filenames or "events.parquet" not in filenames:
            continue
        try:
            out.append(_listed(base, Path(dirpath)))
        except (OSError, ValueError) as exc:
            if problems is not None:
                problems.append({"run": rel.as_posix() or ".", "error": str(exc)})
        if len(out) >= MAX_RUNS:
            break
    out.sort(key=lambda r: (-r["mtime"], r["run"]))
    return out


def contained(path: str, roots: list[Path], what: str) -> Path:
    """``path`` (a trace or model a run folder names), resolved through symlinks, if it lies
    under one of ``roots``; else a :class:`RunAccessError` (a run folder must not make the
    page read or replay a file anywhere on disk)."""
    try:
        where = Path(path).expanduser().resolve()
    except (OSError, RuntimeError, ValueError) as exc:
        raise RunAccessError(f"{what} {path!r}: cannot be resolved ({exc})") from None
    if not any(where.is_relative_to(r.resolve()) for r in roots):
        raise RunAccessError(f"{what} {path}: lies outside the page's root, the run's folder "
                             "and the bundled datasets (ui setting trace_roots adds folders)")  # fmt: skip
    return where


def _openable(base: Path, folder: Path) -> Path | None:
    """``folder`` resolved, if it lies under ``base`` and holds a run's events and metrics."""
    try:
        local = folder.resolve()
    except (OSError, RuntimeError, ValueError):
        return None
    ok = local.is_relative_to(base) and (local / "events.parquet").is_file() and (
        local / "metrics.json").is_file()  # fmt: skip
    return local if ok else None


def mlflow_runs(uri: str | None, root: Path) -> tuple[list[dict], str | None]:
    """Runs in an MLflow SQLite tracking store (never created here: a missing file lists
    nothing).  A run can be opened when its artifacts (events.parquet) lie under the root, or
    else the run folder that ``memlens simulate`` wrote (its ``memlens.run_dir`` tag) does."""
    from memlens.runs.tracking import RUN_DIR_TAG

    if not uri:
        return [], None
    if not uri.startswith("sqlite:///"):
        return [], f"mlflow: only sqlite:/// tracking URIs are read, got {uri}"
    db = Path(uri[len("sqlite:///") :])
    if not db.is_file():
        return [], None
    try:
        from mlflow.tracking import MlflowClient

        client = MlflowClient(tracking_uri=uri)
        exps = [e.experiment_id for e in client.search_experiments()]
        runs = client.search_runs(exps, max_results=500) if exps else []
    except Exception as exc:  # noqa: BLE001 - a broken store must not break the page
        return [], f"mlflow: {type(exc).__name__}: {exc}"
    base = root.resolve()
    out = []
    for r in runs:
        art = r.info.artifact_uri or ""
        local = _openable(base, Path(art[len("file://") :] if art.startswith("file://") else art))
        if local is None and r.data.tags.get(RUN_DIR_TAG):  # the run's own folder, if under root
            local = _openable(base, Path(r.data.tags[RUN_DIR_TAG]))
        out.append({"run": local.relative_to(base).as_posix() if local else None,
                    "source": "mlflow", "mlflow_run_id": r.info.run_id,
                    "name": r.info.run_name, "policy": r.data.params.get("policy"),
                    "budget": r.data.params.get("budget"),
                    "trace": PurePosixPath(str(r.data.params.get("trace", ""))).name or None,
                    "hit_rate": r.data.metrics.get("hit_rate")})  # fmt: skip
    return out, None
