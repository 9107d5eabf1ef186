"""The segmented oracle (issue 16): time and tightness at a million references and events.

    .venv/bin/python benchmarks/bench_oracle_segments.py            # writes results/oracle_segments.md
    .venv/bin/python benchmarks/bench_oracle_segments.py --quick    # 200k references only, prints

1. One generated stream (``simple`` archetype, as in ``bench_oracle.py``) of about 200k and 1M
   needed references, budget 2048, no demand fetch: ``memlens.oracle.solve`` with the default
   settings (segmented LP, one round of cover cuts) on 1 and 2 processes, and without cover
   cuts (``cut_rounds=0``) on 1.
2. The generated 1M-event agent trace of ``bench_kernels.py`` (4 streams), the four default
   budgets: with and without cover cuts, time and gap.

``gap`` is ``oracle_upper - oracle_lower`` as a share of references (the replayed lower bound).
Wall clock on a shared 2-core machine, single runs, cache off; the load average is recorded.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

from agent_traces import agent_trace_path  # noqa: E402
from bench_oracle import stream_with_refs  # noqa: E402

from memlens._util.atomic import write_text  # noqa: E402
from memlens.oracle import OracleSettings, solve  # noqa: E402
from memlens.oracle.solve import clear_memo  # noqa: E402
from memlens.trace.io import load_trace  # noqa: E402

RESULTS = Path(__file__).parent / "results"
HEAD = ("| trace | references | budget | method | cut rounds | processes | solve s | "
        "oracle_upper | oracle_lower | gap % refs | segments |")  # fmt: skip
RULE = "|---|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|"


def row(label: str, trace, budget: int, method: str, n_jobs: int,
        cut_rounds: int = OracleSettings.cut_rounds) -> str:  # fmt: skip
    settings = OracleSettings(cache=False, method=method, n_jobs=n_jobs, cut_rounds=cut_rounds)
    clear_memo()  # n_jobs does not change the numbers, so the memo would answer
    t0 = time.perf_counter()
    r = solve(trace, budget, False, settings)
    wall = time.perf_counter() - t0
    gap = 100 * (r.upper - r.lower) / max(r.references, 1)
    line = (f"| {label} | {r.references:,} | {budget} | {r.upper_method} | {cut_rounds} | "
            f"{n_jobs} | "
            f"{wall:.1f} | {r.upper:,} | {r.lower:,} | {gap:.3f} | "
            f"{sum(s.segments for s in r.streams)} |")  # fmt: skip
    print(line, flush=True)
    return line


def one_stream(sizes: list[int]) -> list[str]:
    rows = [HEAD, RULE]
    for n in sizes:
        trace = stream_with_refs(n)
        label = f"simple, 1 stream, {trace.n_events:,} events"
        rows.append(row(label, trace, 2048, "auto", 1, cut_rounds=0))
        rows.append(row(label, trace, 2048, "auto", 1))
        rows.append(row(label, trace, 2048, "auto", 2))
    return rows


def agent(budgets: list[int]) -> list[str]:
    trace = load_trace(agent_trace_path(1_000_000))
    label = f"agent, {trace.n_streams} streams, {trace.n_events:,} events"
    rows = [HEAD, RULE]
    for b in budgets:
        rows.append(row(label, trace, b, "auto", 1, cut_rounds=0))
        rows.append(row(label, trace, b, "auto", 1))
    return rows


def rounds(counts: list[int]) -> list[str]:
    """Gap and time against the number of cut rounds: the 1M-reference stream at 2048 and the
    agent trace at 512 (the hardest budget)."""
    rows = [HEAD, RULE]
    simple = stream_with_refs(1_000_000)
    agent_trace = load_trace(agent_trace_path(1_000_000))
    for n in counts:
        rows.append(row("simple, 1 stream", simple, 2048, "auto", 1, cut_rounds=n))
        rows.append(row("agent, 1M events", agent_trace, 512, "auto", 1, cut_rounds=n))
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="200k references only; print")
    ap.add_argument("--rounds", type=int, nargs="+",
                    help="instead: gap and time at these cut-round counts (rounds.md)")  # fmt: skip
    args = ap.parse_args()
    if args.quick:
        one_stream([200_000])
        return
    if args.rounds:
        lines = ["# Oracle: cover-cut rounds against gap and time", "",
                 f"`.venv/bin/python benchmarks/bench_oracle_segments.py --rounds "
                 f"{' '.join(map(str, args.rounds))}` (2 shared cores, single runs, cache off).",
                 "", *rounds(args.rounds), "",
                 f"Load average at the end: {os.getloadavg()[0]:.1f}.", ""]  # fmt: skip
        write_text(RESULTS / "oracle_rounds.md", "\n".join(lines))
        return
    lines = ["# Segmented oracle: time and tightness", "",
             "`.venv/bin/python benchmarks/bench_oracle_segments.py` (2 shared cores, single "
             "runs, oracle cache off).", "", "## One long stream, budget 2048", "",
             *one_stream([200_000, 1_000_000]), "", "## The 1M-event agent trace", "",
             *agent([512, 1024, 2048, 4096]), "",
             f"Load average at the end: {os.getloadavg()[0]:.1f}.", ""]  # fmt: skip
    write_text(RESULTS / "oracle_segments.md", "\n".join(lines))


if __name__ == "__main__":
    main()
