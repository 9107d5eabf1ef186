"""Does a verdict survive another derivation of the same logs?

When the needs of a trace were derived from logs (``memlens data import``), the method and its
settings are a choice, and a ranking of policies that flips with the choice is a property of
the choice, not of the policies.  Given the rows of one ``memlens compare`` over several traces
(several derivations of the same logs, or any set of traces), this module ranks the policies
per trace and budget by a metric and says, per budget, whether the ranking holds: Kendall's tau
(``scipy.stats.kendalltau``, tau-b, which allows ties) between the first trace's ranking and
each other's, and every pair of policies whose order flips.  A pair flips when one policy is
ahead by more than ``tolerance`` on one trace and behind by more than ``tolerance`` on the
other; a pair within ``tolerance`` on either trace is a tie there, not a flip.

Point estimates say nothing of noise, so each pair also gets a *verdict* from its paired
difference's bootstrap interval over streams under every trace (:func:`pair_verdicts`):

``holds``       the interval excludes 0, with the same sign, under every trace;
``flips``       it excludes 0 in opposite directions under two traces;
``unresolved``  anything else (some interval includes 0).

Without an interval (fewer than ``stats.min_streams`` streams) the point estimate stands in,
and counts as a sign only when it is more than ``tolerance`` from 0.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from itertools import combinations

from scipy.stats import kendalltau

VERDICTS = ("holds", "flips", "unresolved")


@dataclass
class Agreement:
    """One trace's ranking against the first trace's, at one budget."""

    trace: str
    tau: float | None  # None: a ranking is constant (every policy tied) or fewer than 2 policies
    flips: list[tuple[str, str]] = field(default_factory=list)  # (ahead on first, ahead here)


@dataclass
class BudgetStability:
    """Whether the ranking at ``budget`` holds across every trace."""

    budget: int
    reference: str
    agreements: list[Agreement]

    @property
    def holds(self) -> bool:
        return not any(a.flips for a in self.agreements)


def _sign(d: float, tolerance: float) -> int:
    return 0 if abs(d) <= tolerance else (1 if d > 0 else -1)


def agreement(trace: str, ref: dict[str, float], other: dict[str, float],
              tolerance: float = 0.0) -> Agreement:  # fmt: skip
    """Kendall's tau and the flipped pairs of the policies both traces rank."""
    names = [p for p in ref if p in other]
    flips = []
    for p, q in combinations(names, 2):
        a, b = _sign(ref[p] - ref[q], tolerance), _sign(other[p] - other[q], tolerance)
        if a * b < 0:
            flips.append((p, q) if a > 0 else (q, p))
    tau = None
    if len(names) >= 2:
        t = kendalltau([ref[p] for p in names], [other[p] for p in names]).statistic
        tau = None if t is None or math.isnan(t) else float(t)
    return Agreement(trace, tau, flips)


def ranking_stability(rows: list[dict], metric: str = "hit_rate",
                      tolerance: float = 0.0) -> list[BudgetStability]:  # fmt: skip
    """Per budget (in first-seen order), every trace's ranking against the first trace's.

    ``rows`` are dicts with ``trace``, ``policy``, ``budget`` and ``metric``; rows whose metric
    is None are left out."""
    table: dict[int, dict[str, dict[str, float]]] = {}
    for r in rows:
        if r.get(metric) is not None:
            by_trace = table.setdefault(r["budget"], {})
            by_trace.setdefault(r["trace"], {})[r["policy"]] = float(r[metric])
    out = []
    for budget, by_trace in table.items():
        traces = list(by_trace)
        ref = traces[0]
        agreements = [agreement(t, by_trace[ref], by_trace[t], tolerance) for t in traces[1:]]
        out.append(BudgetStability(budget, ref, agreements))
    return out


SHOWN_FLIPS = 8  # flips printed per trace; the rest are counted


def stability_lines(
    rows: list[dict], metric: str = "hit_rate", tolerance: float = 0.0
) -> list[str]:
    """What ``memlens compare`` prints under its table when it compared several traces."""
    lines = [f"ranking stability across traces ({metric}; each trace vs {rows[0]['trace']}):"]
    for b in ranking_stability(rows, metric, tolerance):
        lines.append(f"  budget {b.budget}: ranking holds: {'yes' if b.holds else 'no'}")
        for a in b.agreements:
            tau = "n/a (a ranking is all ties)" if a.tau is None else f"{a.tau:+.3f}"
            flipped = ", ".join(f"{p} > {q} becomes {q} > {p}" for p, q in a.flips[:SHOWN_FLIPS])
            if len(a.flips) > SHOWN_FLIPS:
                flipped += f" and {len(a.flips) - SHOWN_FLIPS} more"
            lines.append(
                f"    {a.trace}: Kendall tau {tau}" + (f"; flips: {flipped}" if flipped else "")
            )
    lines.append("  (point estimates; `reference=POLICY` gives paired intervals per trace)")
    return lines


