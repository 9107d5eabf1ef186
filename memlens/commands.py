"""Bodies of the Hydra subcommands ``simulate`` and ``compare``."""

from __future__ import annotations

import sys
from pathlib import Path

from omegaconf import DictConfig

from memlens.atomic import write_json, write_text
from memlens.config import make_policy, policy_config, registered_policies
from memlens.report import format_table, to_csv
from memlens.run import get_trace, replay, warn, write_outputs
from memlens.trace_io import TraceError

SUMMARY_COLUMNS = [
    "hit_rate",
    "oracle_upper",
    "regret",
    "request_success",
    "mean_context_tokens",
    "p95_context_tokens",
    "false_eviction_rate",
    "evictions",
    "cost_usd",
]
RETRIEVAL_COLUMNS = [
    "context_recall",
    "retrieval_precision",
    "mean_context_tokens_total",
    "cost_usd_total",
]


def summary_columns(cfg: DictConfig) -> list[str]:
    """Metric columns to show: retrieval ones only when request-time retrieval is on."""
    retrieval = cfg.get("retrieval")
    extra = RETRIEVAL_COLUMNS if retrieval is not None and retrieval.get("enabled") else []
    return [*SUMMARY_COLUMNS, *extra]


def _run_dir() -> Path:
    from hydra.core.hydra_config import HydraConfig

    return Path(HydraConfig.get().runtime.output_dir)


def _load(path: str, cfg: DictConfig):
    try:
        return get_trace(path, disk_cache=bool(cfg.get("trace_cache", True)))
    except TraceError as err:
        print(f"error: {err}", file=sys.stderr)
        raise SystemExit(2) from None


def _fail(message: str) -> None:
    print(f"error: {message}", file=sys.stderr)
    raise SystemExit(2)


def _check_settings(cfg: DictConfig, budgets: list, policy_cfgs: list[DictConfig]) -> None:
    """Reject bad settings before anything runs or is written (exit code 2, one clear line)."""
    for b in budgets:
        if isinstance(b, bool) or not isinstance(b, int) or b <= 0:
            _fail(f"budget must be a positive integer number of tokens, got {b!r}")
    if cfg.engine not in ("auto", "fast", "reference"):
        _fail(f"engine must be auto, fast or reference, got {cfg.engine!r}")
    price = cfg.price_per_mtok
    if isinstance(price, bool) or not isinstance(price, (int, float)) or price < 0:
        _fail(f"price_per_mtok must be a non-negative number, got {price!r}")
    from memlens.oracle import OracleSettings
    from memlens.retrieval.assemble import RetrievalConfig

    try:
        RetrievalConfig.from_cfg(cfg)
        OracleSettings.make(cfg.get("oracle"))
    except (ValueError, TypeError) as exc:
        _fail(str(exc))
    for pcfg in policy_cfgs:
        try:
            make_policy(pcfg)
        except Exception as exc:  # hydra wraps constructor errors; show the cause, not a trace
            cause = exc.__cause__ or exc
            _fail(f"cannot build policy {pcfg.get('_target_')}: {cause}")


def simulate_task(cfg: DictConfig) -> dict:
    from memlens.tracking import log_run, mlflow_run

    _check_settings(cfg, [cfg.budget], [cfg.policy])
    trace = _load(cfg.trace, cfg)
    out_dir = _run_dir()
    label = f"{cfg.policy.get('_target_', '').rsplit('.', 1)[-1]}@{cfg.budget}"
    with mlflow_run(cfg, run_name=label) as run:
        outcome = replay(cfg, trace, cfg.policy, int(cfg.budget))
        paths = write_outputs(out_dir, cfg, outcome)
        if run is not None:
            params = {
                "trace": trace.source,
                "trace_sha256": trace.sha256,
                "policy": outcome.policy_name,
                "budget": int(cfg.budget),
                "demand_fetch": bool(cfg.demand_fetch),
                "seed": int(cfg.seed),
                "engine": str(cfg.engine),
                "policy_cfg": dict(cfg.policy),
            }
            log_run(params, {**outcome.metrics["overall"], **outcome.metrics["timing"]}, paths)
    m = outcome.metrics
    row = {"policy": outcome.policy_name, "budget": int(cfg.budget), **m["overall"]}
    print(format_table([row], ["policy", "budget", *summary_columns(cfg)]))
    print(
        f"\n{m['overall']['events']} events in {m['timing']['wall_s']:.3f} s "
        f"({m['timing']['events_per_s']:,.0f} events/s, {m['timing']['engine']} engine); "
        f"records in {out_dir}"
    )
    warn(m["warnings"])
    return m


def compare_task(cfg: DictConfig) -> list[dict]:
    from memlens.tracking import log_run, mlflow_run

    traces = list(cfg.traces) if cfg.get("traces") else [cfg.trace]
    policies = list(cfg.policies) if cfg.get("policies") else registered_policies()
    unknown = sorted(set(policies) - set(registered_policies()))
    if unknown:
        known = ", ".join(registered_policies())
        print(f"error: unknown policies {unknown} (registered: {known})", file=sys.stderr)
        raise SystemExit(2)
    out_dir = _run_dir()
    _check_settings(cfg, list(cfg.budgets), [policy_config(name) for name in policies])
    loaded = [_load(p, cfg) for p in traces]
    rows: list[dict] = []
    with mlflow_run(cfg, run_name="compare") as parent:
        for trace in loaded:
            for name in policies:
                pcfg = policy_config(name)
                for budget in cfg.budgets:
                    with mlflow_run(cfg, run_name=f"{name}@{budget}", nested=True) as child:
                        outcome = replay(cfg, trace, pcfg, int(budget))
                        m = outcome.metrics
                        if child is not None:
                            params = {
                                "trace": trace.source,
                                "trace_sha256": trace.sha256,
                                "policy": name,
                                "budget": int(budget),
                                "demand_fetch": bool(cfg.demand_fetch),
                                "seed": int(cfg.seed),
                            }
                            log_run(params, {**m["overall"], **m["timing"]}, [])
                    warn([f"{name}@{budget}: {w}" for w in m["warnings"]])
                    rows.append(
                        {
                            "trace": Path(trace.source).name,
                            "policy": name,
                            "budget": int(budget),
                            **m["overall"],
                            "events_per_s": m["timing"]["events_per_s"],
                        }
                    )
        columns = ["trace", "policy", "budget", *summary_columns(cfg), "events_per_s"]
        write_text(out_dir / "compare.csv", to_csv(rows, columns))
        write_json(out_dir / "compare.json", rows)
        if parent is not None:
            log_run(
                {"traces": traces, "policies": policies, "budgets": list(cfg.budgets)},
                {},
                [out_dir / "compare.csv"],
                config=cfg,
            )
    print(format_table(rows, columns))
    print(f"\ntable written to {out_dir / 'compare.csv'}")
    return rows
