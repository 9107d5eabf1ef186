"""Evidence for the learned value scorer (issue 12): the table on every test split, the label
kinds compared, and the learning curve against feedback.

    .venv/bin/python experiments/learned.py            # everything (about 10 min on 2 cores)
    .venv/bin/python experiments/learned.py --quick    # the table only, tau-bench split

For each split in ``conf/split/`` (taubench, locomo, archetypes, cross) a model is trained on
its training streams exactly as ``memlens train split=NAME`` does (``memlens.learn.train.train``,
the defaults of ``conf/train.yaml``), then every test trace is replayed at budgets 512-4096
with ``policy=learned`` (that model), ``rule``, ``lru`` and every other registered online
policy; ``oracle_upper`` comes from ``memlens.oracle.solve``.  Only the test streams count.
Paired differences are the verdicts' bootstrap over streams (``memlens.analyze.stats.difference``,
the default ``stats`` settings); "gap closed" is (learned - LRU) / (oracle_upper - LRU).

Outputs: ``results/learned.md`` (tables), ``results/learned.json`` (every number),
``results/learning_curve.{png,pdf}``; the models go to ``outputs/learned-models/`` (git-ignored).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np
from memlens.policies.learned import LearnedScorer

from memlens._util.atomic import write_json, write_text
from memlens.analyze.report import git_commit
from memlens.analyze.stats import StatsConfig, difference
from memlens.config.compose import compose_config, make_policy
from memlens.config.schema import resolve
from memlens.config.store import registered_policies
from memlens.learn.train import TrainConfig, as_model, load_selection, train
from memlens.oracle import solve
from memlens.scorer.model import LearnedModel, save_model
from memlens.simulator import simulate

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "experiments" / "results"
MODELS = ROOT / "outputs" / "learned-models"  # outputs/ is git-ignored
SPLITS = ("taubench", "locomo", "archetypes", "cross")
BUDGETS = (512, 1024, 2048, 4096)
OFFLINE = {"oracle", "learned"}  # not "other online policies"
LABELS = ("feedback", "hindsight", "belady", "oracle")
CURVE_POINTS = (0, 10, 100, 1000, None)  # None: all
CURVE = {"taubench": 2048, "archetypes": 1024}  # split -> the budget its curve is drawn at
# the simulated user of the feedback runs: busy enough to give well over 1,000 feedback events
USER = ["feedback.simulated_user.interventions_per_100_events=30",
        "feedback.simulated_user.precision=0.9", "feedback.simulated_user.recall=0.5"]  # fmt: skip


def settings(split: str, overrides: list[str] = ()) -> TrainConfig:
    """``memlens train split=SPLIT <overrides>`` as typed settings (MLflow off)."""
    return resolve(compose_config("train", [f"split={split}", "mlflow.enabled=false", *overrides]))


def trained(split: str, overrides: list[str] = ()) -> tuple[LearnedModel | None, dict]:
    """A model trained as ``memlens train`` would (None when there is nothing to learn)."""
    cfg = settings(split, overrides)
    if cfg.label.kind == "feedback" and cfg.feedback.max_rows == 0:
        return None, {"n_feedback": 0}
    est, meta = train(cfg)
    tag = "-".join([split, *[o.split("=")[-1] for o in overrides if "simulated" not in o]])
    path, _ = save_model(MODELS / f"{tag}.txt", est, meta)
    return as_model(est, meta), meta


# ------------------------------------------------------------------------------ replays
def stream_parts(trace, result, mask: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(hits, references) per selected stream: the hit rate's parts."""
    stream = trace.req_stream[trace.need_request]
    hits = np.bincount(stream, weights=result.need_hit, minlength=trace.n_streams)
    refs = np.bincount(stream, minlength=trace.n_streams).astype(float)
    return hits[mask], refs[mask]


def replay_all(trace, mask, budget: int, model: LearnedModel | None) -> dict:
    """Per-stream parts of every online policy and of policy=learned, and oracle_upper's."""
    parts = {}
    for name in registered_policies():
        if name in OFFLINE:
            continue
        res = simulate(trace, make_policy(name), budget, progress=False)
        parts[name] = stream_parts(trace, res, mask)
    res = simulate(trace, LearnedScorer.from_model(model), budget, progress=False)
    parts["learned"] = stream_parts(trace, res, mask)
    upper = np.asarray([s.upper for s in solve(trace, budget, False).streams], float)
    parts["oracle_upper"] = (upper[mask], parts["lru"][1])
    return parts


