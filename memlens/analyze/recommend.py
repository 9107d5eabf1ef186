"""The recommendation: which setting (policy x budget) to deploy, from a comparison's rows.

Per trace, over the settings ``compare`` ran (the policies ``memlens recommend`` lists, less
``exclude``: by default the oracle, which reads the future and is a bound, not a choice):

* **recommended**: the cheapest setting by the cost metric (``total_cost_usd``: context plus
  misses; ``cost_usd`` when the miss-cost metrics are not declared) whose quality metric
  (``request_success`` by default) is at least the target.  Ties: higher quality, then policy
  name, then budget.
* **alternative**: the next-cheapest qualifying setting; when only one qualifies, the best
  non-qualifying one (the closest to the target).  The two are compared by a paired bootstrap
  over the trace's streams, on quality and on cost; when neither interval excludes zero they
  *cannot be told apart* at the chosen confidence, and the output says so.
* **Pareto front** of context cost (``cost_usd``) against quality: every setting no other
  setting beats on both (at most as costly and at least as good, better in one).

Given several derivations of the same logs (``traces=[A,B,...] stability=true``),
:func:`recommend_across` recommends only a setting that meets the target under *every* one of
them (the cheapest by its highest cost over the derivations), and says so; when none does, it
says which derivation each near-miss fails under.

Rows have the layout of ``compare.json`` (one dict per run, with its ``stream_parts``), so a
recommendation can also be made again from a stored comparison.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from memlens.analyze.stats import StatsConfig, difference, interval

CONTEXT_COST = "cost_usd"


@dataclass(frozen=True)
class Choice:
    """What the recommendation asks of the comparison."""

    metric: str  # quality, higher is better
    target: float
    cost: str  # what "cheapest" means


def default_cost() -> str:
    """``total_cost_usd`` when it is declared, else ``cost_usd``."""
    from memlens.analyze.registry import declared

    return "total_cost_usd" if "total_cost_usd" in declared() else CONTEXT_COST


def parts(row: dict, key: str):
    """A row's per-stream (num, den) of ``key`` (from its compare.json ``stream_parts``)."""
    p = row["stream_parts"]["metrics"][key]
    return np.asarray(p["num"], float), None if p["den"] is None else np.asarray(p["den"], float)


def label(row: dict) -> str:
    return f"{row['policy']}@{row['budget']}"


def pareto_front(rows: list[dict], quality: str, cost: str = CONTEXT_COST) -> list[dict]:
    """Rows no other row dominates (cost no higher, quality no lower, one strictly), by cost."""
    ok = [r for r in rows if r.get(quality) is not None and r.get(cost) is not None]

    def dominated(r: dict) -> bool:
        return any(
            o[cost] <= r[cost] and o[quality] >= r[quality]
            and (o[cost] < r[cost] or o[quality] > r[quality])
            for o in ok
        )  # fmt: skip

    front = (r for r in ok if not dominated(r))
    return sorted(front, key=lambda r: (r[cost], -r[quality], r["policy"], r["budget"]))


def front_entries(rows: list[dict], quality: str) -> list[dict]:
    """The Pareto front for recommend.json: settings with the very same (cost, quality) point
    (e.g. every policy below a pinned prompt's size) are one entry, the others under ``same``."""
    out: list[dict] = []
    for r in pareto_front(rows, quality):
        if out and (out[-1][CONTEXT_COST], out[-1][quality]) == (r[CONTEXT_COST], r[quality]):
            out[-1]["same"].append(label(r))
            continue
        out.append({"policy": r["policy"], "budget": r["budget"], CONTEXT_COST: r[CONTEXT_COST],
                    quality: r[quality], "same": []})  # fmt: skip
    return out


def ranked(rows: list[dict], choice: Choice) -> tuple[list[dict], list[dict]]:
    """(qualifying rows, cheapest first; the others, best quality first)."""
    ok = [r for r in rows if r.get(choice.metric) is not None and r.get(choice.cost) is not None]
    good = [r for r in ok if r[choice.metric] >= choice.target]
    rest = [r for r in ok if r[choice.metric] < choice.target]
    good.sort(key=lambda r: (r[choice.cost], -r[choice.metric], r["policy"], r["budget"]))
    rest.sort(key=lambda r: (-r[choice.metric], r[choice.cost], r["policy"], r["budget"]))
    return good, rest


def _setting(row: dict, choice: Choice, cfg: StatsConfig) -> dict:
    return {
        "policy": row["policy"],
        "budget": row["budget"],
        choice.metric: interval(parts(row, choice.metric), cfg).to_dict(),
        choice.cost: interval(parts(row, choice.cost), cfg).to_dict(),
        CONTEXT_COST: row.get(CONTEXT_COST),
    }


