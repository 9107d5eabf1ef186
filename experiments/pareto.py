"""Figure 2: the cost-quality Pareto front per bundled trace: context cost (cost_usd, the tokens
sent) against request_success, every policy at every budget of conf/experiment/figures.yaml.

    .venv/bin/python experiments/pareto.py           # the figure-1 sweep (resumed), then draw
    .venv/bin/python experiments/pareto.py --quick

A point is on the front when no other deployable point is at most as expensive and at least as
successful (and better on one).  The oracle reads the future: it is drawn (a bound) but is not
a candidate for the front.  Same sweep as experiments/budget_curves.py, so after that one every
job is skipped (memlens.runs.resume).  Outputs: results/pareto.{png,pdf,md,tex}.
"""

from __future__ import annotations

import argparse
from collections import defaultdict
from pathlib import Path

from budget_curves import QUICK
from common import RESULTS, compare_settings, run_sweep, save_figure, write_tables

BOUNDS = {"oracle"}  # policies that read the future: drawn, never on the front


def records(sweep) -> list[dict]:
    return [{"trace": Path(o.report.trace["path"]).name, "policy": o.job.policy_name,
             "budget": o.report.budget, "cost_usd": o.report.overall["cost_usd"],
             "request_success": o.report.overall["request_success"]}
            for o in sweep.outcomes]  # fmt: skip


def front(points: list[dict]) -> list[dict]:
    """The non-dominated points (least cost, most success), cheapest first."""
    out, best = [], -1.0
    for p in sorted(points, key=lambda p: (p["cost_usd"], -p["request_success"])):
        if p["request_success"] > best:
            out.append(p)
            best = p["request_success"]
    return out


def draw(recs: list[dict]):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    traces = list(dict.fromkeys(r["trace"] for r in recs))
    policies = list(dict.fromkeys(r["policy"] for r in recs))
    fig, axes = plt.subplots(1, len(traces), figsize=(4.2 * len(traces), 4), squeeze=False)
    colors = plt.get_cmap("tab10")
    deployable = [p for p in policies if p not in BOUNDS]
    for ax, trace in zip(axes[0], traces):
        rows = [r for r in recs if r["trace"] == trace]
        for p in policies:
            pr = [r for r in rows if r["policy"] == p]
            bound = p in BOUNDS
            ax.scatter([r["cost_usd"] for r in pr], [r["request_success"] for r in pr], s=14,
                       color="black" if bound else colors(deployable.index(p) % 10),
                       marker="x" if bound else "o", label=p)  # fmt: skip
        f = front([r for r in rows if r["policy"] not in BOUNDS])
        ax.step([r["cost_usd"] for r in f], [r["request_success"] for r in f], where="post",
                color="black", lw=1, label="Pareto front")  # fmt: skip
        ax.set_title(trace, fontsize=9)
        ax.set_xscale("log")
        ax.set_xlabel("context cost (cost_usd, log)")
        ax.grid(alpha=0.3)
    axes[0][0].set_ylabel("request_success")
    handles, labels = axes[0][0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="upper center", ncol=7, fontsize=8, bbox_to_anchor=(0.5, 1.1))
    fig.tight_layout()
    return fig


def tables(recs: list[dict]):
    by = defaultdict(list)
    for r in recs:
        by[r["trace"]].append(r)
    return [(f"{t}: the Pareto front (deployable policies)", ["policy", "budget", "cost_usd",
                                                             "request_success"],
             [[r["policy"], str(r["budget"]), f"{r['cost_usd']:.4f}", f"{r['request_success']:.4f}"]
              for r in front([r for r in rows if r["policy"] not in BOUNDS])])
            for t, rows in by.items()]  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--out", type=Path, default=RESULTS)
    ap.add_argument("overrides", nargs="*", help="memlens compare overrides")
    args = ap.parse_args()
    settings = compare_settings(["experiment=figures", *(QUICK if args.quick else []),
                                 *args.overrides])  # fmt: skip
    recs = records(run_sweep(settings))
    paths = save_figure(draw(recs), "pareto", args.out)
    paths += write_tables("pareto", "Cost-quality Pareto front (figure 2)", tables(recs), args.out)
    print("\n".join(str(p) for p in paths))


if __name__ == "__main__":
    main()
