"""Where Generative Agents' victims sit among the candidates: why a bound cannot skip them.

    .venv/bin/python benchmarks/ga_victim_profile.py --events 100000 --budget 65536

Replays the first ``--events`` events of the generated agent trace (``agent_traces.py``) on
the reference engine with the class's own scores, samples one victim choice in
``1 / --every``, and reports, per choice (means over the sample, and medians of the victim's
components): the candidates, those sharing a term with the query (relevance > 0), the
victim's min-max normalised recency, importance and relevance, and the candidates whose
normalised recency + importance alone is at most the victim's score.  Those are the ones a
victim search must read whatever bound it keeps on recency and importance: only their
relevance keeps them (``docs/speed.md``, "Generative Agents at 64K").
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from agent_traces import agent_trace_path  # noqa: E402

from memlens.simulator import simulate  # noqa: E402
from memlens.trace.io import load_trace  # noqa: E402


def normalised(x: np.ndarray) -> np.ndarray:
    spread = x.max() - x.min()
    return (x - x.min()) / spread if spread > 1e-12 else np.zeros_like(x)


def choices(events: int, budget: int, every: int) -> list[tuple[np.ndarray, ...]]:
    """(recency, importance, relevance) of the candidates at every ``every``-th choice."""
    from memlens.policies.generative_agents import GenerativeAgents

    sampled: list[tuple[np.ndarray, ...]] = []
    seen = [0]

    class Sampling(GenerativeAgents):
        def scores(self, items, t):
            seen[0] += 1
            if seen[0] % every == 0:
                sampled.append((np.array([self._rho[i] for i in items]),
                                np.array([self._importance[i] for i in items]),
                                np.array([self._rel.get(i, 0.0) for i in items])))  # fmt: skip
            return super().scores(items, t)

    trace = load_trace(agent_trace_path(events))
    simulate(trace, Sampling(), budget, engine="reference", progress=False)
    return sampled


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--events", type=int, default=100_000)
    ap.add_argument("--budget", type=int, default=65536)
    ap.add_argument("--every", type=int, default=20)
    args = ap.parse_args()
    rows, victims = [], []
    for rec, imp, rel in choices(args.events, args.budget, args.every):
        r, i, v = normalised(rec), normalised(imp), normalised(rel)
        score = r + i + v  # the class's ranking with its default weights (all 1)
        k = int(np.argmin(score))
        below = r + i <= score[k]
        rows.append((len(rec), (rel > 0).sum(), below.sum(), (below & (rel > 0)).sum()))
        victims.append((r[k], i[k], v[k]))
    mean = np.mean(rows, axis=0)
    med = np.median(victims, axis=0)
    print(f"{len(rows)} choices sampled, budget {args.budget}, first {args.events:,} events")
    print(f"candidates {mean[0]:.1f}, relevant {mean[1]:.1f}, recency + importance at most "
          f"the victim's score {mean[2]:.1f} (relevant {mean[3]:.1f})")  # fmt: skip
    print(f"victim (median, normalised): recency {med[0]:.3f}, importance {med[1]:.3f}, "
          f"relevance {med[2]:.3f}")  # fmt: skip


if __name__ == "__main__":
    main()
