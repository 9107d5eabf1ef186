"""Figure 5: simulator throughput and oracle solve time vs trace size, log-log.

    .venv/bin/python experiments/scaling.py                       # 10k, 100k, 1M events
    .venv/bin/python experiments/scaling.py --sizes 10000 100000 1000000 3000000

Traces are generated (``memlens.trace.generate``, archetype ``simple``, 8 streams, seed 0) at each
size, held in memory as columnar traces, and replayed at budget 2048 (demand fetch off):

* throughput, events/s of the replay alone (best of ``--repeat``, after a warm-up
  replay that compiles the fast engine): LRU on the compiled fast
  engine, and the rule scorer and LRU on the reference engine (the per-event Python loop every
  custom policy runs on);
* oracle: ``memlens.oracle.solve`` with its cache off (``method=auto``: the LP per stream up to
  200,000 references, the relaxed bound beyond), wall time of the whole solve.

The default stops at 1M events.  ``--sizes ... 10000000 --oracle-max 1000000`` adds a
10M-event trace for the replays only: generating it is pure Python, one dict per event (the
whole 10k-10M run took 20 min, peak RSS 6.3 GB), and the oracle's time grew about 20x per
decade of size here (0.6 s, 11 s, about 250 s for 10k, 100k, 1M events), so a 10M solve would
take over an hour on this shared 2-core machine.  Timings are wall clock on a shared machine (the load average is
recorded).  Outputs: results/scaling.{png,pdf,md,tex,json}.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

from common import RESULTS, commit, save_figure, write_tables

from memlens.config.compose import make_policy
from memlens.oracle.solve import OracleSettings, solve
from memlens.simulator import simulate
from memlens.trace.generate import generate_simple
from memlens.trace.io import trace_from_events

ENGINES = [("lru", "fast"), ("lru", "reference"), ("rule", "reference")]
BUDGET = 2048


def make_trace(events: int):
    per = max(1, events // 8)
    return trace_from_events(generate_simple(streams=8, events_per_stream=per, seed=0),
                             source=f"generated:simple({8 * per} events)")  # fmt: skip


def best_rate(trace, name: str, engine: str, repeat: int) -> float:
    best = float("inf")
    for _ in range(repeat):
        start = time.perf_counter()
        simulate(trace, make_policy(name), BUDGET, engine=engine, progress=False)
        best = min(best, time.perf_counter() - start)
    return trace.n_events / best


def measure(sizes: list[int], repeat: int, oracle_max: int) -> list[dict]:
    warm = make_trace(2_000)
    for name, engine in ENGINES:  # compile the fast engine's kernels before any timing
        simulate(warm, make_policy(name), BUDGET, engine=engine, progress=False)
    out = []
    for size in sizes:
        trace = make_trace(size)
        row = {"events": trace.n_events, "references": int(trace.need_request.size)}
        for name, engine in ENGINES:
            row[f"{name}_{engine}_events_per_s"] = best_rate(trace, name, engine,
                                                             repeat if size <= 10**6 else 1)  # fmt: skip
        if trace.n_events <= oracle_max:
            start = time.perf_counter()
            solve(trace, BUDGET, False, OracleSettings(cache=False))
            row["oracle_solve_s"] = time.perf_counter() - start
        else:
            row["oracle_solve_s"] = None
        print(row, flush=True)
        out.append(row)
        del trace
    return out


def draw(rows: list[dict]):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (left, right) = plt.subplots(1, 2, figsize=(9, 3.8))
    x = [r["events"] for r in rows]
    for name, engine in ENGINES:
        left.plot(x, [r[f"{name}_{engine}_events_per_s"] for r in rows], marker="o",
                  label=f"{name} ({engine} engine)")  # fmt: skip
    left.set_ylabel("replay throughput (events/s)")
    timed = [r for r in rows if r["oracle_solve_s"] is not None]
    right.plot([r["events"] for r in timed], [r["oracle_solve_s"] for r in timed], marker="o",
               color="C3", label="oracle.solve (LP / relaxed)")  # fmt: skip
    right.set_ylabel("oracle solve time (s)")
    for ax in (left, right):
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("trace size (events)")
        ax.grid(alpha=0.3, which="both")
        ax.legend(fontsize=8)
    fig.tight_layout()
    return fig


def tables(rows: list[dict]):
    header = ["events", "references", *[f"{n} {e} (events/s)" for n, e in ENGINES],
              "oracle solve (s)"]  # fmt: skip
    body = [[f"{r['events']:,}", f"{r['references']:,}",
             *[f"{r[f'{n}_{e}_events_per_s']:,.0f}" for n, e in ENGINES],
             "-" if r["oracle_solve_s"] is None else f"{r['oracle_solve_s']:.2f}"] for r in rows]  # fmt: skip
    load = os.getloadavg()
    return [(f"budget {BUDGET}, 8 streams; shared 2-core machine, load average {load[0]:.1f} at "
             "the end", header, body)]  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", type=int, nargs="+", default=[10_000, 100_000, 1_000_000])
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--oracle-max", type=int, default=10**7, help="largest trace to solve")
    ap.add_argument("--out", type=Path, default=RESULTS)
    args = ap.parse_args()
    rows = measure(args.sizes, args.repeat, args.oracle_max)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "scaling.json").write_text(json.dumps({"commit": commit(), "rows": rows}, indent=1))
    paths = save_figure(draw(rows), "scaling", args.out)
    paths += write_tables("scaling", "Throughput and oracle time vs size (figure 5)", tables(rows),
                          args.out)  # fmt: skip
    print("\n".join(str(p) for p in paths))


if __name__ == "__main__":
    main()
