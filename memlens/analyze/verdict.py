"""The verdict: ``memlens compare``'s default output, the answer to "which policy, at which budget".

Today's full table (every metric of every job, ``table=full``) is 15 columns and about 300
characters wide; the answer to the question a user asks has to be dug out of it. The verdict
prints, per trace and budget, the policies ranked by the headline metric (``hit_rate``), each
with its interval over streams and its paired difference to the reference policy (LRU by
default), the oracle's bound, regret and cost, and one sentence that names what is significantly
best and by how much, or says that nothing is. Every line fits in :data:`WIDTH` columns.

Significance is the paired bootstrap over streams of :func:`memlens.analyze.stats.difference`
(the same streams resampled jointly, the same seed as every other interval): "significantly
best" means the leader's difference to the runner-up excludes zero. With fewer streams than
``stats.min_streams`` there is no interval and the sentence says so instead of claiming.

A compared row is anything with ``values`` (its table row: ``trace``, ``policy``, ``budget`` and
the metrics) and ``report`` (with ``intervals`` and ``stream_parts``): ``memlens.cli.replay.Row``.
"""

from __future__ import annotations

import textwrap
from collections.abc import Sequence
from typing import Any

from memlens.analyze.registry import declared
from memlens.analyze.stats import Interval, StatsConfig, paired_differences

WIDTH = 120
#: Never ranked: it reads the future, so it is the bound every other policy is measured against.
BOUND_POLICY = "oracle"
_NAME_MAX = 24
_NBSP = "\u00a0"  # keeps an interval on one line when a sentence is wrapped


def verdict_lines(rows: Sequence[Any], metric: str, reference: str | None,
                  cfg: StatsConfig) -> list[str]:  # fmt: skip
    """The verdict of a compare run, one block per (trace, budget), every line <= WIDTH."""
    lines: list[str] = []
    for trace, by_budget in _grouped(rows).items():
        first = next(iter(by_budget.values()))
        n = len(first[0].report.stream_names)
        lines += _trace_header(trace, n, metric, reference, cfg)
        for budget, group in by_budget.items():
            lines += ["", *_budget_block(budget, group, metric, reference, cfg)]
        lines.append("")
    lines.append(
        "regret: the oracle bound minus hit_rate; cost $: total_cost_usd (the context sent "
        "plus the misses' cost, conf costs.*)"
    )
    return lines


def _grouped(rows: Sequence[Any]) -> dict[str, dict[int, list[Any]]]:
    out: dict[str, dict[int, list[Any]]] = {}
    for row in rows:
        out.setdefault(row.values["trace"], {}).setdefault(row.values["budget"], []).append(row)
    return {t: dict(sorted(b.items())) for t, b in out.items()}


def _trace_header(trace: str, n: int, metric: str, reference: str | None,
                  cfg: StatsConfig) -> list[str]:  # fmt: skip
    better = {True: "higher is better", False: "lower is better"}.get(
        declared()[metric].higher_is_better, ""
    )
    vs = f", paired differences to {reference}" if reference else ""
    head = f"{trace}: {n} streams, ranked by {metric} ({better}){vs}"
    ivs = (f"[..]: {cfg.ci:.0%} {cfg.method} bootstrap over streams; * = the interval excludes 0"
           if n >= cfg.min_streams else
           f"{n} streams, fewer than stats.min_streams={cfg.min_streams}: no intervals, so no "
           "claim that one policy beats another")  # fmt: skip
    return [*textwrap.wrap(head, WIDTH), *textwrap.wrap(ivs, WIDTH)]


def _rank(group: list[Any], metric: str) -> list[Any]:
    """Best first by the point estimate (ties by name, so the order is reproducible)."""
    sign = -1.0 if declared()[metric].higher_is_better is not False else 1.0
    ranked = [r for r in group if r.values["policy"] != BOUND_POLICY
              and r.values.get(metric) is not None]  # fmt: skip
    return sorted(ranked, key=lambda r: (sign * r.values[metric], r.values["policy"]))


