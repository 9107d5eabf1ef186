"""MLflow records of every run, and why a tracking fault never costs a replay.

Defaults to a SQLite store in the working directory (``sqlite:///mlflow.db``): MLflow 3 refuses
a plain ``./mlruns`` file store unless told otherwise, and SQLite keeps every run of a sweep
in one queryable file.  Any tracking URI (a server on 127.0.0.1, ...) can be configured, and
``mlflow.enabled=false`` turns recording off.  The store is reached through
``memlens.runs.mlflow_store`` (one migration under a lock, retries on a locked database, runs left
RUNNING by dead processes ended as KILLED).

A run ends FINISHED, FAILED when its body raises, and KILLED when SIGTERM/SIGINT stop it
(``memlens.runs.interrupts``).  The replay comes first, tracking second: any error from MLflow (a
server that does not answer, a database still locked after the retries) becomes one
``warning: MLflow tracking failed: ...`` line, the process stops talking to that store, and the
run's files are written all the same.  The exit code says so only when asked:
``mlflow.required=true`` makes the command exit 3 after its files are written.
"""

from __future__ import annotations

import contextlib
import math
import re
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from memlens.analyze.registry import declared
from memlens.analyze.report import Report
from memlens.config.schema import MlflowConfig
from memlens.runs import mlflow_store as store
from memlens.runs.interrupts import signals_held

#: Exit code of a command whose files were written but whose tracking failed, when
#: ``mlflow.required=true``.
TRACKING_FAILED_EXIT = 3
#: Tag naming a simulate run's own folder (its events.parquet), so ``memlens ui`` can open an
#: MLflow run whose artifacts lie elsewhere (an ``mlartifacts/`` outside the page's root).
RUN_DIR_TAG = "memlens.run_dir"


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


_USERINFO = re.compile(r"//[^/@\s]*@")  # user:password@ in a URI: never printed
_failed: dict[str, str] = {}  # tracking URI -> the first error (one warning per store)
_swept: set[tuple[str, str]] = set()  # (URI, experiment) whose dead runs were looked for


def tracking_failed(cfg: MlflowConfig) -> str | None:
    """The error that stopped tracking to ``cfg.tracking_uri`` in this process, if any."""
    return _failed.get(cfg.tracking_uri) if cfg.enabled else None


def _guard(uri: str, fn: Callable, *args, **kwargs):
    """``fn`` (whose store calls retry on a locked database); an error becomes the warning."""
    if uri in _failed:
        return None
    try:
        with signals_held():  # never stopped inside MLflow: its database session stays clean
            return fn(*args, **kwargs)
    except Exception as exc:
        lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
        first = _USERINFO.sub("//", f"{type(exc).__name__}: {lines[0] if lines else ''}")
        _failed[uri] = first if len(first) <= 240 else first[:237] + "..."
        shown = _USERINFO.sub("//", uri)
        print(f"warning: MLflow tracking failed: {_failed[uri]} (tracking to {shown} is off for "
              "this process; the run's files are written as usual)", file=sys.stderr)  # fmt: skip
        return None


@dataclass(frozen=True)
class Tracked:
    """An MLflow run this process started (ids only: no global "active run" state)."""

    cfg: MlflowConfig
    client: object
    run_id: str


def _create(cfg: MlflowConfig, run_name: str, parent: Tracked | None, tags: dict) -> Tracked:
    from mlflow.tracking.context import registry

    client, experiment_id = store.open_store(cfg)
    if (cfg.tracking_uri, cfg.experiment) not in _swept:
        _swept.add((cfg.tracking_uri, cfg.experiment))
        ended = store.end_dead_runs(client, experiment_id)
        if ended:
            print(f"warning: MLflow: ended as KILLED {len(ended)} run(s) left RUNNING by "
                  f"processes that are gone: {', '.join(ended)}", file=sys.stderr)  # fmt: skip
    tags = {**store.process_tags(), **tags}
    if parent is not None:
        tags["mlflow.parentRunId"] = parent.run_id
    tags = registry.resolve_tags(tags)  # user, source: what mlflow.start_run would add
    run = store.retry(client.create_run, experiment_id, run_name=run_name, tags=tags)
    return Tracked(cfg, client, run.info.run_id)


