"""The score-scanning kernels (MemoryBank, MemoryOS heat, Generative Agents), events/s.

    .venv/bin/python benchmarks/bench_scan_kernels.py --events 300000
    .venv/bin/python benchmarks/bench_scan_kernels.py --events 1000000 \
        --policies generative_agents --budgets 1024 65536 262144 1048576

Same generated agent trace as ``bench_kernels.py`` (``benchmarks/agent_traces.py``), but the
policy is built before the clock starts (``make_policy`` composes the Hydra config: up to a
second on a loaded machine, which would dominate a 300k-event replay), and two rates are given
per budget: the whole ``simulate`` call (argument arrays, per-trace preparation, kernel) and the
compiled loop alone (``SimResult.wall_s``); best of ``--repeat``, after a warm-up replay.  Also
the mean items held at a request, the number of evictions, the tree nodes a victim choice
visits (mean over the replay: the branch and bound's cost, ``scantree.tree_argmin`` counts
them; for Generative Agents, which scans, the candidates scored), and, for comparison, the LRU kernel (``memlens.kernels.queues``) on the same trace at the
same budgets.  Wall clock on a shared machine:
the load average is printed.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from agent_traces import agent_trace_path  # noqa: E402

from memlens.config.compose import make_policy
from memlens.simulator import simulate  # noqa: E402
from memlens.trace.io import load_trace  # noqa: E402

BUDGETS = [1024, 4096, 16384, 65536]
POLICIES = ["memorybank", "memoryos_heat", "generative_agents", "lru"]
SCAN_KERNELS = {"memorybank", "memoryos_heat", "generative_agents"}


def measure(trace, name: str, budget: int, repeat: int) -> tuple[float, float, float, int]:
    """(simulate events/s, kernel events/s, mean items held, evictions) at ``budget``."""
    policy = make_policy(name)
    best_total, best_kernel, res = float("inf"), float("inf"), None
    for _ in range(repeat):
        t0 = time.perf_counter()
        res = simulate(trace, policy, budget, engine="fast", progress=False)
        best_total = min(best_total, time.perf_counter() - t0)
        best_kernel = min(best_kernel, res.wall_s)
    mean_tok = float(trace.item_tokens.mean())
    held = float(res.context_tokens.mean()) / mean_tok
    return (trace.n_events / best_total, trace.n_events / best_kernel, held,
            int(res.evictions.sum()))  # fmt: skip


def nodes_per_choice(trace, name: str, budget: int, notes: list[str]) -> str:
    """Mean tree nodes visited per victim choice in one replay ("-" for a kernel without the
    bound tree; Generative Agents, which scans: the candidates scored per choice): the scan
    kernel's own argument builder, then its loop, then its counters.  For Generative Agents
    ``notes`` gets how often the relevances were re-scored (a new query vector, read at the
    next victim choice) and over how many candidates."""
    if name not in SCAN_KERNELS:
        return "-"
    module = importlib.import_module(f"memlens.kernels.{name}")
    _, args = module._arguments(make_policy(name), trace, budget, False)
    module.replay_scan(*args)
    prm = args[5][0]
    if name == "generative_agents":
        notes.append(f"generative_agents at {budget}: {int(prm[4]):,} re-scoring passes, "
                     f"{prm[5] / max(prm[4], 1.0):.1f} candidates each")  # fmt: skip
    return f"{prm[7] / max(prm[6], 1.0):.1f}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--events", type=int, default=300_000)
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--policies", nargs="*", default=POLICIES)
    ap.add_argument("--budgets", nargs="*", type=int, default=BUDGETS)
    args = ap.parse_args()
    trace = load_trace(agent_trace_path(args.events))
    print(f"{trace.n_events:,} events, {trace.n_items:,} items, {trace.n_streams} streams")
    print("| policy | budget | items held | evictions | nodes / choice | simulate ev/s | "
          "kernel ev/s |\n|---|---|---|---|---|---|---|")  # fmt: skip
    notes: list[str] = []
    for name in args.policies:
        simulate(trace, make_policy(name), BUDGETS[0], engine="fast", progress=False)  # warm up
        for b in args.budgets:
            total, kernel, held, ev = measure(trace, name, b, args.repeat)
            nodes = nodes_per_choice(trace, name, b, notes)
            print(f"| {name} | {b} | {held:.0f} | {ev:,} | {nodes} | {total / 1e6:.2f}M | "
                  f"{kernel / 1e6:.2f}M |", flush=True)  # fmt: skip
    print("\n".join(notes))
    print(f"load average at the end: {os.getloadavg()[0]:.1f} ({os.cpu_count()} cores)")


if __name__ == "__main__":
    main()
