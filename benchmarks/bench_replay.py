"""Replay speed: MemLens' window and LRU against cachetools and libCacheSim, in one process.

    python benchmarks/bench_replay.py            # full: 1,000,000 events (about a minute)
    python benchmarks/bench_replay.py --events 100000

Two workloads, both 1,000,000 events:

* a classic cache trace (Zipf 0.8 keys, unit sizes) converted to a MemLens trace (first access
  = write, later access = request needing it), replayed with demand fetch; the very same key
  sequence goes through cachetools' LRUCache (a Python loop) and libCacheSim's LRU (its C loop
  over a plain-text trace).  Universes of 10,000 and 1,000,000 objects with the budget at 10%
  of the universe show whether the cost per event grows with the number of items held.
* a generated agent trace (``memlens.trace.generate``: 8 streams, all event kinds, pins).

Every engine's hit count is printed next to its speed: equal counts are the parity check.
Events/s = events / wall time of the replay alone (trace conversion excluded), best of 3.
"""

from __future__ import annotations

import argparse
import json
import platform
import tempfile
import time
from pathlib import Path

import numpy as np
from memlens.policies.lru import LRU
from memlens.policies.window import SlidingWindow

from memlens._util.atomic import write_text
from memlens.analyze.metrics import compute_metrics
from memlens.simulator import simulate
from memlens.trace.classic import classic_trace, zipf_keys
from memlens.trace.generate import generate_simple
from memlens.trace.io import trace_from_events

RESULTS = Path(__file__).parent / "results"


def row(workload: str, engine: str, events: int, wall: float, hits) -> dict:
    return {"workload": workload, "engine": engine, "events_per_s": events / wall, "hits": hits,
            "wall_s": wall}  # fmt: skip


def best_of(fn, repeats: int = 3):
    best, out = float("inf"), None
    for _ in range(repeats):
        t0 = time.perf_counter()
        out = fn()
        best = min(best, time.perf_counter() - t0)
    return best, out


def memlens_row(trace, policy_cls, engine, budget, demand_fetch, label):
    def go():
        return simulate(
            trace,
            policy_cls(),
            budget=budget,
            demand_fetch=demand_fetch,
            engine=engine,
            progress=False,
        )

    go()  # warm-up (numba cache load)
    wall, res = best_of(go)
    hits = compute_metrics(trace, res)["overall"]["hits"]
    return row(label, f"memlens {policy_cls.name} ({engine})", trace.n_events, wall, hits)


def cachetools_row(keys, capacity, label):
    import cachetools

    key_list = keys.tolist()

    def go():
        cache = cachetools.LRUCache(maxsize=capacity)
        hits = 0
        for k in key_list:
            if k in cache:
                hits += 1
                cache[k]
            else:
                cache[k] = k
        return hits

    wall, hits = best_of(go, repeats=1)
    return row(label, "cachetools.LRUCache (Python loop)", len(key_list), wall, hits)


def libcachesim_row(keys, capacity, label):
    try:
        import libcachesim as lcs
    except ImportError:
        return None
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "keys.txt"
        np.savetxt(path, keys + 1, fmt="%d")  # libCacheSim's text reader: ids from 1

        def go():
            params = lcs.ReaderInitParam()
            params.ignore_obj_size = True
            reader = lcs.TraceReader(
                trace=str(path), trace_type=lcs.TraceType.PLAIN_TXT_TRACE, reader_init_params=params
            )
            miss_ratio, _ = lcs.LRU(cache_size=capacity).process_trace(reader)
            return round((1.0 - miss_ratio) * len(keys))

        wall, hits = best_of(go)
    return row(label, "libCacheSim LRU (C loop, incl. text parsing)", len(keys), wall, hits)


def classic_rows(events: int) -> list[dict]:
    """The classic cache workloads: MemLens' engines, cachetools and libCacheSim on one trace."""
    rows = []
    for universe in (10_000, 1_000_000):
        keys = zipf_keys(events, universe, 0.8, np.random.default_rng(0))
        capacity = universe // 10
        trace = classic_trace(keys)
        label = f"classic zipf, {universe:,} objects, budget {capacity:,}"
        found = [memlens_row(trace, cls, engine, capacity, True, label)
                 for cls in (SlidingWindow, LRU) for engine in ("fast", "reference")]  # fmt: skip
        found += [cachetools_row(keys, capacity, label), libcachesim_row(keys, capacity, label)]
        for r in filter(None, found):
            print(f"{r['workload']:<45} {r['engine']:<45} {r['events_per_s']:>12,.0f} ev/s  "
                  f"hits={r['hits']}")  # fmt: skip
            rows.append(r)
    return rows


def agent_rows(events: int) -> tuple[list[dict], float]:
    """The generated agent workload (both MemLens engines); also the seconds to build it."""
    t0 = time.perf_counter()
    agent = trace_from_events(generate_simple(seed=0, streams=8, events_per_stream=events // 8))
    build = time.perf_counter() - t0
    label = f"generated agent trace ({agent.n_events:,} events, 8 streams)"
    rows = []
    for cls in (SlidingWindow, LRU):
        for engine in ("fast", "reference"):
            rows.append(memlens_row(agent, cls, engine, 2048, False, label))
            r = rows[-1]
            print(f"{r['workload']:<45} {r['engine']:<45} {r['events_per_s']:>12,.0f} ev/s")
    return rows, build


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--events", type=int, default=1_000_000)
    ap.add_argument("--out", type=Path, default=RESULTS / "replay.md")
    args = ap.parse_args()
    rows = classic_rows(args.events)
    agent, build = agent_rows(args.events)
    rows += agent
    lines = [
        "# Replay speed (benchmarks/bench_replay.py)",
        "",
        f"Machine: {platform.machine()}, {platform.python_implementation()} "
        f"{platform.python_version()}; events per workload: {args.events:,}; best of 3 "
        f"(cachetools: 1 run). Generating + validating the agent trace took {build:.1f} s "
        "(not counted).",
        "",
        "| workload | engine | events/s | hits |",
        "|---|---|---:|---:|",
    ]
    for r in rows:
        lines.append(
            f"| {r['workload']} | {r['engine']} | {r['events_per_s']:,.0f} | {r['hits']} |"
        )
    write_text(args.out, "\n".join(lines) + "\n")
    write_text(args.out.with_suffix(".json"), json.dumps(rows, indent=2) + "\n")
    print(f"\nwritten to {args.out}")


if __name__ == "__main__":
    main()
