"""Paper-style tables from a ``memlens compare`` run (its ``compare.json``).

    python experiments/tables.py outputs/<date>/<time>/compare.json > table.md

One table per trace and metric: policies as rows, budgets as columns, so "which policy at which
budget" reads off one line, and regret (where the oracle is on) shows what is left to gain.
Where the run recorded a bootstrap interval over streams, the cell shows it
(``0.572 [0.550, 0.590]``; ``[n<5]`` when the trace had too few streams for one).
"""

from __future__ import annotations

import argparse
import json
from collections import defaultdict
from pathlib import Path

from memlens.registry import declared
from memlens.stats import Interval
from memlens.table import interval_cell

TABLE_METRICS = ["hit_rate", "regret", "mean_context_tokens", "cost_usd", "false_eviction_rate"]


def render(rows: list[dict]) -> str:
    by_trace: dict[str, list[dict]] = defaultdict(list)
    for r in rows:
        by_trace[r["trace"]].append(r)
    out = []
    for trace, trows in by_trace.items():
        budgets = sorted({r["budget"] for r in trows})
        policies = list(dict.fromkeys(r["policy"] for r in trows))
        cell = {(r["policy"], r["budget"]): r for r in trows}
        for key in TABLE_METRICS:
            if not any(r.get(key) is not None for r in trows):
                continue
            metric = declared()[key]
            out.append(f"### {trace}: {key} ({metric.description})\n")
            out.append("| policy | " + " | ".join(str(b) for b in budgets) + " |")
            out.append("|---|" + "---:|" * len(budgets))
            for p in policies:
                vals = []
                for b in budgets:
                    r = cell.get((p, b), {})
                    iv = r.get("intervals", {}).get(key)
                    shown = metric.format(r.get(key))
                    vals.append(interval_cell(key, Interval.from_dict(iv)) if iv else shown)
                out.append(f"| {p} | " + " | ".join(vals) + " |")
            out.append("")
    return "\n".join(out)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("compare_json", type=Path)
    args = ap.parse_args()
    print(render(json.loads(args.compare_json.read_text())))


if __name__ == "__main__":
    main()
