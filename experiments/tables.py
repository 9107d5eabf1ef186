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

from memlens.analyze.registry import declared
from memlens.analyze.stats import Interval
from memlens.analyze.table import interval_cell

TABLE_METRICS = ["hit_rate", "regret", "mean_context_tokens", "cost_usd", "false_eviction_rate"]


def vs_cell(row: dict, key: str) -> str:
    """The paired difference to the reference: ``+0.214 [+0.177, +0.249] *`` (* excludes 0)."""
    vs = row.get("vs_reference") or {}
    if row.get("policy") == vs.get("reference"):
        return "(reference)"
    d = (vs.get("metrics") or {}).get(key)
    if d is None:
        return "-"
    if d.get("low") is None:
        return f"{d['estimate']:+.3f} [{d.get('note')}]"
    star = " *" if d["excludes_zero"] else ""
    return f"{d['estimate']:+.3f} [{d['low']:+.3f}, {d['high']:+.3f}]{star}"


def metric_cell(row: dict, key: str) -> str:
    iv = row.get("intervals", {}).get(key)
    return (
        interval_cell(key, Interval.from_dict(iv)) if iv else declared()[key].format(row.get(key))
    )


def table(title: str, trows: list[dict], cell_of) -> list[str]:
    """One Markdown table: policies as rows, budgets as columns."""
    budgets = sorted({r["budget"] for r in trows})
    policies = list(dict.fromkeys(r["policy"] for r in trows))
    cell = {(r["policy"], r["budget"]): r for r in trows}
    out = [f"### {title}\n", "| policy | " + " | ".join(str(b) for b in budgets) + " |",
           "|---|" + "---:|" * len(budgets)]  # fmt: skip
    for p in policies:
        out.append(f"| {p} | " + " | ".join(cell_of(cell.get((p, b), {})) for b in budgets) + " |")
    return [*out, ""]


def render(rows: list[dict]) -> str:
    by_trace: dict[str, list[dict]] = defaultdict(list)
    for r in rows:
        by_trace[r["trace"]].append(r)
    out = []
    for trace, trows in by_trace.items():
        for key in TABLE_METRICS:
            if any(r.get(key) is not None for r in trows):
                title = f"{trace}: {key} ({declared()[key].description})"
                out += table(title, trows, lambda r, k=key: metric_cell(r, k))
        reference = next((r["vs_reference"]["reference"] for r in trows if r.get("vs_reference")),
                         None)  # fmt: skip
        if reference is not None:
            title = (
                f"{trace}: hit_rate vs {reference} (paired 95% interval over streams; * excludes 0)"
            )
            out += table(title, trows, lambda r: vs_cell(r, "hit_rate"))
    return "\n".join(out)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("compare_json", type=Path)
    args = ap.parse_args()
    print(render(json.loads(args.compare_json.read_text())))


if __name__ == "__main__":
    main()
