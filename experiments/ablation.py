"""Table/figure 4: ablation of the rule scorer's value dimensions, each removed in turn, on each
bundled trace, with the paired 95% interval of the change in hit rate over streams.

    .venv/bin/python experiments/ablation.py                  # budgets 512 and 2048
    .venv/bin/python experiments/ablation.py --budgets 1024 --traces locomo/locomo10-end.jsonl.gz

The rule scorer (policies/rule.py) values an item by six dimensions; "removed" means:

* type    - every type gets the same base value (the mean of the four defaults);
* content - every content boost (error, conclusion, numbers, identifiers, entities, length) 0;
* cost    - cost_boost 0 (an expensive item is worth no more);
* decay   - half-lives of 10^9 hours (values never fade);
* use     - use_boost 0 (being needed adds nothing);
* pins    - a person's word removed: the trace is replayed without its pin, unpin and annotate
            events (the simulator protects pinned items for every policy, so dropping the
            events is the only way to take pins out of the value; the requests and their needs
            are unchanged, so the difference stays paired over the same streams).  None of the
            bundled traces has an annotate event; the default and tau-bench traces have pins.

Each variant replays exactly as ``memlens simulate policy=rule <overrides>`` (reference engine,
demand fetch off, seed 0).  The difference to the full scorer is paired over the same streams
(``memlens.analyze.stats.difference``, 2000 resamples, seed 0); ``*``: the interval excludes 0; fewer
than 5 streams: no interval (``[n<5]``).  Outputs: results/ablation.{png,pdf,md,tex}.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
from common import RESULTS, save_figure, write_tables
from memlens.policies.rule import RuleScorer

from memlens.analyze.stats import StatsConfig, difference
from memlens.config.compose import make_policy
from memlens.config.store import DATA_DIR
from memlens.simulator import simulate
from memlens.trace.cache import load_trace_cached
from memlens.trace.features import DEFAULT_TYPE_BASE
from memlens.trace.model import ITEM_TYPES

TRACES = ["default/agent-small.jsonl.gz", "locomo/locomo10-end.jsonl.gz",
          "locomo/locomo10-after_evidence.jsonl.gz", "taubench/airline.jsonl.gz"]  # fmt: skip
BOOSTS = ["error", "conclusion", "numbers", "identifiers", "entities", "length"]
_MEAN_BASE = sum(DEFAULT_TYPE_BASE.values()) / len(DEFAULT_TYPE_BASE)
ABLATIONS: dict[str, list[str]] = {
    "full": [],
    "type": [f"policy.type_base.{t}={_MEAN_BASE}" for t in ITEM_TYPES],
    "content": [f"policy.boosts.{b}=0" for b in BOOSTS],
    "cost": ["policy.cost_boost=0"],
    "decay": [f"policy.half_life_hours.{t}=1e9" for t in ITEM_TYPES],
    "use": ["policy.use_boost=0"],
    "pins": [],  # RuleWithoutPersonWord below
}


class RuleWithoutPersonWord(RuleScorer):
    """The rule scorer deaf to a person's annotate values (pin/unpin kept: the simulator
    protects pinned items whatever the policy)."""

    def _person_fns(self, insert):
        pin, unpin, _ = super()._person_fns(insert)
        return pin, unpin, lambda item, value, note, now: None


def policy(name: str):
    rule = make_policy("rule", ABLATIONS[name])
    if name != "pins":
        return rule
    from memlens.config.compose import policy_config
    from memlens.config.schema import policy_kwargs

    return RuleWithoutPersonWord(**policy_kwargs(policy_config("rule"))[1])


PERSON_EVENTS = {"pin", "unpin", "annotate"}


def without_person(path: Path):
    """The trace at ``path`` without its pin, unpin and annotate events."""
    import gzip
    import json

    from memlens.trace.io import trace_from_events

    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt", encoding="utf-8") as fh:
        events = [e for e in map(json.loads, filter(str.strip, fh))
                  if e.get("event") not in PERSON_EVENTS]  # fmt: skip
    return trace_from_events(events, source=f"{path} (no pin/unpin/annotate)")


def parts(trace, result) -> tuple[np.ndarray, np.ndarray]:
    """(hits, references) per stream: the hit rate's parts."""
    stream = trace.req_stream[trace.need_request]
    hits = np.bincount(stream, weights=result.need_hit, minlength=trace.n_streams)
    return hits, np.bincount(stream, minlength=trace.n_streams).astype(float)


