"""A trained model on the split's test streams, against LRU, the rule scorer and the bundled
model, with paired intervals over streams.

Why: a model is worth adopting only if it beats what one has on streams it never saw.
``memlens train`` scores its split's ``test`` side here: each test trace's selected streams are
replayed at every training budget with the new model (its tuned decay and size exponent),
``lru``, ``rule`` and the bundled default model (``learned`` with ``model=default``: what a
user has before training), and each baseline's hit rate is compared with the new model's by
the paired bootstrap over streams of ``memlens.analyze.stats`` (the same replicates for both
sides, as ``memlens compare`` pairs policies; no interval below ``stats.min_streams``).
"""

from __future__ import annotations

import numpy as np

from memlens.analyze.stats import StatsConfig, difference, interval

BASELINES = ("lru", "rule", "default")


def stream_parts(trace, mask: np.ndarray, need_hit: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(hits, needs) per selected stream, in stream order: the hit rate's additive parts."""
    stream_of_ref = trace.req_stream[trace.need_request]
    hits = np.bincount(stream_of_ref, weights=need_hit.astype(np.float64),
                       minlength=trace.n_streams)  # fmt: skip
    needs = np.bincount(stream_of_ref, minlength=trace.n_streams).astype(np.float64)
    keep = mask & (needs > 0)
    return hits[keep], needs[keep]


def _policy(name: str, model, tuned: dict):
    from memlens.config.compose import make_policy
    from memlens.policies.learned import LearnedScorer

    if name == "new":
        return LearnedScorer.from_model(model, decay_per_request=tuned["decay_per_request"],
                                        size_exponent=tuned["size_exponent"])  # fmt: skip
    if name == "default":
        return LearnedScorer(model="default")
    return make_policy(name)


def heldout_parts(model, tuned: dict, tests, budget: int, progress=None) -> dict[str, tuple]:
    """Per policy (new and each baseline), the hit rate's parts over every test stream;
    ``tests``: (trace, stream mask, label) of each test entry."""
    from memlens.simulator import simulate

    parts: dict[str, list] = {name: [] for name in ("new", *BASELINES)}
    for trace, mask, label in tests:
        for name in parts:
            if progress is not None:
                progress(f"test split: {name} at budget {budget} on {label}")
            res = simulate(trace, _policy(name, model, tuned), budget, progress=False)
            parts[name].append(stream_parts(trace, mask, res.need_hit))
    return {name: (np.concatenate([p[0] for p in got]), np.concatenate([p[1] for p in got]))
            for name, got in parts.items()}  # fmt: skip


def score_test_split(model, tuned: dict, tests, budgets, stats: StatsConfig | None = None,
                     progress=None) -> list[dict]:  # fmt: skip
    """Per budget: each policy's hit rate (with its interval) and the new model's paired
    difference to each baseline."""
    stats = stats or StatsConfig()
    out = []
    for b in budgets:
        parts = heldout_parts(model, tuned, tests, b, progress)
        out.append({
            "budget": int(b), "streams": int(parts["new"][0].size),
            "hit_rate": {name: interval(p, stats).to_dict() for name, p in parts.items()},
            "new_minus": {name: difference(parts["new"], parts[name], stats).to_dict()
                          for name in BASELINES},
        })  # fmt: skip
    return out


def _cell(iv: dict, signed: bool = False) -> str:
    from memlens.analyze.stats import Interval

    return Interval.from_dict({"method": "", "ci": 0.0, **iv}).cell(signed=signed)


def heldout_lines(scored: list[dict]) -> list[str]:
    """What ``memlens train`` prints about its test split."""
    lines = []
    for block in scored:
        rates = "  ".join(f"{name} {_cell(iv)}" for name, iv in block["hit_rate"].items())
        lines.append(f"test split, budget {block['budget']} ({block['streams']} streams): "
                     f"hit rate {rates}")  # fmt: skip
        diffs = "  ".join(f"new - {name} {_cell(iv, signed=True)}"
                          for name, iv in block["new_minus"].items())  # fmt: skip
        lines.append(f"  paired over streams: {diffs}  (* : the interval excludes 0)")
    return lines