@dataclass
class PairVerdict:
    """One pair of policies at one budget: ``first - second`` under each trace, and a word."""

    budget: int
    first: str
    second: str
    intervals: dict  # trace -> memlens.analyze.stats.Interval
    verdict: str


def interval_sign(iv, tolerance: float = 0.0) -> int:
    """+1 / -1 when ``iv`` excludes 0 above / below; without an interval, the estimate's sign
    when it is more than ``tolerance`` from 0; else 0."""
    if iv.estimate is None:
        return 0
    if iv.low is None:
        return _sign(iv.estimate, tolerance)
    return 1 if iv.low > 0 else -1 if iv.high < 0 else 0


def verdict_of(signs: list[int]) -> str:
    if 1 in signs and -1 in signs:
        return "flips"
    if signs and all(x == signs[0] != 0 for x in signs):
        return "holds"
    return "unresolved"


def pair_verdicts(rows: list[dict], metric: str, cfg, tolerance: float = 0.0) -> list[PairVerdict]:
    """Every pair of policies that every trace ran, per budget (first-seen order): the paired
    difference of ``metric`` on each trace's streams, and its verdict.  ``rows`` are dicts with
    ``trace``, ``policy``, ``budget`` and ``parts`` (the metric's per-stream ``(num, den)``)."""
    from memlens.analyze.stats import difference

    table: dict[int, dict[str, dict[str, tuple]]] = {}
    for r in rows:
        if r.get("parts") is not None:
            table.setdefault(r["budget"], {}).setdefault(r["trace"], {})[r["policy"]] = r["parts"]
    out = []
    for budget, by_trace in table.items():
        traces = list(by_trace)
        names = [p for p in by_trace[traces[0]] if all(p in by_trace[t] for t in traces)]
        for p, q in combinations(names, 2):
            ivs = {t: difference(by_trace[t][p], by_trace[t][q], cfg) for t in traces}
            word = verdict_of([interval_sign(iv, tolerance) for iv in ivs.values()])
            out.append(PairVerdict(budget, p, q, ivs, word))
    return out


def verdict_lines(verdicts: list[PairVerdict], metric: str, cfg, shown: int = 12) -> list[str]:
    """The verdicts ``compare stability=true`` prints: counts per budget, then the pairs (those
    that flip or hold first), each with its interval under every trace."""
    lines = [f"verdicts per pair ({metric}, first minus second; {cfg.ci:.0%} paired bootstrap "
             "over streams under every trace):"]  # fmt: skip
    budgets = list(dict.fromkeys(v.budget for v in verdicts))
    for b in budgets:
        mine = [v for v in verdicts if v.budget == b]
        counts = {w: sum(v.verdict == w for v in mine) for w in VERDICTS}
        lines.append(f"  budget {b}: " + ", ".join(f"{n} {w}" for w, n in counts.items()))
        order = sorted(mine, key=lambda v: (VERDICTS.index(v.verdict) if v.verdict != "holds"
                                            else -1, v.first, v.second))  # fmt: skip
        for v in order[:shown]:
            cells = "; ".join(
                f"{t}: {iv.cell('.3f', signed=True)}" for t, iv in v.intervals.items()
            )
            lines.append(f"    {v.first} vs {v.second}: {v.verdict} ({cells})")
        if len(order) > shown:
            lines.append(f"    ... and {len(order) - shown} more pairs (compare.json has them all)")
    return lines


def compare_rows(rows) -> list[dict]:
    """``memlens compare``'s rows (``commands.Row``) as dicts, each trace named by its file
    name, or by its path where two traces share a name (two derivations in two folders)."""
    paths = [r.report.trace["path"] for r in rows]
    names: dict[str, set[str]] = {}
    for p in paths:
        names.setdefault(p.replace("\\", "/").rsplit("/", 1)[-1], set()).add(p)
    label = {p: (n if len(names[n]) == 1 else p) for n, ps in names.items() for p in ps}
    return [{**r.values, "trace": label[p], "parts_of": getattr(r.report, "stream_parts", None)}
            for r, p in zip(rows, paths, strict=True)]  # fmt: skip


def with_parts(rows: list[dict], metric: str) -> list[dict]:
    """:func:`compare_rows`' rows with ``parts`` = ``metric``'s per-stream parts."""
    return [{**r, "parts": (r.get("parts_of") or {}).get(metric)} for r in rows]
