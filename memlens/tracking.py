"""MLflow records of every run.

Defaults to a SQLite store in the working directory (``sqlite:///mlflow.db``): MLflow 3 refuses
a plain ``./mlruns`` file store unless told otherwise, and SQLite keeps every run of a sweep
in one queryable file.  Any tracking URI (a server on 127.0.0.1, ...) can be configured, and
``mlflow.enabled=false`` turns recording off.  A run that raises is closed as FAILED by
MLflow's own context manager, never left RUNNING.
"""

from __future__ import annotations

import contextlib
import logging
import math
import os
from collections.abc import Iterator
from pathlib import Path

from omegaconf import DictConfig, OmegaConf


def _flatten(d: dict, prefix: str = "") -> dict[str, object]:
    out: dict[str, object] = {}
    for k, v in d.items():
        key = f"{prefix}{k}"
        if isinstance(v, dict):
            out.update(_flatten(v, key + "."))
        else:
            out[key] = v
    return out


def loggable_metrics(metrics: dict) -> dict[str, float]:
    """Numeric, finite entries only (MLflow rejects None and strings)."""
    out = {}
    for k, v in _flatten(metrics).items():
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            continue
        if math.isfinite(v):
            out[k] = float(v)
    return out


@contextlib.contextmanager
def mlflow_run(
    cfg: DictConfig, run_name: str, nested: bool = False, tags: dict | None = None
) -> Iterator[object | None]:
    """Start an MLflow run if ``cfg.mlflow.enabled``; yields the run (or None when disabled)."""
    if not cfg.mlflow.enabled:
        yield None
        return
    os.environ.setdefault("MLFLOW_ENABLE_ASYNC_LOGGING", "false")
    logging.getLogger("alembic").setLevel(logging.WARNING)
    import mlflow

    mlflow.set_tracking_uri(cfg.mlflow.tracking_uri)
    if not nested or mlflow.active_run() is None:
        experiment = mlflow.get_experiment_by_name(cfg.mlflow.experiment)
        if experiment is None:
            artifact_root = cfg.mlflow.get("artifact_location")
            if artifact_root:
                artifact_root = Path(artifact_root).resolve().as_uri()
            mlflow.create_experiment(cfg.mlflow.experiment, artifact_location=artifact_root)
        mlflow.set_experiment(cfg.mlflow.experiment)
    with mlflow.start_run(run_name=run_name, nested=nested, tags=tags or {}) as run:
        yield run


def log_run(params: dict, metrics: dict, artifacts: list[Path], config: DictConfig | None = None):
    """Log params, metrics and files to the active MLflow run (no-op when there is none)."""
    import mlflow

    if mlflow.active_run() is None:
        return
    flat = {k: ("null" if v is None else v) for k, v in _flatten(params).items()}
    mlflow.log_params({k: str(v)[:500] for k, v in flat.items()})
    mlflow.log_metrics(loggable_metrics(metrics))
    if config is not None:
        mlflow.log_text(OmegaConf.to_yaml(config, resolve=True), "resolved_config.yaml")
    for path in artifacts:
        if Path(path).exists():
            mlflow.log_artifact(str(path))
