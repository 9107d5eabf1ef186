"""Does a verdict survive another derivation of the same logs?

When the needs of a trace were derived from logs (``memlens data import``), the method and its
settings are a choice, and a ranking of policies that flips with the choice is a property of
the choice, not of the policies.  Given the rows of one ``memlens compare`` over several traces
(several derivations of the same logs, or any set of traces), this module ranks the policies
per trace and budget by a metric and says, per budget, whether the ranking holds: Kendall's tau
(``scipy.stats.kendalltau``, tau-b, which allows ties) between the first trace's ranking and
each other's, and every pair of policies whose order flips.  A pair flips when one policy is
ahead by more than ``tolerance`` on one trace and behind by more than ``tolerance`` on the
other; a pair within ``tolerance`` on either trace is a tie there, not a flip.  These are point
estimates: whether a difference is more than noise is what ``compare reference=...`` answers.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from itertools import combinations

from scipy.stats import kendalltau


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


def compare_rows(rows) -> list[dict]:
    """``memlens compare``'s rows (``commands.Row``) as dicts, each trace named by its file
    name, or by its path where two traces share a name (two derivations in two folders)."""
    paths = [r.report.trace["path"] for r in rows]
    names: dict[str, set[str]] = {}
    for p in paths:
        names.setdefault(p.replace("\\", "/").rsplit("/", 1)[-1], set()).add(p)
    label = {p: (n if len(names[n]) == 1 else p) for n, ps in names.items() for p in ps}
    return [{**r.values, "trace": label[p]} for r, p in zip(rows, paths, strict=True)]