def rate(parts) -> float:
    num, den = parts
    return float(num.sum() / den.sum()) if den.sum() else float("nan")


def cell(parts: dict, a: str, b: str, cfg: StatsConfig) -> dict:
    iv = difference(parts[a], parts[b], cfg)
    return {"estimate": iv.estimate, "low": iv.low, "high": iv.high, "note": iv.note,
            "text": iv.cell(signed=True)}  # fmt: skip


def evaluate_split(split: str, model: LearnedModel | None, cfg: StatsConfig) -> list[dict]:
    """One row per (test trace, budget)."""
    rows = []
    for sel in settings(split).split.test:
        trace, mask = load_selection(sel)
        for budget in BUDGETS:
            parts = replay_all(trace, mask, budget, model)
            others = {k: rate(v) for k, v in parts.items()
                      if k not in ("learned", "rule", "lru", "oracle_upper")}  # fmt: skip
            best = max(others, key=others.get)
            r = {k: rate(v) for k, v in parts.items()}
            gap = r["oracle_upper"] - r["lru"]
            rows.append({
                "split": split, "trace": sel.label(), "budget": budget,
                "streams": int(mask.sum()), "rates": r, "best_other": best,
                "vs_lru": cell(parts, "learned", "lru", cfg),
                "vs_rule": cell(parts, "learned", "rule", cfg),
                "vs_best": cell(parts, "learned", best, cfg),
                "gap_closed": (r["learned"] - r["lru"]) / gap if gap > 1e-9 else None,
            })  # fmt: skip
            print(f"{split:10s} {sel.label():32s} {budget:5d} lru={r['lru']:.3f} "
                  f"rule={r['rule']:.3f} {best}={r[best]:.3f} learned={r['learned']:.3f} "
                  f"upper={r['oracle_upper']:.3f}", flush=True)  # fmt: skip
    return rows


# ------------------------------------------------------------------------ label kinds
def test_rate(split: str, model: LearnedModel | None, budgets=BUDGETS) -> float:
    """policy=learned's hit rate over the split's test streams, pooled over ``budgets``."""
    hits = refs = 0.0
    for sel in settings(split).split.test:
        trace, mask = load_selection(sel)
        for b in budgets:
            res = simulate(trace, LearnedScorer.from_model(model), b, progress=False)
            h, n = stream_parts(trace, res, mask)
            hits, refs = hits + h.sum(), refs + n.sum()
    return hits / refs


def compare_labels(split: str) -> list[dict]:
    out = []
    for kind in LABELS:
        extra = USER if kind == "feedback" else []
        model, meta = trained(split, [f"label.kind={kind}", *extra])
        m = meta.get("metrics", {})
        out.append({"split": split, "label": kind, "rows": m.get("rows"),
                    "validation_auc": m.get("validation_auc"),
                    "validation_logloss": m.get("validation_logloss"),
                    "test_hit_rate": test_rate(split, model)})  # fmt: skip
        print(f"labels {split} {kind}: {out[-1]}", flush=True)
    return out


def learning_curve(split: str, budget: int) -> dict:
    """Test hit rate at ``budget`` against the number of feedback events trained on."""
    points = []
    for n in CURVE_POINTS:
        limit = "null" if n is None else str(n)
        model, meta = trained(split, ["label.kind=feedback", f"feedback.max_rows={limit}", *USER])
        points.append(
            {"feedback": meta["n_feedback"], "hit_rate": test_rate(split, model, [budget])}
        )
        print(f"curve {split}@{budget}: {points[-1]}", flush=True)
    lines = {}
    for sel in settings(split).split.test:
        trace, mask = load_selection(sel)
        for name in ("lru", "rule"):
            res = simulate(trace, make_policy(name), budget, progress=False)
            h, n = stream_parts(trace, res, mask)
            lines.setdefault(name, [0.0, 0.0])
            lines[name] = [lines[name][0] + h.sum(), lines[name][1] + n.sum()]
        up = np.asarray([s.upper for s in solve(trace, budget, False).streams], float)
        lines.setdefault("oracle_upper", [0.0, 0.0])
        lines["oracle_upper"] = [lines["oracle_upper"][0] + up[mask].sum(),
                                 lines["oracle_upper"][1] + stream_parts(trace, res, mask)[1].sum()]  # fmt: skip
    return {"split": split, "budget": budget, "points": points,
            "lines": {k: v[0] / v[1] for k, v in lines.items()}}  # fmt: skip


