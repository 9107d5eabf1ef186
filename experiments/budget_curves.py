"""Figure 1: hit rate and regret vs budget, every policy, every bundled trace, with the oracle
band (oracle_lower..oracle_upper) and 95% bootstrap intervals over streams.

    .venv/bin/python experiments/budget_curves.py           # sweep (resumable), then draw
    .venv/bin/python experiments/budget_curves.py --quick   # two traces, three policies

The sweep is ``memlens compare experiment=figures`` (conf/experiment/figures.yaml: the four
bundled traces, budgets 256-4096, every registered policy), run through ``memlens.runs.sweep``: on
every core, resumable (a rerun skips finished jobs), one MLflow parent run with a child per job
in the experiment ``memlens-figures``.  ``oracle_lower`` comes from each job's oracle section;
regret = oracle_upper - hit_rate.  Outputs: results/budget_curves.{png,pdf,md,tex,json}.
"""

from __future__ import annotations

import argparse
import json
from collections import defaultdict
from pathlib import Path

from common import RESULTS, commit, compare_settings, run_sweep, save_figure, write_tables

QUICK = ["traces=[${memlens.data:default/agent-small.jsonl.gz},"
         "${memlens.data:locomo/locomo10-end.jsonl.gz}]", "policies=[lru,rule,window]"]  # fmt: skip


def points(sweep) -> list[dict]:
    """One record per job: the figure's numbers (JSON-ready)."""
    out = []
    for o in sweep.outcomes:
        r, iv = o.report, o.report.intervals.get("hit_rate")
        oracle = r.sections.get("oracle") or {}
        out.append({"trace": Path(r.trace["path"]).name, "policy": o.job.policy_name,
                    "budget": r.budget, "hit_rate": r.overall["hit_rate"],
                    "hit_rate_low": iv.low if iv else None, "hit_rate_high": iv.high if iv else None,
                    "regret": r.overall.get("regret"), "oracle_upper": r.overall.get("oracle_upper"),
                    "oracle_lower": oracle.get("oracle_lower"), "streams": r.trace["streams"]})  # fmt: skip
    return out


def draw(records: list[dict]):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    traces = list(dict.fromkeys(r["trace"] for r in records))
    policies = list(dict.fromkeys(r["policy"] for r in records if r["policy"] != "oracle"))
    fig, axes = plt.subplots(2, len(traces), figsize=(4.2 * len(traces), 7), squeeze=False)
    colors = plt.get_cmap("tab10")
    for col, trace in enumerate(traces):
        rows = [r for r in records if r["trace"] == trace]
        band = sorted({(r["budget"], r["oracle_lower"], r["oracle_upper"]) for r in rows
                       if r["policy"] == rows[0]["policy"]})  # fmt: skip
        hit, reg = axes[0][col], axes[1][col]
        if all(b[1] is not None for b in band):
            hit.fill_between([b[0] for b in band], [b[1] for b in band], [b[2] for b in band],
                             color="0.85", label="oracle band (lower..upper)")  # fmt: skip
        for k, p in enumerate(policies):
            pr = sorted((r for r in rows if r["policy"] == p), key=lambda r: r["budget"])
            x = [r["budget"] for r in pr]
            hit.plot(x, [r["hit_rate"] for r in pr], marker="o", ms=3, color=colors(k), label=p)
            if all(r["hit_rate_low"] is not None for r in pr):
                hit.fill_between(x, [r["hit_rate_low"] for r in pr],
                                 [r["hit_rate_high"] for r in pr], color=colors(k), alpha=0.15)  # fmt: skip
            reg.plot(x, [r["regret"] for r in pr], marker="o", ms=3, color=colors(k), label=p)
        n = rows[0]["streams"]
        hit.set_title(f"{trace}\n({n} streams)", fontsize=9)
        for ax, label in ((hit, "hit rate"), (reg, "regret (oracle_upper - hit rate)")):
            ax.set_xscale("log", base=2)
            ax.set_xlabel("budget (tokens)")
            ax.grid(alpha=0.3)
            if col == 0:
                ax.set_ylabel(label)
    handles, labels = axes[0][0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="upper center", ncol=min(6, len(labels)), fontsize=8,
               bbox_to_anchor=(0.5, 1.04))  # fmt: skip
    fig.tight_layout()
    return fig


def cell(r: dict) -> str:
    if r["hit_rate_low"] is None:
        return f"{r['hit_rate']:.3f}"
    return f"{r['hit_rate']:.3f} [{r['hit_rate_low']:.3f}, {r['hit_rate_high']:.3f}]"


def tables(records: list[dict]) -> list[tuple[str, list[str], list[list[str]]]]:
    by_trace = defaultdict(list)
    for r in records:
        by_trace[r["trace"]].append(r)
    out = []
    for trace, rows in by_trace.items():
        budgets = sorted({r["budget"] for r in rows})
        at = {(r["policy"], r["budget"]): r for r in rows}
        body = [[p, "hit rate", *[cell(at[(p, b)]) for b in budgets]]
                for p in dict.fromkeys(r["policy"] for r in rows)]  # fmt: skip
        first = rows[0]["policy"]
        body.append(["oracle band", "lower..upper", *[
            f"{at[(first, b)]['oracle_lower']:.3f}..{at[(first, b)]['oracle_upper']:.3f}"
            if at[(first, b)]["oracle_lower"] is not None else "-" for b in budgets]])  # fmt: skip
        out.append((f"{trace}: hit rate [95% interval over streams] by budget",
                    ["policy", "metric", *map(str, budgets)], body))  # fmt: skip
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="two traces, three policies")
    ap.add_argument("--out", type=Path, default=RESULTS)
    ap.add_argument("overrides", nargs="*", help="memlens compare overrides (mlflow.*, n_jobs...)")
    args = ap.parse_args()
    settings = compare_settings(["experiment=figures", *(QUICK if args.quick else []),
                                 *args.overrides])  # fmt: skip
    records = points(run_sweep(settings))
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "budget_curves.json").write_text(json.dumps({"commit": commit(),
                                                             "records": records}, indent=1))  # fmt: skip
    paths = save_figure(draw(records), "budget_curves", args.out)
    paths += write_tables(
        "budget_curves", "Hit rate vs budget (figure 1)", tables(records), args.out
    )
    print("\n".join(str(p) for p in paths))


if __name__ == "__main__":
    main()