@contextlib.contextmanager
def mlflow_run(
    cfg: MlflowConfig, run_name: str, parent: Tracked | None = None, tags: dict | None = None
) -> Iterator[Tracked | None]:
    """An MLflow run (a child of ``parent`` if given) for the block; None when tracking is off
    or has failed.  Ends FINISHED, FAILED if the block raises, KILLED on SIGTERM/SIGINT."""
    run, status = None, "FAILED"
    try:
        with signals_held():  # a signal while the run is created waits, so the run is ended
            if cfg.enabled:
                run = _guard(cfg.tracking_uri, _create, cfg, run_name, parent, tags or {})
        yield run
        status = "FINISHED" if cfg.tracking_uri not in _failed else "FAILED"
    except KeyboardInterrupt:  # SIGINT, or SIGTERM through memlens.runs.interrupts
        status = "KILLED"
        raise
    finally:
        if run is not None:  # after a tracking failure: one last try, no second warning
            with contextlib.suppress(Exception), signals_held():
                store.retry(run.client.set_terminated, run.run_id, status)


#: MLflow's limits on one ``log_batch`` call: params, metrics, and entities in all.
MAX_BATCH_PARAMS, MAX_BATCH_METRICS, MAX_BATCH_ENTITIES = 100, 1000, 1000


def batches(params: list, metrics: list) -> Iterator[tuple[list, list]]:
    """(params, metrics) for each ``log_batch`` call: as few calls as MLflow's limits allow,
    so a run's values cost one store transaction (one SQLite commit) rather than one per value
    or per kind; a run of the usual size (tens of each) is one call."""
    p = m = 0
    while p < len(params) or m < len(metrics):
        n_params = min(MAX_BATCH_PARAMS, len(params) - p)
        n_metrics = min(MAX_BATCH_METRICS, MAX_BATCH_ENTITIES - n_params, len(metrics) - m)
        yield params[p : p + n_params], metrics[m : m + n_metrics]
        p, m = p + n_params, m + n_metrics


def _log(run: Tracked, params: dict, metrics: dict[str, float], artifacts, config_yaml) -> None:
    from mlflow.entities import Metric, Param

    stamp = int(time.time() * 1000)
    flat = {k: ("null" if v is None else v) for k, v in _flatten(params).items()}
    params = [Param(k, str(v)[:500]) for k, v in flat.items()]
    metrics = [Metric(k, v, stamp, 0) for k, v in metrics.items()]
    for param_batch, metric_batch in batches(params, metrics):
        store.retry(run.client.log_batch, run.run_id, metrics=metric_batch, params=param_batch)
    if config_yaml is not None:
        store.retry(run.client.log_text, run.run_id, config_yaml, "resolved_config.yaml")
    for path in artifacts:
        if Path(path).exists():
            store.retry(run.client.log_artifact, run.run_id, str(path))


def log_run(
    run: Tracked | None,
    params: dict,
    metrics: dict,
    artifacts: list[Path] = (),
    config_yaml: str | None = None,
) -> None:
    """Log params, metrics and files to ``run`` (no-op when it is None or tracking failed)."""
    if run is not None:
        metrics = loggable_metrics(metrics)
        _guard(run.cfg.tracking_uri, _log, run, params, metrics, artifacts, config_yaml)


def exit_if_required(cfg: MlflowConfig, out_dir: Path) -> None:
    """Exit 3 if tracking failed and ``mlflow.required=true`` (the files are written by now)."""
    if cfg.required and tracking_failed(cfg):
        print(f"error: MLflow tracking failed and mlflow.required=true (exit "
              f"{TRACKING_FAILED_EXIT}); the run's files are in {out_dir}", file=sys.stderr)  # fmt: skip
        raise SystemExit(TRACKING_FAILED_EXIT)


def interval_metrics(report: Report) -> dict[str, float]:
    """``<metric>_ci_low`` / ``<metric>_ci_high`` of every metric that has an interval."""
    out = {}
    for key, iv in report.intervals.items():
        if iv.low is not None and key in declared():
            out[f"{key}_ci_low"], out[f"{key}_ci_high"] = float(iv.low), float(iv.high)
    return out


def log_report(run: Tracked | None, report: Report, artifacts: list[Path] = (),
               config_yaml: str | None = None) -> None:  # fmt: skip
    """One run's report: its parameters, every registered overall and timing metric, and the
    bounds of every interval over streams."""
    if run is not None:
        metrics = {**loggable_metrics({**report.overall, **report.timing}),
                   **interval_metrics(report)}  # fmt: skip
        params = report_params(report)
        _guard(run.cfg.tracking_uri, _log, run, params, metrics, artifacts, config_yaml)
