"""Which run folders the analytics page may read: only folders under the configured root.

Why a module of its own: this is the UI's security boundary for reads.  A run is named by its
path relative to the root; a name that is absolute, contains ``..``, or resolves (through
symlinks) outside the root is refused, whatever the rest of the server does with it.
"""

from __future__ import annotations

import json
import os
from pathlib import Path, PurePosixPath

MAX_DEPTH = 6  # how deep under the root run folders are looked for
MAX_RUNS = 2000


class RunAccessError(ValueError):
    """A run name the page may not read (outside the root, or not a run folder)."""


def resolve_run(root: Path, name: str) -> Path:
    """The run folder ``name`` (relative to ``root``), checked to lie under ``root``."""
    if not isinstance(name, str) or not name.strip():
        raise RunAccessError("run: empty run name")
    pure = PurePosixPath(name.replace("\\", "/"))
    if pure.is_absolute() or name.startswith(("/", "\\")) or ":" in pure.parts[0]:
        raise RunAccessError(
            f"run {name!r}: absolute paths are refused (name a run under the root)"
        )
    if ".." in pure.parts:
        raise RunAccessError(f"run {name!r}: '..' is refused")
    base = root.resolve()
    folder = (base / pure).resolve()
    if not folder.is_relative_to(base):
        raise RunAccessError(f"run {name!r}: resolves outside the root")
    if not (folder / "metrics.json").is_file():
        raise RunAccessError(f"run {name!r}: not a run folder (no metrics.json)")
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


def run_identity(folder: Path) -> dict:
    """The run's policy, budget and trace (from its metrics.json)."""
    with open(folder / "metrics.json", encoding="utf-8") as f:
        m = json.load(f)
    ov = m.get("overall", {})
    return {"policy": m.get("policy"), "budget": m.get("budget"), "trace": m.get("trace", {}),
            "hit_rate": ov.get("hit_rate"), "request_success": ov.get("request_success"),
            "overall": ov}  # fmt: skip


def local_runs(root: Path) -> list[dict]:
    """Run folders under ``root`` (not following symlinks), newest first."""
    base = root.resolve()
    out = []
    for dirpath, dirnames, filenames in os.walk(base):
        rel = Path(dirpath).relative_to(base)
        if len(rel.parts) >= MAX_DEPTH:
            dirnames[:] = []
        dirnames[:] = [d for d in dirnames if not d.startswith(".")]
        events = Path(dirpath) / "events.parquet"
        if "metrics.json" in filenames and events.is_file() and events.resolve().is_relative_to(
                base):  # fmt: skip
            try:
                ident = run_identity(Path(dirpath))
            except (OSError, ValueError):
                continue
            out.append({"run": rel.as_posix() or ".", "source": "local",
                        "mtime": os.stat(Path(dirpath) / "metrics.json").st_mtime,
                        "policy": ident["policy"], "budget": ident["budget"],
                        "trace_sha256": ident["trace"].get("sha256"),
                        "hit_rate": ident["hit_rate"]})  # fmt: skip
        if len(out) >= MAX_RUNS:
            break
    out.sort(key=lambda r: (-r["mtime"], r["run"]))
    return out


def mlflow_runs(uri: str | None, root: Path) -> tuple[list[dict], str | None]:
    """Runs in an MLflow SQLite tracking store (never created here: a missing file lists
    nothing).  A run can be opened when its artifacts (events.parquet) lie under the root."""
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
        local = Path(art[len("file://") :] if art.startswith("file://") else art).resolve()
        openable = local.is_relative_to(base) and (local / "events.parquet").is_file() and (
            local / "metrics.json").is_file()  # fmt: skip
        out.append({"run": local.relative_to(base).as_posix() if openable else None,
                    "source": "mlflow", "mlflow_run_id": r.info.run_id,
                    "name": r.info.run_name, "policy": r.data.params.get("policy"),
                    "budget": r.data.params.get("budget"),
                    "hit_rate": r.data.metrics.get("hit_rate")})  # fmt: skip
    return out, None