def _budget_block(budget: int, group: list[Any], metric: str, reference: str | None,
                  cfg: StatsConfig) -> list[str]:  # fmt: skip
    ranked = _rank(group, metric)
    bound = next((r.values.get("oracle_upper") for r in group
                  if r.values.get("oracle_upper") is not None), None)  # fmt: skip
    title = f"budget {budget} tokens" + (
        f": oracle bound {metric} <= {bound:.3f}"
        if bound is not None and metric == "hit_rate"
        else ""
    )
    ref = next((r for r in ranked if r.values["policy"] == reference), None)
    name_w = min(_NAME_MAX, max([len("policy"), *(len(r.values["policy"]) for r in ranked)]))
    diffs = _differences(ranked, ref, metric, cfg)
    table = [_row_cells(i + 1, r, ref, metric, diffs) for i, r in enumerate(ranked)]
    header = ["#", "policy", metric, f"vs {reference}" if ref else "", "regret", "cost $"]
    sentence = [ln.replace(_NBSP, " ") for ln in textwrap.wrap(
        _sentence(budget, ranked, ref, metric, diffs), WIDTH, initial_indent="  ",
        subsequent_indent="     ")]  # fmt: skip
    return [title, *_aligned([header, *table], name_w), *sentence]


def _row_cells(rank: int, row: Any, ref: Any, metric: str, diffs: dict) -> list[str]:
    values = row.values
    iv = row.report.intervals.get(metric)
    own = iv.cell(".3f") if iv is not None else f"{values[metric]:.3f}"
    if ref is None:
        vs = ""
    elif ref is row:
        vs = "(reference)"
    else:
        vs = diffs[id(row), id(ref)].cell(".3f", signed=True)
    regret = values.get("regret")
    cost = values.get("total_cost_usd")
    return [
        str(rank),
        values["policy"][:_NAME_MAX],
        own,
        vs,
        "-" if regret is None else f"{regret:.3f}",
        "-" if cost is None else f"{cost:.2f}",
    ]


def _aligned(rows: list[list[str]], name_w: int) -> list[str]:
    widths = [max(len(r[k]) for r in rows) for k in range(len(rows[0]))]
    widths[1] = name_w
    right = {0, 4, 5}
    return ["  " + "  ".join(c.rjust(w) if k in right else c.ljust(w)
                             for k, (c, w) in enumerate(zip(r, widths))).rstrip()
            for r in rows]  # fmt: skip


def _differences(ranked: list[Any], ref: Any, metric: str,
                 cfg: StatsConfig) -> dict[tuple[int, int], Interval]:  # fmt: skip
    """Every paired difference a budget's block prints (each row to the reference, the leader
    to every other row), ``a - b`` on ``metric`` over the same streams, keyed by the rows'
    ``id``s: computed together, they share one pass over the bootstrap counts and the parts
    they have in common (the reference's and the leader's)."""
    wanted = [(r, ref) for r in ranked if ref is not None and r is not ref]
    wanted += [(ranked[0], r) for r in ranked[1:]]
    unique = list({(id(a), id(b)): (a, b) for a, b in wanted}.values())
    ivs = paired_differences([(a.report.stream_parts[metric], b.report.stream_parts[metric])
                              for a, b in unique], cfg)  # fmt: skip
    return {(id(a), id(b)): iv for (a, b), iv in zip(unique, ivs, strict=True)}


def _sentence(budget: int, ranked: list[Any], ref: Any, metric: str, diffs: dict) -> str:
    """One sentence: what is significantly best and by how much, or that nothing is."""
    if not ranked:
        return f"no policy has a {metric} at this budget"
    lead = ranked[0]
    name = lead.values["policy"]
    if len(ranked) == 1:
        return f"{name} is the only policy compared"
    gap = diffs[id(lead), id(ranked[1])]
    if gap.low is None:
        return (f"{name} has the highest {metric} ({lead.values[metric]:.3f}); too few streams "
                "to say whether it is significantly best")  # fmt: skip
    tied = [r.values["policy"] for r in ranked[1:]
            if not diffs[id(lead), id(r)].excludes_zero]  # fmt: skip
    vs_ref = ""
    if ref is not None and ref is not lead:
        d = diffs[id(lead), id(ref)]
        vs_ref = f", {_amount(d)} over {ref.values['policy']}"
    if not tied:
        return (f"-> {name} is significantly best at {budget}: {_amount(gap)} {metric} "
                f"over the runner-up {ranked[1].values['policy']}{vs_ref}")  # fmt: skip
    others = ", ".join(tied[:4]) + (f" and {len(tied) - 4} more" if len(tied) > 4 else "")
    return (f"-> no single best at {budget}: {name} leads{vs_ref}, but is not significantly ahead of "
            f"{others}")  # fmt: skip


def _amount(iv: Interval) -> str:
    """``+0.224 [0.200, 0.250]``: a difference and its interval, for a sentence."""
    return iv.cell(".3f", signed=True).removesuffix(" *").replace(" ", _NBSP)
