"""Speed of the live memory manager (issue 29), written to results/live.md.

    .venv/bin/python benchmarks/bench_live.py [--items 10000] [--steps 2000] [--query-steps 1000]
                                              [--reopen-events 1000000]

* Step latency: one stream holds ``--items`` items written through ``MemoryManager.write``
  (texts and types cycled from a small agent-like set, one ``used`` of two recent items every
  five writes), recording to a plain ``.jsonl`` in a temporary folder (``fsync="close"``:
  every event is flushed to the operating system before the call returns).  Then ``--steps``
  steps are timed one by one, each a ``write`` followed by a ``context``: p50, p99 and max.
  Budget 2048 tokens (what the context holds is a few dozen items); the same at a budget that
  keeps every item resident is shown too, as the other extreme (``--all-resident-steps``).
  Wall-clock and CPU time (``time.thread_time``) per step: on a shared machine the wall clock
  includes time spent waiting for a core.
* ``context(stream, query)`` with retrieval on (``--query-steps``): the same fill, then
  each timed call after one more write (the incremental retrieval engine feeds it first).
* Reopen: a record of ``--reopen-events`` events (``generate_simple``, 8 streams, with a live
  header) opened with ``MemoryManager.reopen``: load, validate and replay it into the live
  state, best of ``--repeat`` runs.
"""

from __future__ import annotations

import argparse
import itertools
import os
import platform
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import orjson

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from memlens._util.atomic import write_text  # noqa: E402
from memlens.live import MemoryManager  # noqa: E402
from memlens.live.record import HEADER_KEY  # noqa: E402
from memlens.trace.generate import generate_simple  # noqa: E402
from memlens.trace.io import write_trace  # noqa: E402

POLICIES = ("window", "lru", "rule")
TEXTS = [
    ("user_input", "Please refund order INV-2024 for Alice; it arrived broken."),
    ("llm_thought", "I should look the order up first, then check the refund policy."),
    ("tool_result", "order INV-2024: status delivered, amount 42.50 USD, customer Alice"),
    ("agent_state", "plan: 1 lookup (done) 2 policy check 3 refund"),
    ("tool_result", "error: refund API timed out after 30 s"),
]


def fill(manager: MemoryManager, n: int) -> list[str]:
    """Write ``n`` items into stream ``a``, with a ``used`` of two recent ones every five."""
    ids: list[str] = []
    for k in range(n):
        type_, text = TEXTS[k % len(TEXTS)]
        ids.append(manager.write("a", f"{text} #{k}", type_, tokens=20 + 7 * (k % 9)))
        if k % 5 == 4:
            manager.used("a", ids[-2:])
    return ids


def step_latency(policy: str, items: int, steps: int, budget: int, folder: Path) -> dict:
    clock = itertools.count()
    manager = MemoryManager(policy, budget, folder / f"{policy}-{budget}.jsonl",
                            clock=lambda: float(next(clock)))  # fmt: skip
    fill(manager, items)
    lat, cpu = np.empty(steps), np.empty(steps)
    held = 0
    for k in range(steps):
        type_, text = TEXTS[k % len(TEXTS)]
        t0, c0 = time.perf_counter(), time.thread_time()
        manager.write("a", f"{text} step {k}", type_, tokens=20 + 7 * (k % 9))
        ctx = manager.context("a")
        lat[k], cpu[k] = time.perf_counter() - t0, time.thread_time() - c0
        held = len(ctx)
    manager.close()
    us, cpu_us = lat * 1e6, cpu * 1e6
    return {"policy": policy, "budget": budget, "p50": np.percentile(us, 50),
            "p99": np.percentile(us, 99), "max": us.max(), "held": held,
            "cpu_p50": np.percentile(cpu_us, 50), "cpu_p99": np.percentile(cpu_us, 99)}  # fmt: skip


CORPUS = "\n".join(text for _, text in TEXTS) + "\nrefund policy for broken orders\n"
QUERIES = ["what did the refund API say", "order status for Alice", "what is the plan"]


def query_latency(policy: str, items: int, steps: int, folder: Path) -> dict:
    """``context(stream, query)`` with retrieval on, ``items`` written: p50/p99 of the call
    alone (each after a write, so every call first feeds that write to the incremental
    retrieval engine), after one call that builds the engine over what was written."""
    corpus = folder / "corpus.txt"
    corpus.write_text(CORPUS)
    clock = itertools.count()
    manager = MemoryManager(policy, 2048, folder / f"query-{policy}.jsonl",
                            clock=lambda: float(next(clock)), retrieval={"k": 8, "budget": 512},
                            tiers={"short_term_tokens": 4096},
                            embeddings={"corpus": str(corpus), "cache": False})  # fmt: skip
    fill(manager, items)
    t0 = time.perf_counter()
    manager.context("a", query=QUERIES[0])
    first = time.perf_counter() - t0
    lat, cpu = np.empty(steps), np.empty(steps)
    retrieved = 0
    for k in range(steps):
        type_, text = TEXTS[k % len(TEXTS)]
        manager.write("a", f"{text} step {k}", type_, tokens=20 + 7 * (k % 9))
        t0, c0 = time.perf_counter(), time.thread_time()
        ctx = manager.context("a", query=QUERIES[k % len(QUERIES)])
        lat[k], cpu[k] = time.perf_counter() - t0, time.thread_time() - c0
        retrieved = sum(1 for i in ctx if i.tier != "working")
    manager.close()
    us, cpu_us = lat * 1e6, cpu * 1e6
    return {"policy": policy, "first_s": first, "p50": np.percentile(us, 50),
            "p99": np.percentile(us, 99), "cpu_p99": np.percentile(cpu_us, 99),
            "retrieved": retrieved}  # fmt: skip


