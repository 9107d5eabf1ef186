"""One replay from a resolved config to its records: the body of ``memlens simulate``.

Kept separate from the CLI so that notebooks, experiments and tests run exactly what the
command line runs.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from omegaconf import DictConfig, OmegaConf

from memlens.atomic import atomic_path, write_json, write_text
from memlens.config import make_policy
from memlens.metrics import compute_metrics, per_request_table
from memlens.oracle import report as oracle_report
from memlens.retrieval.assemble import RetrievalRecord, retrieve_post_hoc
from memlens.retrieval.setup import (
    build_retriever,
    live_hook,
    retrieval_section,
    stored_tokens_saved,
)
from memlens.simulator import SimResult, simulate
from memlens.tiers import TIER_NAMES, TierLog, replay_tiers
from memlens.trace import Trace
from memlens.trace_cache import load_trace_cached

_TRACE_CACHE: dict[str, Trace] = {}


def get_trace(path: str, disk_cache: bool = True) -> Trace:
    """Load and validate a trace once per process (and, with ``disk_cache``, once per file
    content across processes: ``memlens.trace_cache``)."""
    key = str(Path(path).resolve())
    if key not in _TRACE_CACHE:
        _TRACE_CACHE[key] = load_trace_cached(path, enabled=disk_cache)
    return _TRACE_CACHE[key]


@dataclass
class RunOutcome:
    trace: Trace
    result: SimResult
    tiers: TierLog
    metrics: dict
    policy_name: str
    retrieval: RetrievalRecord | None = None


def replay(cfg: DictConfig, trace: Trace, policy_cfg: DictConfig, budget: int) -> RunOutcome:
    """Replay one (trace, policy, budget) and compute everything metrics.json reports."""
    policy = make_policy(policy_cfg)
    oracle_settings = oracle_report.prepare(cfg, policy)  # before the replay: policy=oracle uses it
    retriever = build_retriever(cfg, trace)  # None unless retrieval.enabled
    hook = live_hook(cfg, retriever)  # retrieval inside the replay (promotion, reference engine)
    result = simulate(
        trace,
        policy,
        budget=int(budget),
        demand_fetch=bool(cfg.demand_fetch),
        seed=int(cfg.seed),
        engine=str(cfg.engine),
        progress=cfg.get("progress"),
        hook=hook,
    )
    record = None
    if retriever is not None:
        record = (
            retriever.record() if hook is not None else retrieve_post_hoc(trace, result, retriever)
        )
    metrics = compute_metrics(
        trace, result, price_per_mtok=float(cfg.price_per_mtok), retrieval=record
    )
    oracle_report.add_to_metrics(
        metrics, trace, int(budget), bool(cfg.demand_fetch), policy, result, oracle_settings
    )
    if record is not None:
        tiers = record.tiers
    else:
        tiers = replay_tiers(
            trace,
            result,
            short_term_tokens=int(cfg.tiers.short_term_tokens),
            ttl_s=cfg.tiers.get("ttl_s"),
        )
    warnings = []
    over = metrics["overall"]["pins_over_budget_requests"]
    if over:
        warnings.append(
            f"pinned items alone exceeded the budget of {budget} tokens at {over} request(s)"
        )
    finals = np.bincount(tiers.final_tier + 1, minlength=4)
    metrics = {
        "trace": {
            "path": trace.source,
            "sha256": trace.sha256,
            "events": trace.n_events,
            "streams": trace.n_streams,
        },
        "policy": policy.name,
        "budget": int(budget),
        "demand_fetch": bool(cfg.demand_fetch),
        "seed": int(cfg.seed),
        **metrics,
        "tiers": {
            "moves": tiers.counts(),
            "items_at_end": {TIER_NAMES[k - 1]: int(finals[k]) for k in range(1, 4)},
            "compression_stored_tokens_saved": stored_tokens_saved(cfg, trace, tiers),
        },
        "retrieval": retrieval_section(record),
        "outside_oracle_class": bool(
            getattr(policy, "outside_oracle_class", False)
            or result.extra.get("outside_oracle_class", False)
        ),
        "warnings": warnings,
    }
    return RunOutcome(trace, result, tiers, metrics, policy.name, record)


def write_parquet(path: Path, columns: dict) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    table = pa.table({k: (v if isinstance(v, list) else np.asarray(v)) for k, v in columns.items()})
    with atomic_path(path) as tmp:
        pq.write_table(table, tmp)


def write_outputs(out_dir: Path, cfg: DictConfig, outcome: RunOutcome) -> list[Path]:
    """metrics.json, per_request.parquet, moves.parquet and resolved_config.yaml, atomically."""
    out_dir.mkdir(parents=True, exist_ok=True)
    trace, tiers = outcome.trace, outcome.tiers
    paths = []
    write_parquet(
        out_dir / "per_request.parquet", per_request_table(trace, outcome.result, outcome.retrieval)
    )
    paths.append(out_dir / "per_request.parquet")
    if cfg.output.get("moves", True):
        names = np.asarray([TIER_NAMES[k] for k in (-1, 0, 1, 2)])
        write_parquet(
            out_dir / "moves.parquet",
            {
                "event": tiers.event,
                "item_id": [trace.item_id[i] for i in tiers.item.tolist()],
                "from": names[tiers.src.astype(np.int64) + 1].tolist(),
                "to": names[tiers.dst.astype(np.int64) + 1].tolist(),
            },
        )
        paths.append(out_dir / "moves.parquet")
    write_text(out_dir / "resolved_config.yaml", OmegaConf.to_yaml(cfg, resolve=True))
    paths.append(out_dir / "resolved_config.yaml")
    write_json(out_dir / "metrics.json", outcome.metrics)  # last: its presence means "complete"
    paths.append(out_dir / "metrics.json")
    return paths


def warn(messages: list[str]) -> None:
    for m in messages:
        print(f"warning: {m}", file=sys.stderr)