def _versus(best: dict, other: dict, choice: Choice, cfg: StatsConfig) -> dict:
    """Paired differences other - best on quality and cost, and whether they tell apart."""
    dq = difference(parts(other, choice.metric), parts(best, choice.metric), cfg)
    dc = difference(parts(other, choice.cost), parts(best, choice.cost), cfg)
    return {"quality": dq, "cost": dc, "told_apart": dq.excludes_zero or dc.excludes_zero,
            "testable": dq.low is not None and dc.low is not None}  # fmt: skip


def _sure(rows: list[dict], choice: Choice, cfg: StatsConfig) -> dict | None:
    """The cheapest of the (cheapest-first) qualifying rows whose interval clears the target."""
    for r in rows:
        q = interval(parts(r, choice.metric), cfg)
        if q.low is not None and q.low >= choice.target:
            return r
    return None


def _fmt(key: str, iv, signed: bool = False) -> str:
    from memlens.analyze.table import interval_cell

    return interval_cell(key, iv, signed=signed)


def statement(best: dict | None, other: dict | None, vs: dict | None, sure: dict | None,
              choice: Choice, cfg: StatsConfig) -> list[str]:  # fmt: skip
    """What a user should read: the choice, whether it is sure, whether it stands out."""
    pct, metric, cost = f"{cfg.ci:.0%}", choice.metric, choice.cost
    if best is None:
        top = f"; the best is {label(other)} at {other[metric]:.3f}" if other else ""
        return [f"no setting reaches {metric} >= {choice.target}{top}"]
    lines = [f"recommended: {label(best)} ({metric} {best[metric]:.3f} >= {choice.target}, "
             f"{cost} {best[cost]:,.3f})"]  # fmt: skip
    q = interval(parts(best, metric), cfg)
    if q.low is None:
        return [*lines, f"no interval ({q.note}): with {q.n_streams} stream(s) nothing can be "
                        "told apart at any confidence"]  # fmt: skip
    if q.low >= choice.target:
        lines.append(f"it meets the target at {pct}: {metric} {_fmt(metric, q)}")
    else:
        clears = (f"the cheapest setting whose interval clears it is {label(sure)} ({cost} "
                  f"{sure[cost]:,.3f})" if sure else f"no setting clears it at {pct}")  # fmt: skip
        lines.append(f"it meets the target by the point estimate only: its {pct} interval "
                     f"{_fmt(metric, q)} reaches below {choice.target}; {clears}")  # fmt: skip
    if other is None or vs is None or not vs["testable"]:
        return lines
    diff = (
        f"{label(other)} minus {label(best)}: {metric} "
        f"{_fmt(metric, vs['quality'], True)}, {cost} {_fmt(cost, vs['cost'], True)}"
    )
    verdict = "can" if vs["told_apart"] else "cannot"
    lines.append(f"{label(best)} and {label(other)} ({vs['why']}) {verdict} be told apart at "
                 f"{pct} ({diff})")  # fmt: skip
    return lines


def recommend_trace(rows: list[dict], choice: Choice, cfg: StatsConfig) -> dict:
    """The recommendation for one trace's rows."""
    good, rest = ranked(rows, choice)
    best = good[0] if good else None
    other = good[1] if len(good) > 1 else (rest[0] if rest else None)
    why = "next-cheapest qualifying" if len(good) > 1 else "best non-qualifying"
    vs = _versus(best, other, choice, cfg) if best is not None and other is not None else None
    if vs is not None:
        vs["why"] = why
    sure = _sure(good, choice, cfg)
    return {
        "trace": rows[0]["trace"] if rows else None,
        "n_streams": len(rows[0]["stream_parts"]["streams"]) if rows else 0,
        "qualifying": len(good),
        "recommended": None if best is None else _setting(best, choice, cfg),
        "alternative": None if other is None else {**_setting(other, choice, cfg), "why": why},
        "difference": None if vs is None else {
            "quality": vs["quality"].to_dict(), "cost": vs["cost"].to_dict(),
            "told_apart": vs["told_apart"], "of": "alternative minus recommended"},
        "clears_target_at_ci": None if sure is None else _setting(sure, choice, cfg),
        "pareto_front": front_entries(rows, choice.metric),
        "statement": statement(best, other, vs, sure, choice, cfg),
    }  # fmt: skip


def recommend(rows: list[dict], choice: Choice, cfg: StatsConfig) -> dict:
    """recommend.json: the choice, the statistics used, one recommendation per trace."""
    traces = list(dict.fromkeys(r["trace"] for r in rows))
    return {
        "metric": choice.metric,
        "target": choice.target,
        "cost": choice.cost,
        "front_cost": CONTEXT_COST,
        "stats": {
            "ci": cfg.ci,
            "method": cfg.method,
            "bootstrap": cfg.bootstrap,
            "seed": cfg.seed,
            "min_streams": cfg.min_streams,
        },  # fmt: skip
        "traces": [
            recommend_trace([r for r in rows if r["trace"] == t], choice, cfg) for t in traces
        ],  # fmt: skip
    }