def plot_curves(curves: list[dict], commit: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(curves), figsize=(5.5 * len(curves), 4), squeeze=False)
    for ax, c in zip(axes[0], curves):
        xs = np.arange(len(c["points"]))  # evenly spaced: 0, 10, 100, 1,000, all
        ax.plot(xs, [p["hit_rate"] for p in c["points"]], "o-", label="learned (feedback labels)")
        for name, style in (("oracle_upper", "-."), ("rule", "--"), ("lru", ":")):
            ax.axhline(c["lines"][name], linestyle=style, color="grey", label=name)
        ticks = [f"{p['feedback']:,}" for p in c["points"]]
        ticks[-1] = f"all\n({ticks[-1]})"
        ax.set_xticks(xs, ticks)
        ax.set_xlabel("feedback events trained on (simulated user)")
        ax.set_ylabel(f"test hit rate @ {c['budget']} tokens")
        ax.set_title(f"{c['split']} split")
        ax.legend(fontsize=8, loc="center right")
    fig.suptitle(f"learned value scorer: learning curve (commit {commit[:12]})", fontsize=9)
    fig.tight_layout()
    for ext in ("png", "pdf"):
        fig.savefig(RESULTS / f"learning_curve.{ext}", dpi=110)
    plt.close(fig)


# ------------------------------------------------------------------------------ report
def fmt(x, spec=".3f") -> str:
    return "-" if x is None or (isinstance(x, float) and np.isnan(x)) else format(x, spec)


def table_lines(rows: list[dict]) -> list[str]:
    lines = ["| split | trace (test streams) | budget | LRU | rule | best other | learned | "
             "oracle_upper | learned - LRU | learned - rule | learned - best other | gap closed |",
             "|---|---|---:|---:|---:|---|---:|---:|---|---|---|---:|"]  # fmt: skip
    for r in rows:
        x = r["rates"]
        gap = "- (no gap)" if r["gap_closed"] is None else f"{r['gap_closed']:.0%}"
        lines.append(f"| {r['split']} | {r['trace']} ({r['streams']}) | {r['budget']} | "
                     f"{fmt(x['lru'])} | {fmt(x['rule'])} | {r['best_other']} "
                     f"{fmt(x[r['best_other']])} | **{fmt(x['learned'])}** | "
                     f"{fmt(x['oracle_upper'])} | {r['vs_lru']['text']} | {r['vs_rule']['text']} "
                     f"| {r['vs_best']['text']} | {gap} |")  # fmt: skip
    return lines


def target_lines(rows: list[dict]) -> list[str]:
    """Per split: mean gap closed where there is a gap, and rows significantly below LRU."""
    out = ["| split | rows with a gap | mean gap closed | min | rows significantly below LRU |",
           "|---|---:|---:|---:|---|"]  # fmt: skip
    for split in dict.fromkeys(r["split"] for r in rows):
        mine = [r for r in rows if r["split"] == split]
        gaps = [r["gap_closed"] for r in mine if r["gap_closed"] is not None]
        below = [f"{r['trace']} @{r['budget']}" for r in mine
                 if r["vs_lru"]["high"] is not None and r["vs_lru"]["high"] < 0]  # fmt: skip
        out.append(f"| {split} | {len(gaps)} of {len(mine)} | "
                   f"{fmt(float(np.mean(gaps)) if gaps else None, '.0%')} | "
                   f"{fmt(min(gaps) if gaps else None, '.0%')} | {', '.join(below) or 'none'} |")  # fmt: skip
    return out


