"""Golden numbers: exact hits, evictions, miss cost and value-weighted hit rate of every
registered policy on every bundled trace.

    python experiments/golden.py            # regenerate experiments/results/golden.{json,md}
    python experiments/golden.py --check    # recompute and list every difference (exit 1)

In the manner of libCacheSim's tests, which pin the miss count of every algorithm at several
cache sizes on one trace: any change in a policy's behaviour, however small, changes a number
here and shows up as a diff of ``golden.json`` (and fails ``tests/test_golden.py``), never
silently.  Every job runs through the same pipeline as ``memlens simulate`` (oracle bounds
off; ``policy=oracle`` still solves and replays its own plan), with the default
``price_per_mtok`` and ``costs.*``.  ``miss_cost_usd`` and ``value_weighted_hit_rate`` are
pinned rounded to 9 decimals, so a change in their formula shows up here too.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from pathlib import Path

from memlens._util.atomic import write_json, write_text
from memlens.config.compose import run_settings
from memlens.config.store import DATA_DIR, registered_policies
from memlens.runs.pipeline import load_trace, run

RESULTS = Path(__file__).resolve().parent / "results"
TRACES = (
    "default/agent-small.jsonl.gz",
    "locomo/locomo10-end.jsonl.gz",
    "locomo/locomo10-after_evidence.jsonl.gz",
    "taubench/airline.jsonl.gz",
)
BUDGETS = (512, 1024, 2048, 4096)
FETCH = (False, True)
FIELDS = ("hits", "evictions", "miss_cost_usd", "value_weighted_hit_rate")
DECIMALS = 9


def record(overall: dict) -> dict:
    """The golden fields of one run's ``overall`` metrics (floats rounded to 9 decimals)."""
    return {k: round(v, DECIMALS) if isinstance(v, float) else v
            for k, v in ((k, overall[k]) for k in FIELDS)}  # fmt: skip


def golden_for(trace: str) -> dict:
    """{policy: {"fetch=false": {budget: {field: value}}}} for one bundled trace."""
    out: dict = {}
    base = ["oracle.enabled=false", "mlflow.enabled=false", f"trace={DATA_DIR / trace}"]
    for name in registered_policies():
        settings = run_settings([*base, f"policy={name}"])
        tr = load_trace(settings)
        for fetch in FETCH:
            row = out.setdefault(name, {}).setdefault(f"fetch={str(fetch).lower()}", {})
            for budget in BUDGETS:
                job = dataclasses.replace(settings, budget=budget, demand_fetch=fetch)
                m = run(job, tr)[1].overall
                row[str(budget)] = record(m)
    return out


def golden() -> dict:
    return {trace: golden_for(trace) for trace in TRACES}


def differences(want: dict, got: dict) -> list[str]:
    """Every (trace, policy, fetch, budget, field) whose number changed."""
    diffs = []
    for trace in sorted(set(want) | set(got)):
        w, g = want.get(trace, {}), got.get(trace, {})
        for policy in sorted(set(w) | set(g)):
            for fetch in FETCH:
                key = f"fetch={str(fetch).lower()}"
                a, b = w.get(policy, {}).get(key, {}), g.get(policy, {}).get(key, {})
                for budget in sorted(set(a) | set(b), key=int):
                    x, y = a.get(budget) or {}, b.get(budget) or {}
                    for f in [f for f in FIELDS if f in x or f in y]:
                        if x.get(f) != y.get(f):
                            diffs.append(f"{trace} {policy} {key} budget={budget} {f}: "
                                         f"{x.get(f)} -> {y.get(f)}")  # fmt: skip
    return diffs


def _cells(r: dict) -> str:
    vw = r["value_weighted_hit_rate"]
    return (f"{r['hits']} ({r['evictions']}) · ${r['miss_cost_usd']:.4f} · "
            f"{'-' if vw is None else format(vw, '.4f')}")  # fmt: skip


def markdown(data: dict) -> str:
    lines = ["# Golden numbers: every registered policy on every bundled trace", "",
             "Regenerate with `python experiments/golden.py`; `tests/test_golden.py` checks "
             "that the code still gives exactly these numbers (`golden.json` holds "
             "`miss_cost_usd` and `value_weighted_hit_rate` to 9 decimals). Default "
             "`price_per_mtok` (3.0) and `costs.*`. Cells: hits (evictions) · miss_cost_usd · "
             "value_weighted_hit_rate.", ""]  # fmt: skip
    for trace, by_policy in data.items():
        for fetch in FETCH:
            key = f"fetch={str(fetch).lower()}"
            lines += [f"## {trace}, demand {key}", "",
                      "| policy | " + " | ".join(map(str, BUDGETS)) + " |",
                      "|---|" + "---:|" * len(BUDGETS)]  # fmt: skip
            for policy, rows in by_policy.items():
                cells = [_cells(rows[key][str(b)]) for b in BUDGETS]
                lines.append(f"| {policy} | " + " | ".join(cells) + " |")
            lines.append("")
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="compare with the stored numbers")
    args = ap.parse_args()
    got = golden()
    if args.check:
        diffs = differences(json.loads((RESULTS / "golden.json").read_text()), got)
        print("\n".join(diffs) if diffs else "golden numbers unchanged")
        return 1 if diffs else 0
    write_json(RESULTS / "golden.json", got)
    write_text(RESULTS / "golden.md", markdown(got))
    print(f"wrote {RESULTS / 'golden.json'} and golden.md")
    return 0


if __name__ == "__main__":
    sys.exit(main())
