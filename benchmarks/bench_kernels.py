"""Compiled kernels of every bundled policy vs the reference engine (issue 16), events/s.

    .venv/bin/python benchmarks/bench_kernels.py                       # 1M events, writes results
    .venv/bin/python benchmarks/bench_kernels.py --policies rule --events 300000   # a quick look

The trace is a generated agent trace (``benchmarks/agent_traces.py``: archetype ``agent``, 4
streams, seed 0).  For every registered policy whose class has a compiled kernel: the kernel's
events/s at each budget (best of ``--repeat``, after a warm-up replay that compiles or loads
the kernel and does the per-trace preparation), the mean number of items held at a request
(to show the cost is flat in it), and the reference engine's events/s at the smallest and
largest budget on the first ``--reference-events`` events (the "before" column: every policy
ran on the reference engine before this issue).  Wall clock on a shared 2-core machine: the
load average is recorded.
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

from agent_traces import agent_trace_path  # noqa: E402

from memlens._util.atomic import write_text  # noqa: E402
from memlens.config.compose import make_policy  # noqa: E402
from memlens.config.store import registered_policies  # noqa: E402
from memlens.policy import kernel_of  # noqa: E402
from memlens.simulator import simulate  # noqa: E402
from memlens.trace.io import load_trace  # noqa: E402

RESULTS = Path(__file__).parent / "results"
BUDGETS = [1024, 4096, 16384, 65536]


def rate(trace, name: str, budget: int, engine: str, repeat: int) -> tuple[float, float]:
    """Best events/s of ``repeat`` replays, and the mean items held at a request."""
    best, res = float("inf"), None
    for _ in range(repeat):
        policy = make_policy(name)  # composing its config is not part of the replay
        t0 = time.perf_counter()
        res = simulate(trace, policy, budget, engine=engine, progress=False)
        best = min(best, time.perf_counter() - t0)
    mean_tok = float(trace.item_tokens.mean()) if trace.n_items else 1.0
    held = float(res.context_tokens.mean()) / mean_tok if res.context_tokens.size else 0.0
    return trace.n_events / best, held


def measure(names: list[str], events: int, ref_events: int, repeat: int) -> list[dict]:
    trace = load_trace(agent_trace_path(events))
    small = load_trace(agent_trace_path(ref_events))
    rows = []
    for name in names:
        if kernel_of(make_policy(name)) is None:
            print(f"{name}: no compiled kernel", flush=True)
            rows.append({"policy": name, "kernel": False})
            continue
        simulate(small, make_policy(name), BUDGETS[0], engine="fast", progress=False)  # warm up
        row: dict = {"policy": name, "kernel": True}
        for b in BUDGETS:
            row[f"fast_{b}"], row[f"held_{b}"] = rate(trace, name, b, "fast", repeat)
        for b in (BUDGETS[0], BUDGETS[-1]):
            row[f"ref_{b}"], _ = rate(small, name, b, "reference", 1)
        print(row, flush=True)
        rows.append(row)
    return rows


def table(rows: list[dict], events: int, ref_events: int) -> str:
    head = " | ".join(f"fast @{b} (held)" for b in BUDGETS)
    out = [f"| policy | {head} | reference @{BUDGETS[0]} | reference @{BUDGETS[-1]} | "
           "speed-up @1024 |", "|---" * (4 + len(BUDGETS)) + "|"]  # fmt: skip
    for r in rows:
        if not r["kernel"]:
            out.append(f"| {r['policy']} | no compiled kernel |" + " |" * (len(BUDGETS) + 2))
            continue
        cells = " | ".join(f"{r[f'fast_{b}'] / 1e6:.2f}M ({r[f'held_{b}']:.0f})" for b in BUDGETS)
        lo, hi = BUDGETS[0], BUDGETS[-1]
        out.append(f"| {r['policy']} | {cells} | {r[f'ref_{lo}'] / 1e3:.0f}k | "
                   f"{r[f'ref_{hi}'] / 1e3:.0f}k | {r[f'fast_{lo}'] / r[f'ref_{lo}']:.0f}x |")  # fmt: skip
    return "\n".join(out)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--policies", nargs="*", default=None)
    ap.add_argument("--events", type=int, default=1_000_000)
    ap.add_argument("--reference-events", type=int, default=100_000)
    ap.add_argument("--repeat", type=int, default=2)
    args = ap.parse_args()
    names = args.policies or registered_policies()
    rows = measure(names, args.events, args.reference_events, args.repeat)
    md = table(rows, args.events, args.reference_events)
    print(md)
    if args.policies is None and args.events == 1_000_000:
        flag = "" if args.repeat == 2 else f" --repeat {args.repeat}"
        header = (f"# Compiled kernels vs the reference engine\n\n`.venv/bin/python "
                  f"benchmarks/bench_kernels.py{flag}`: generated agent trace of {args.events:,} "
                  f"events (fast) and {args.reference_events:,} events (reference); events/s, "
                  f"best of {args.repeat}; in brackets the mean items held at a request.  "
                  f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores, "
                  f"load average {os.getloadavg()[0]:.1f} at the end.\n\n")  # fmt: skip
        write_text(RESULTS / "kernels.md", header + md + "\n")


if __name__ == "__main__":
    main()