def recommend_across(rows: list[dict], choice: Choice, cfg: StatsConfig) -> dict:
    """The setting that meets the target under every trace (derivation), cheapest first."""
    traces = list(dict.fromkeys(r["trace"] for r in rows))
    by: dict[str, dict[str, dict]] = {}
    for r in rows:
        if r.get(choice.metric) is not None and r.get(choice.cost) is not None:
            by.setdefault(label(r), {})[r["trace"]] = r
    common = {k: v for k, v in by.items() if len(v) == len(traces)}
    worst = {k: (min(r[choice.metric] for r in v.values()),
                 max(r[choice.cost] for r in v.values())) for k, v in common.items()}  # fmt: skip
    good = sorted((k for k, (q, _) in worst.items() if q >= choice.target),
                  key=lambda k: (worst[k][1], -worst[k][0], k))  # fmt: skip
    n = len(traces)
    if not good:
        near = sorted(worst, key=lambda k: -worst[k][0])[:3]
        fails = "; ".join(f"{k} misses under " + ", ".join(
            t for t, r in common[k].items() if r[choice.metric] < choice.target) for k in near)  # fmt: skip
        text = (f"under all {n} derivations: no setting reaches {choice.metric} >= "
                f"{choice.target} under every one ({fails})")  # fmt: skip
        return {"traces": traces, "recommended": None, "statement": text}
    best = good[0]
    sure = sum(interval(parts(r, choice.metric), cfg).low is not None
               and interval(parts(r, choice.metric), cfg).low >= choice.target
               for r in common[best].values())  # fmt: skip
    text = (f"under all {n} derivations: recommended {best} ({choice.metric} at least "
            f"{worst[best][0]:.3f} >= {choice.target} under every one, {choice.cost} at most "
            f"{worst[best][1]:,.3f}); its {cfg.ci:.0%} interval clears the target under {sure} "
            f"of {n}")  # fmt: skip
    alone = {t: rec for t in traces if (rec := _cheapest(rows, t, choice)) and rec != best}
    if alone:
        text += "; a single derivation alone would pick " + ", ".join(
            f"{k} ({t})" for t, k in alone.items())  # fmt: skip
    return {"traces": traces, "recommended": {"policy": common[best][traces[0]]["policy"],
            "budget": common[best][traces[0]]["budget"], "min_quality": worst[best][0],
            "max_cost": worst[best][1], "clears_at_ci_under": sure}, "statement": text}  # fmt: skip


def _cheapest(rows: list[dict], trace: str, choice: Choice) -> str | None:
    good, _ = ranked([r for r in rows if r["trace"] == trace], choice)
    return label(good[0]) if good else None


def render(doc: dict, rows: list[dict], cfg: StatsConfig) -> str:
    """The short table per trace (front, recommended, alternative) and the statements."""
    from memlens.analyze.table import format_table, interval_cell

    metric, cost = doc["metric"], doc["cost"]
    out = []
    for rec in doc["traces"]:
        trows = {label(r): r for r in rows if r["trace"] == rec["trace"]}
        roles: dict[str, list[str]] = {}
        names = {"clears_target_at_ci": f"clears target at {cfg.ci:.0%}"}
        for role in ("recommended", "alternative", "clears_target_at_ci"):
            if rec[role] is not None:
                roles.setdefault(label(rec[role]), []).append(names.get(role, role))
        same = {}
        for f in rec["pareto_front"]:
            roles.setdefault(label(f), []).append("pareto")
            same[label(f)] = f" (= {len(f['same'])} more)" if f["same"] else ""
            for other in f["same"]:  # a tied setting shown for another role is on the front too
                if other in roles:
                    roles[other].append("pareto")
        shown = sorted(roles, key=lambda k: (trows[k][CONTEXT_COST], -trows[k][metric]))
        table = []
        for key in shown:
            r = trows[key]
            table.append({
                "setting": key + same.get(key, ""),
                metric: interval_cell(metric, interval(parts(r, metric), cfg)),
                cost: interval_cell(cost, interval(parts(r, cost), cfg)),
                CONTEXT_COST: r[CONTEXT_COST],
                "role": ", ".join(roles[key]),
            })  # fmt: skip
        cols = ["setting", metric, cost] + ([CONTEXT_COST] if cost != CONTEXT_COST else [])
        out.append(f"{rec['trace']} ({rec['n_streams']} streams; {rec['qualifying']} of "
                   f"{len(trows)} settings reach {metric} >= {doc['target']})")  # fmt: skip
        out.append(format_table(table, [*cols, "role"]))
        out.extend(rec["statement"])
        out.append("")
    if doc.get("across"):
        out.append(doc["across"]["statement"])
    return "\n".join(out).rstrip()
