"""Bodies of the Hydra subcommands ``simulate`` and ``compare``: thin loops over the pipeline.

``simulate`` is one pass of ``memlens.pipeline.run``.  ``compare`` composes each of its jobs
exactly as ``memlens simulate trace=T policy=P budget=B <policy overrides>`` would (the same
Hydra composition of the policy node, the same typed settings) and runs the same pass, so the
two commands give identical numbers for identical settings.
"""

from __future__ import annotations

import sys
from dataclasses import fields
from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from memlens.atomic import write_json, write_text
from memlens.config import SettingsError, policy_config, registered_policies
from memlens.pipeline import load_trace, run
from memlens.registry import report_columns, summary_columns
from memlens.settings import CommonConfig, CompareConfig, RunConfig, build_policy, resolve
from memlens.table import format_table, to_csv
from memlens.trace_io import TraceError


def job_settings(common: CommonConfig, trace: str, policy, budget: int) -> RunConfig:
    """One compare job's settings: the shared settings plus its trace, policy and budget."""
    shared = {f.name: getattr(common, f.name) for f in fields(CommonConfig)}
    return RunConfig(**{**shared, "trace": trace}, policy=policy, budget=budget)


def check_policy_builds(policy_cfg) -> None:
    try:
        build_policy(policy_cfg)
    except (TypeError, ValueError) as exc:
        raise SettingsError(f"cannot build policy {policy_cfg._target_}: {exc}") from None


def check_simulate(cfg: DictConfig) -> None:
    """Everything ``simulate`` can check before it starts (raises on the first problem)."""
    check_policy_builds(resolve(cfg).policy)


def check_compare(cfg: DictConfig) -> None:
    settings: CompareConfig = resolve(cfg)
    for name in settings.policies or registered_policies():
        check_policy_builds(policy_config(name, settings.policy_overrides))


def _run_dir() -> Path:
    from hydra.core.hydra_config import HydraConfig

    return Path(HydraConfig.get().runtime.output_dir)


def _load(settings: CommonConfig, path: str | None = None):
    try:
        return load_trace(settings, path)
    except TraceError as err:
        print(f"error: {err}", file=sys.stderr)
        raise SystemExit(2) from None


def warn(messages: list[str]) -> None:
    for m in messages:
        print(f"warning: {m}", file=sys.stderr)


def simulate_task(cfg: DictConfig):
    """``memlens simulate``: one pass of the pipeline, records in the Hydra run dir."""
    from memlens.tracking import log_report, mlflow_run
    from memlens.writers import write_run

    settings: RunConfig = resolve(cfg)
    trace = _load(settings)
    out_dir = _run_dir()
    resolved_yaml = OmegaConf.to_yaml(cfg, resolve=True)
    label = f"{settings.policy._target_.rsplit('.', 1)[-1]}@{settings.budget}"
    with mlflow_run(settings.mlflow, run_name=label) as tracking:
        done, report = run(settings, trace)
        paths = write_run(out_dir, done, report, resolved_yaml)
        if tracking is not None:
            log_report(report, paths)
    columns = ["policy", "budget", *summary_columns(settings.retrieval.enabled)]
    print(format_table([report.row()], columns))
    t = report.timing
    rate = "-" if t["events_per_s"] is None else f"{t['events_per_s']:,.0f}"
    print(f"\n{report.overall['events']} events in {t['wall_s']:.3f} s "
          f"({rate} events/s, {t['engine']} engine); records in {out_dir}")  # fmt: skip
    warn(report.warnings)
    return report


def compare_jobs(settings: CompareConfig):
    """(trace path, policy name, typed policy config, budget) for every job, in table order."""
    names = settings.policies or registered_policies()
    policies = {n: policy_config(n, settings.policy_overrides) for n in names}
    for path in settings.traces or [settings.trace]:
        for name in names:
            for budget in settings.budgets:
                yield path, name, policies[name], budget


def compare_task(cfg: DictConfig) -> list[dict]:
    """``memlens compare``: every (trace, policy, budget) through the pipeline, one table."""
    from memlens.tracking import log_report, log_run, mlflow_run

    settings: CompareConfig = resolve(cfg)
    jobs = list(compare_jobs(settings))
    for path in dict.fromkeys(job[0] for job in jobs):
        _load(settings, path)  # every trace validated before any job runs
    out_dir = _run_dir()
    rows: list[dict] = []
    with mlflow_run(settings.mlflow, run_name="compare") as parent:
        for path, name, policy, budget in jobs:
            job = job_settings(settings, path, policy, budget)
            with mlflow_run(settings.mlflow, run_name=f"{name}@{budget}", nested=True) as child:
                _, report = run(job, _load(job))
                if child is not None:
                    log_report(report)
            warn([f"{name}@{budget}: {w}" for w in report.warnings])
            rows.append({**report.row(), "policy": name})
        columns = ["trace", "policy", "budget", *report_columns()]
        write_text(out_dir / "compare.csv", to_csv(rows, columns))
        write_json(out_dir / "compare.json", [{c: r.get(c) for c in columns} for r in rows])
        if parent is not None:
            log_run({"traces": settings.traces or [settings.trace], "budgets": settings.budgets,
                     "policies": settings.policies or registered_policies(),
                     "policy_overrides": settings.policy_overrides}, {},
                    [out_dir / "compare.csv"], OmegaConf.to_yaml(cfg, resolve=True))  # fmt: skip
    shown = ["trace", "policy", "budget", *summary_columns(settings.retrieval.enabled)]
    print(format_table(rows, shown))
    print(f"\ntable written to {out_dir / 'compare.csv'}")
    return rows
