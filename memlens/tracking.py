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

from memlens.registry import declared
from memlens.report import Report
from memlens.settings import MlflowConfig


def _flatten(d: dict, prefix: str = "") -> dict[str, object]:
    out: dict[str, object] = {}
    for k, v in d.items():
        key = f"{prefix}{k}"
        if isinstance(v, dict):
            out.update(_flatten(v, key + "."))
        else:
            out[key] = v
    return out


def loggable_metrics(values: dict) -> dict[str, float]:
    """Registered, numeric, finite entries only (MLflow rejects None and strings)."""
    out = {}
    for k, v in values.items():
        if k not in declared() or isinstance(v, bool) or not isinstance(v, (int, float)):
            continue
        if math.isfinite(v):
            out[k] = float(v)
    return out


def report_params(report: Report) -> dict:
    """The parameters every run logs (simulate and compare jobs alike)."""
    return {
        "trace": report.trace["path"],
        "trace_sha256": report.trace["sha256"],
        "policy": report.policy,
        "policy_cfg": report.policy_config,
        "budget": report.budget,
        "demand_fetch": report.demand_fetch,
        "seed": report.seed,
        "memlens_version": report.memlens_version,
        "git_commit": report.git_commit,
        "schema_version": report.schema_version,
    }


@contextlib.contextmanager
def mlflow_run(
    cfg: MlflowConfig, run_name: str, nested: bool = False, tags: dict | None = None
) -> Iterator[object | None]:
    """Start an MLflow run if ``cfg.enabled``; yields the run (or None when disabled)."""
    if not cfg.enabled:
        yield None
        return
    os.environ.setdefault("MLFLOW_ENABLE_ASYNC_LOGGING", "false")
    logging.getLogger("alembic").setLevel(logging.WARNING)
    import mlflow

    mlflow.set_tracking_uri(cfg.tracking_uri)
    if not nested or mlflow.active_run() is None:
        experiment = mlflow.get_experiment_by_name(cfg.experiment)
        if experiment is None:
            artifact_root = cfg.artifact_location
            if artifact_root:
                artifact_root = Path(artifact_root).resolve().as_uri()
            mlflow.create_experiment(cfg.experiment, artifact_location=artifact_root)
        mlflow.set_experiment(cfg.experiment)
    with mlflow.start_run(run_name=run_name, nested=nested, tags=tags or {}) as run:
        yield run


def log_run(
    params: dict, metrics: dict, artifacts: list[Path] = (), config_yaml: str | None = None
):
    """Log params, metrics and files to the active MLflow run (no-op when there is none)."""
    import mlflow

    if mlflow.active_run() is None:
        return
    flat = {k: ("null" if v is None else v) for k, v in _flatten(params).items()}
    mlflow.log_params({k: str(v)[:500] for k, v in flat.items()})
    mlflow.log_metrics(loggable_metrics(metrics))
    if config_yaml is not None:
        mlflow.log_text(config_yaml, "resolved_config.yaml")
    for path in artifacts:
        if Path(path).exists():
            mlflow.log_artifact(str(path))


def interval_metrics(report: Report) -> dict[str, float]:
    """``<metric>_ci_low`` / ``<metric>_ci_high`` of every metric that has an interval."""
    out = {}
    for key, iv in report.intervals.items():
        if iv.low is not None and key in declared():
            out[f"{key}_ci_low"], out[f"{key}_ci_high"] = float(iv.low), float(iv.high)
    return out


def log_report(report: Report, artifacts: list[Path] = (), config_yaml: str | None = None):
    """One run's report: its parameters, every registered overall and timing metric, and the
    bounds of every interval over streams."""
    import mlflow

    log_run(report_params(report), {**report.overall, **report.timing}, artifacts, config_yaml)
    bounds = interval_metrics(report)
    if bounds and mlflow.active_run() is not None:
        mlflow.log_metrics(bounds)