def render(doc: dict, table: list[str]) -> str:
    lines = [
        "# The learned value scorer on every test split (issue 12)",
        "",
        f"Produced by `.venv/bin/python experiments/learned.py` at commit `{doc['commit']}` in "
        f"{doc['wall_s']:.0f} s.  Each split's model is trained on its training streams only, "
        "as `memlens train split=NAME` does with the defaults of `conf/train.yaml` (oracle "
        "labels at 2,048 tokens, LRU as behaviour policy); hit rates count the test streams "
        "only (demand_fetch=false, seed 0).  Differences: paired bootstrap over test streams "
        f"({doc['stats']['bootstrap']} resamples, {doc['stats']['ci']:.0%} percentile, seed "
        f"{doc['stats']['seed']}); `[n<5]`: fewer than 5 test streams, no interval; `*`: the "
        "interval excludes 0.  Gap closed = (learned - LRU) / (oracle_upper - LRU).",
        "",
        "## Learned vs rule vs the best other online policy vs oracle_upper",
        "",
        *table,
        "",
        "## Against the targets (half the LRU-to-oracle gap; never significantly below LRU)",
        "",
        *target_lines(doc["rows"]),
        "",
        "## The models",
        "",
        "| split | label | validation AUC | log loss | rows | decay / request | size exponent |",
        "|---|---|---:|---:|---:|---:|---:|",
    ]
    for split, m in doc["models"].items():
        mt, p = m["metrics"], m["policy"]
        lines.append(f"| {split} | {m['label']['kind']} | {fmt(mt.get('validation_auc'), '.4f')} "
                     f"| {fmt(mt.get('validation_logloss'), '.4f')} | {mt['rows']:,} | "
                     f"{p['decay_per_request']:g} | {p['size_exponent']:g} |")  # fmt: skip
    if "labels" in doc:
        lines += ["", "## Label kinds compared (test hit rate pooled over budgets 512-4096)", "",
                  "| split | label | training rows | validation AUC | log loss | test hit rate |",
                  "|---|---|---:|---:|---:|---:|"]  # fmt: skip
        for r in doc["labels"]:
            lines.append(f"| {r['split']} | {r['label']} | {r['rows']:,} | "
                         f"{fmt(r['validation_auc'], '.4f')} | {fmt(r['validation_logloss'], '.4f')}"
                         f" | {fmt(r['test_hit_rate'])} |")  # fmt: skip
    if "curves" in doc:
        lines += ["", "## Learning curve (`learning_curve.png`, `.pdf`)", "",
                  "Feedback labels from the simulated user (" + ", ".join(USER) + ") on the "
                  "training streams, a seeded sample of N events; N = 0 is cold start (the rule "
                  "scorer).", "",
                  "| split | budget | feedback events | test hit rate | rule | LRU | oracle_upper |",
                  "|---|---:|---:|---:|---:|---:|---:|"]  # fmt: skip
        for c in doc["curves"]:
            for p in c["points"]:
                lines.append(f"| {c['split']} | {c['budget']} | {p['feedback']:,} | "
                             f"{fmt(p['hit_rate'])} | {fmt(c['lines']['rule'])} | "
                             f"{fmt(c['lines']['lru'])} | {fmt(c['lines']['oracle_upper'])} |")  # fmt: skip
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="the tau-bench table only")
    ap.add_argument("--render", action="store_true",
                    help="only redraw the figure and learned.md from results/learned.json")  # fmt: skip
    args = ap.parse_args(argv)
    if args.render:
        doc = json.loads((RESULTS / "learned.json").read_text())
        if "curves" in doc:
            plot_curves(doc["curves"], doc["commit"])
        write_text(RESULTS / "learned.md", render(doc, table_lines(doc["rows"])))
        return 0
    commit = git_commit() or "unknown"
    cfg = StatsConfig()
    t0 = time.perf_counter()
    doc: dict = {"commit": commit, "budgets": list(BUDGETS), "stats": vars(cfg)}
    rows, models = [], {}
    for split in SPLITS[:1] if args.quick else SPLITS:
        model, meta = trained(split)
        models[split] = {k: meta[k] for k in ("label", "policy", "metrics")}
        rows += evaluate_split(split, model, cfg)
    doc.update(rows=rows, models=models)
    if not args.quick:
        doc["labels"] = compare_labels("taubench") + compare_labels("archetypes")
        doc["curves"] = [learning_curve(s, b) for s, b in CURVE.items()]
        plot_curves(doc["curves"], commit)
    doc["wall_s"] = time.perf_counter() - t0
    write_json(RESULTS / "learned.json", doc)
    write_text(RESULTS / "learned.md", render(doc, table_lines(rows)))
    print(f"wrote {RESULTS / 'learned.md'} in {doc['wall_s']:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