def query_rows(args) -> list[str]:
    """The ``context(query)`` table (``--query-steps``)."""
    lines = ["", f"context(stream, query) with retrieval on (k=8, retrieval budget 512, "
             f"short-term cache 4,096 tokens, tfidf on a fixed corpus), {args.items:,} items "
             f"written, {args.query_steps:,} timed calls, each after a write:", "",
             "| policy | retrieved per call | first call s | p50 us | p99 us | CPU p99 us |",
             "|---|---:|---:|---:|---:|---:|"]  # fmt: skip
    with tempfile.TemporaryDirectory() as tmp:
        for policy in POLICIES:
            r = query_latency(policy, args.items, args.query_steps, Path(tmp))
            row = (f"| {policy} | {r['retrieved']} | {r['first_s']:.2f} | {r['p50']:.0f} | "
                   f"{r['p99']:.0f} | {r['cpu_p99']:.0f} |")  # fmt: skip
            print(row, flush=True)
            lines.append(row)
    return lines


def reopen_time(policy: str, body: Path, repeat: int, folder: Path) -> tuple[float, float]:
    """Best wall and CPU time of ``MemoryManager.reopen`` on ``body``'s events under
    ``policy``'s header."""
    path = folder / f"reopen-{policy}.jsonl"
    manager = MemoryManager(policy, 4096)  # no record: only its resolved config is wanted
    header = {"event": "header", "version": "1.1", HEADER_KEY: manager.config}
    manager.close()
    with open(path, "wb") as out:
        out.write(orjson.dumps(header) + b"\n")
        out.write(body.read_bytes())
    best = best_cpu = float("inf")
    for _ in range(repeat):
        t0, c0 = time.perf_counter(), time.process_time()
        manager = MemoryManager.reopen(path)
        best = min(best, time.perf_counter() - t0)
        best_cpu = min(best_cpu, time.process_time() - c0)
        manager.close()
    path.unlink()
    return best, best_cpu


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--items", type=int, default=10_000)
    ap.add_argument("--steps", type=int, default=2_000)
    ap.add_argument(
        "--all-resident-steps",
        type=int,
        default=200,
        help="steps at the budget that keeps every item resident (each is slow)",
    )
    ap.add_argument(
        "--query-steps",
        type=int,
        default=1_000,
        help="timed context(query) calls with retrieval on (0: skip)",
    )
    ap.add_argument("--reopen-events", type=int, default=1_000_000)
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "live.md"))
    args = ap.parse_args()
    lines = ["# Live manager speed (`benchmarks/bench_live.py`)\n",
             f"Python {platform.python_version()}, {platform.machine()}; one stream holding "
             f"{args.items:,} written items, then {args.steps:,} timed steps of write + context.\n",
             f"Load average at the start: {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores "
             "(wall-clock percentiles include time the process waited for a core; CPU time is "
             "the step's own work).\n",
             "| policy | budget | items in context | p50 us | p99 us | max us | CPU p50 us | CPU p99 us |",
             "|---|---:|---:|---:|---:|---:|---:|---:|"]  # fmt: skip
    with tempfile.TemporaryDirectory() as tmp:
        for budget, steps in ((2048, args.steps), (10**9, args.all_resident_steps)):
            if not args.items:
                break
            for policy in POLICIES:
                r = step_latency(policy, args.items, steps, budget, Path(tmp))
                row = (f"| {policy} | {budget:,} | {r['held']:,} | {r['p50']:.0f} | "
                       f"{r['p99']:.0f} | {r['max']:.0f} | {r['cpu_p50']:.0f} | "
                       f"{r['cpu_p99']:.0f} |")  # fmt: skip
                print(row, flush=True)
                lines.append(row)
        if args.items and args.query_steps:
            lines += query_rows(args)
        if not args.reopen_events:
            write_text(Path(args.out), "\n".join(lines) + "\n")
            return
        lines += ["", f"Reopen ({args.reopen_events:,}-event record, best of {args.repeat}):", "",
                  "| policy | events | reopen s | CPU s |", "|---|---:|---:|---:|"]  # fmt: skip
        body = Path(tmp) / "body.jsonl"
        n = write_trace(body, generate_simple(streams=8, events_per_stream=args.reopen_events // 8,
                                              seed=3))  # fmt: skip
        for policy in POLICIES:
            best, cpu = reopen_time(policy, body, args.repeat, Path(tmp))
            row = f"| {policy} | {n:,} | {best:.2f} | {cpu:.2f} |"
            print(row, flush=True)
            lines.append(row)
    write_text(Path(args.out), "\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
