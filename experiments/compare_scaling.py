"""``memlens compare`` time and peak memory vs trace size, oracle on and off, log-log.

    .venv/bin/python experiments/compare_scaling.py                    # 10k, 100k, 1M, 10M
    .venv/bin/python experiments/compare_scaling.py --sizes 10000 100000
    .venv/bin/python experiments/compare_scaling.py --from-bench      # draw the benchmark's rows

Each point is one fresh ``memlens compare`` process on a generated agent trace (4 streams,
seed 0; every registered policy at the default budgets, MLflow and resume off), measured by
``benchmarks/bench_compare.py`` (its docstring says how: parsed-trace cache warmed, wall time
and peak RSS from ``os.wait4``), which also keeps the rows in
``benchmarks/results/compare.json``.  ``--from-bench`` draws those rows without running
anything.  The oracle is solved (``oracle=on``, its cache off) only up to ``--oracle-max``
events (default 1M: its time grows fastest with size).  Outputs:
``results/compare_scaling.{png,pdf,md,tex,json}``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

from common import RESULTS, ROOT, commit, save_figure, write_tables

sys.path.insert(0, str(ROOT / "benchmarks"))
import bench_compare  # noqa: E402

ORACLE_MODES = ("off", "on")


def measure(sizes: list[int], oracle_max: int, workdir: Path, overrides: list[str]) -> list[dict]:
    """One benchmark row per (size, oracle mode), also merged into the benchmark's results."""
    argv = ["--sizes", *map(str, sizes), "--oracle-max", str(oracle_max), "--workdir",
            str(workdir)] + (["--", *overrides] if overrides else [])  # fmt: skip
    wanted = {(s, o) for s in sizes for o in ORACLE_MODES if o == "off" or s <= oracle_max}
    extra = " ".join(overrides)
    return [r for r in bench_compare.main(argv)
            if (r["events"], r["oracle"]) in wanted and r.get("overrides", "") == extra]  # fmt: skip


def from_bench(path: Path) -> list[dict]:
    """The benchmark's stored rows measured with no overrides (the default compare)."""
    return [r for r in json.loads(path.read_text())["rows"] if not r.get("overrides")]


def draw(rows: list[dict]):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (left, right) = plt.subplots(1, 2, figsize=(9, 3.8))
    for i, mode in enumerate(ORACLE_MODES):
        mine = sorted((r for r in rows if r["oracle"] == mode), key=lambda r: r["events"])
        if not mine:
            continue
        x = [r["events"] for r in mine]
        label = f"oracle {'on (bounds solved)' if mode == 'on' else 'off'}"
        left.plot(x, [r["wall_s"] for r in mine], marker="o", color=f"C{i}", label=label)
        right.plot(x, [r["peak_rss_mb"] for r in mine], marker="o", color=f"C{i}", label=label)
    left.set_ylabel("memlens compare wall time (s)")
    right.set_ylabel("peak RSS (MB)")
    for ax in (left, right):
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("trace size (events)")
        ax.grid(alpha=0.3, which="both")
        ax.legend(fontsize=8)
    fig.tight_layout()
    return fig


def tables(rows: list[dict]):
    header = ["events", "oracle", "jobs", "wall (s)", "s/job", "peak RSS (MB)", "load"]
    body = [[f"{r['events']:,}", r["oracle"], str(r["jobs"]), f"{r['wall_s']:.1f}",
             f"{r['wall_s'] / max(1, r['jobs']):.2f}", f"{r['peak_rss_mb']:,.0f}",
             f"{r['load_avg_1m']:.1f}"] for r in sorted(rows, key=lambda r: (r["events"],
                                                                              r["oracle"]))]  # fmt: skip
    return [("agent traces, 4 streams; every registered policy x 4 budgets; MLflow and resume "
             f"off; shared {os.cpu_count()}-core machine (1-minute load average per row)",
             header, body)]  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", type=int, nargs="+", default=[10**4, 10**5, 10**6, 10**7])
    ap.add_argument("--oracle-max", type=int, default=10**6, help="largest trace solved")
    ap.add_argument("--workdir", type=Path, default=Path("/tmp/memlens-bench-compare"))
    ap.add_argument("--from-bench", action="store_true",
                    help="draw benchmarks/results/compare.json, run nothing")  # fmt: skip
    ap.add_argument("--out", type=Path, default=RESULTS)
    args = ap.parse_args()
    if args.from_bench:
        rows = from_bench(bench_compare.RESULTS / "compare.json")
    else:
        rows = measure(args.sizes, args.oracle_max, args.workdir, [])
    if not rows:
        raise SystemExit("no rows to draw")
    args.out.mkdir(parents=True, exist_ok=True)
    doc = {"commit": commit(), "rows": rows}
    (args.out / "compare_scaling.json").write_text(json.dumps(doc, indent=1) + "\n")
    paths = save_figure(draw(rows), "compare_scaling", args.out)
    paths += write_tables("compare_scaling", "memlens compare time and memory vs trace size",
                          tables(rows), args.out)  # fmt: skip
    print("\n".join(str(p) for p in paths))


if __name__ == "__main__":
    main()