def run(traces: list[str], budgets: list[int]) -> list[dict]:
    cfg = StatsConfig()
    out = []
    for rel in traces:
        trace = load_trace_cached(DATA_DIR / rel)
        bare = without_person(DATA_DIR / rel)
        for budget in budgets:
            got = {name: parts(bare if name == "pins" else trace,
                               simulate(bare if name == "pins" else trace, policy(name), budget,
                                        progress=False, engine="reference"))
                   for name in ABLATIONS}  # fmt: skip
            full = got["full"]
            for name, p in got.items():
                iv = difference(p, full, cfg)
                out.append({"trace": Path(rel).name, "budget": budget, "removed": name,
                            "hit_rate": float(p[0].sum() / p[1].sum()), "delta": iv.estimate,
                            "low": iv.low, "high": iv.high, "streams": trace.n_streams,
                            "excludes_zero": iv.low is not None and iv.excludes_zero})  # fmt: skip
    return out


def draw(recs: list[dict]):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    keys = list(dict.fromkeys((r["trace"], r["budget"]) for r in recs))
    names = [n for n in ABLATIONS if n != "full"]
    fig, axes = plt.subplots(1, len(keys), figsize=(3.2 * len(keys), 3.6), squeeze=False,
                             sharey=True)  # fmt: skip
    for ax, (trace, budget) in zip(axes[0], keys):
        rows = {r["removed"]: r for r in recs if (r["trace"], r["budget"]) == (trace, budget)}
        y = [rows[n]["delta"] for n in names]
        err = [[d - (rows[n]["low"] if rows[n]["low"] is not None else d) for n, d in zip(names, y)],
               [(rows[n]["high"] if rows[n]["high"] is not None else d) - d
                for n, d in zip(names, y)]]  # fmt: skip
        ax.bar(names, y, yerr=err, capsize=2, color=["C3" if v < 0 else "C2" for v in y])
        ax.axhline(0, color="black", lw=0.8)
        ax.set_title(f"{trace}\nbudget {budget}", fontsize=8)
        ax.tick_params(axis="x", rotation=60, labelsize=7)
        ax.grid(alpha=0.3, axis="y")
    axes[0][0].set_ylabel("hit rate change vs full rule scorer")
    fig.tight_layout()
    return fig


def tables(recs: list[dict]):
    keys = list(dict.fromkeys((r["trace"], r["budget"]) for r in recs))
    rows = []
    for name in ABLATIONS:
        cells = []
        for key in keys:
            r = next(x for x in recs if (x["trace"], x["budget"]) == key and x["removed"] == name)
            if name == "full":
                cells.append(f"{r['hit_rate']:.3f}")
            elif r["low"] is None:
                cells.append(f"{r['delta']:+.3f} [n<5]")
            else:
                star = " *" if r["excludes_zero"] else ""
                cells.append(f"{r['delta']:+.3f} [{r['low']:+.3f}, {r['high']:+.3f}]{star}")
        rows.append([name, "hit rate" if name == "full" else "change", *cells])
    header = ["removed", "value", *[f"{t} @{b}" for t, b in keys]]
    return [("hit rate of the full scorer, and its change with each dimension removed "
             "(paired 95% interval over streams; * excludes 0)", header, rows)]  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--budgets", type=int, nargs="+", default=[512, 2048])
    ap.add_argument("--traces", nargs="+", default=TRACES, help="paths under datasets/")
    ap.add_argument("--out", type=Path, default=RESULTS)
    args = ap.parse_args()
    recs = run(args.traces, args.budgets)
    paths = save_figure(draw(recs), "ablation", args.out)
    paths += write_tables("ablation", "Rule scorer ablation (figure 4)", tables(recs), args.out)
    print("\n".join(str(p) for p in paths))


if __name__ == "__main__":
    main()
