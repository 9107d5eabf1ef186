"""Step 6 of the pipeline: a run's records on disk.

``metrics.json`` (the report), ``per_request.parquet``, ``moves.parquet`` (every tier move) and
``resolved_config.yaml``, each written atomically; metrics.json last, so its presence means the
run's records are complete.  MLflow logging is ``memlens.tracking``.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from memlens.atomic import atomic_path, write_json, write_text
from memlens.metrics import per_request_table
from memlens.pipeline import Replay
from memlens.report import Report
from memlens.tiers import TIER_NAMES


def write_parquet(path: Path, columns: dict) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    table = pa.table({k: (v if isinstance(v, list) else np.asarray(v)) for k, v in columns.items()})
    with atomic_path(path) as tmp:
        pq.write_table(table, tmp)


def moves_table(run: Replay) -> dict:
    tiers, item_id = run.tiers, run.trace.item_id
    names = np.asarray([TIER_NAMES[k] for k in (-1, 0, 1, 2)])
    return {
        "event": tiers.event,
        "item_id": [item_id[i] for i in tiers.item.tolist()],
        "from": names[tiers.src.astype(np.int64) + 1].tolist(),
        "to": names[tiers.dst.astype(np.int64) + 1].tolist(),
    }


def write_run(out_dir: Path, run: Replay, report: Report, resolved_yaml: str) -> list[Path]:
    """Every record of one run, in ``out_dir``; returns the paths written."""
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = [out_dir / "per_request.parquet"]
    s = run.settings
    write_parquet(paths[0], per_request_table(run.trace, run.result, run.retrieval,
                                              s.price_per_mtok, s.costs))  # fmt: skip
    if run.settings.output.moves:
        paths.append(out_dir / "moves.parquet")
        write_parquet(paths[-1], moves_table(run))
    paths.append(out_dir / "resolved_config.yaml")
    write_text(paths[-1], resolved_yaml)
    paths.append(out_dir / "metrics.json")
    write_json(paths[-1], report.to_dict())  # last: its presence means "complete"
    return paths
