"""Oracle bounds: LP speed and scaling, and tightness (oracle_upper - oracle_lower).

    python benchmarks/bench_oracle.py                 # full (a few minutes; writes results)
    python benchmarks/bench_oracle.py --sizes 10000   # quick look, nothing written

1. Scaling: one generated agent stream (``memlens.trace.generate``, archetype ``simple``) cut to about
   10k / 50k / 100k / 200k needed references, budget 2048 tokens, both demand-fetch settings.
   Reported: keep-intervals, model build, LP (HiGHS) and rounding times, the whole
   ``memlens.oracle.solve`` (LP + rounding + the two reference-simulator replays behind
   ``oracle_lower``), the bounds, and the PFOO-L relaxed bound with its time.
2. Tightness: ``oracle_upper - oracle_lower`` as a share of references, on the bundled real
   traces under ``datasets/`` that exist (LoCoMo, tau-bench), the bundled generated default and
   a 4-stream generated trace, at several budgets, with LRU's hit rate for scale.

Times are single runs on a shared machine (wall clock, ``time.perf_counter``).
"""

from __future__ import annotations

import argparse
import platform
import time
from pathlib import Path

import numpy as np
import scipy
from memlens.policies.lru import LRU

from memlens._util.atomic import write_text
from memlens.config.store import DATA_DIR
from memlens.oracle import OracleSettings, solve
from memlens.oracle.bounds import lp_upper, relaxed_upper
from memlens.oracle.model import build_model
from memlens.oracle.rounding import round_schedule
from memlens.simulator import simulate
from memlens.trace.generate import generate_simple
from memlens.trace.io import load_trace, trace_from_events

RESULTS = Path(__file__).parent / "results"
NOCACHE = OracleSettings(cache=False, lp_max_references=10**9)
REAL = [
    "locomo/locomo10-after_evidence.jsonl.gz",
    "locomo/locomo10-end.jsonl.gz",
    "taubench/airline.jsonl.gz",
]


def stream_with_refs(n_refs: int):
    """A single generated stream with about ``n_refs`` needed references."""
    events = int(n_refs / 0.577) + 50  # the simple archetype needs ~0.58 references per event
    return trace_from_events(
        list(generate_simple(seed=1, streams=1, events_per_stream=events)), source=f"gen{n_refs}"
    )


def scaling(sizes: list[int]) -> list[str]:
    rows = [
        "| references | demand_fetch | gaps | build s | LP s | round s | solve() s | "
        "oracle_upper | oracle_lower | gap % refs | relaxed (PFOO-L) | relaxed s |",
        "|---:|:---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for n in sizes:
        t = stream_with_refs(n)
        for df in (False, True):
            t0 = time.perf_counter()
            m = build_model(t, 0, 2048, df)
            t1 = time.perf_counter()
            up, y = lp_upper(m)
            t2 = time.perf_counter()
            round_schedule(m, y)
            t3 = time.perf_counter()
            relaxed = relaxed_upper(m)
            t4 = time.perf_counter()
            r = solve(t, 2048, df, NOCACHE)
            t5 = time.perf_counter()
            assert r.upper == up
            gap = 100 * (r.upper - r.lower) / r.references
            rows.append(
                f"| {t.n_references:,} | {df} | {m.n_gaps:,} | {t1 - t0:.2f} | {t2 - t1:.2f} | "
                f"{t3 - t2:.2f} | {t5 - t4:.2f} | {r.upper:,} | {r.lower:,} | {gap:.2f} | "
                f"{relaxed:,} | {t4 - t3:.3f} |"
            )
            print(rows[-1], flush=True)
    return rows


def tightness(budgets: list[int]) -> list[str]:
    traces = [(p, load_trace(DATA_DIR / p)) for p in REAL if (DATA_DIR / p).exists()]
    traces.append(
        ("default/agent-small.jsonl.gz", load_trace(DATA_DIR / "default/agent-small.jsonl.gz"))
    )
    gen = trace_from_events(list(generate_simple(seed=11, streams=4, events_per_stream=5000)))
    traces.append(("generated simple, 4 x 5,000 events, seed 11", gen))
    rows = [
        "| trace | refs | streams | budget | demand_fetch | oracle_upper | oracle_lower | "
        "gap (refs) | gap % refs | LRU hit rate | upper | lower methods | solve s |",
        "|---|---:|---:|---:|:---:|---:|---:|---:|---:|---:|---|---|---:|",
    ]
    gaps = []
    for name, t in traces:
        for budget in budgets:
            for df in (False, True):
                t0 = time.perf_counter()
                r = solve(t, budget, df, OracleSettings(cache=False))
                dt = time.perf_counter() - t0
                lru = simulate(t, LRU(), budget, df).need_hit.mean()
                methods = sorted({s.lower_method for s in r.streams if s.references})
                gap = 100 * (r.upper - r.lower) / r.references
                gaps.append(gap)
                rows.append(
                    f"| {name} | {r.references:,} | {t.n_streams} | {budget} | {df} | "
                    f"{r.upper / r.references:.4f} | {r.lower / r.references:.4f} | "
                    f"{r.upper - r.lower} | {gap:.2f} | {lru:.4f} | {r.upper_method} | "
                    f"{'+'.join(methods)} | {dt:.1f} |"
                )
                print(rows[-1], flush=True)
    g = np.asarray(gaps)
    rows += [
        "",
        f"Gap over all {g.size} rows: median {np.median(g):.2f}%, mean {g.mean():.2f}%, "
        f"max {g.max():.2f}% of references; {int((g < 1).sum())} of {g.size} under 1%.",
    ]
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", type=int, nargs="*", default=[10_000, 50_000, 100_000, 200_000])
    ap.add_argument("--budgets", type=int, nargs="*", default=[512, 1024, 2048, 4096, 8192])
    ap.add_argument("--no-write", action="store_true", help="print only")
    args = ap.parse_args()
    full = args.sizes == [10_000, 50_000, 100_000, 200_000] and not args.no_write
    lines = [
        "# Oracle bounds: speed and tightness",
        "",
        "Command: `.venv/bin/python benchmarks/bench_oracle.py` "
        f"({platform.processor() or platform.machine()}, Python {platform.python_version()}, "
        f"scipy {scipy.__version__} / HiGHS; machine shared with other jobs, single runs).",
        "",
        "## LP bound scaling (one stream, budget 2048 tokens)",
        "",
        "`solve() s` is the whole `memlens.oracle.solve`: model, LP, rounding and the two",
        "reference-simulator replays that make `oracle_lower` what `policy=oracle` scores.",
        "",
        *scaling(args.sizes),
        "",
        "## Tightness: oracle_upper - oracle_lower",
        "",
        "Rates are hits / needed references.  `upper`: `lp` (LP bound), `milp` (HiGHS dual bound,",
        "streams with at most 150 keep-intervals), joined with `+` when streams differ.",
        "`lower methods`: how the replayed plan was made",
        "(`lp-round`: LP rounded and greedily extended; `milp`: integer optimum of a small",
        "stream; `belady`: Belady-Size beat the rounded plan).",
        "",
        *tightness(args.budgets),
        "",
    ]
    if full:
        write_text(RESULTS / "oracle.md", "\n".join(lines))
        print(f"written to {RESULTS / 'oracle.md'}")


if __name__ == "__main__":
    main()
