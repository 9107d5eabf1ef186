"""One policy in two ``memlens compare`` runs that differ in one setting: the paired difference.

    python experiments/paired_runs.py A/compare.json B/compare.json --policy generative_agents

For each (trace, budget) both runs have, ``B - A`` of ``--metric`` (default ``hit_rate``) with
its paired 95% bootstrap interval over streams: the two runs replay the same streams, so each
stream's pair is resampled jointly (``memlens.analyze.stats.difference``, the interval
``compare`` reports against its reference).  A compare shows each run only against its own
reference policy; this is how two settings of one policy (e.g. ``relevance=tfidf`` and
``relevance=embeddings``) are compared with each other.  ``* `` marks an interval without 0.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from memlens.analyze.stats import StatsConfig, difference


def stream_parts(path: Path, policy: str, metric: str) -> dict[tuple[str, int], tuple]:
    """(trace, budget) -> the metric's per-stream (numerators, denominators) of ``policy``."""
    out = {}
    for row in json.loads(path.read_text()):
        if row["policy"] == policy:
            parts = row["stream_parts"]["metrics"][metric]
            out[(row["trace"], int(row["budget"]))] = (parts["num"], parts["den"])
    return out


def table(a: Path, b: Path, policy: str, metric: str) -> list[str]:
    """Markdown rows: trace, budget, ``B - A`` with its paired interval."""
    first, second = stream_parts(a, policy, metric), stream_parts(b, policy, metric)
    common = sorted(set(first) & set(second))
    if not common:
        raise SystemExit(f"error: no (trace, budget) of policy {policy!r} is in both runs")
    lines = [f"| trace | budget | {metric}: B - A |", "|---|---:|---:|"]
    for trace, budget in common:
        d = difference(second[(trace, budget)], first[(trace, budget)], StatsConfig())
        lines.append(f"| {trace} | {budget} | {d.cell(signed=True)} |")
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("a", type=Path, help="the first run's compare.json")
    parser.add_argument("b", type=Path, help="the second run's compare.json")
    parser.add_argument("--policy", required=True)
    parser.add_argument("--metric", default="hit_rate")
    args = parser.parse_args()
    print("\n".join(table(args.a, args.b, args.policy, args.metric)))


if __name__ == "__main__":
    main()
