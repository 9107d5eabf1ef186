"""What trace format 1.1 (alternatives in ``needs``) costs: parse and replay, CPU time.

    python benchmarks/bench_alternatives.py                 # this checkout
    git archive HEAD memlens | tar -x -C /tmp/old           # an older tree, same workload:
    PYTHONPATH=/tmp/old python benchmarks/bench_alternatives.py

Workloads (seeded):

* ``parse``: a version 1 trace file of 100,000 writes and 100,000 requests needing 3 earlier
  items each, loaded with ``load_trace`` (no cache);
* ``replay``: a classic Zipf trace (300,000 accesses over 20,000 keys of 1-63 tokens, first
  access = write), LRU with demand fetch at 30,000 tokens, compiled kernel and reference engine;
* with a tree that reads format 1.1, the same two with half the needs turned into groups of
  1-3 alternatives (``memlens.testing.with_alternatives``).

Times are CPU seconds of this process (``time.process_time``), best of several runs: on a
shared machine wall time mostly measures the neighbours.  The hit counts are the parity check.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time

import numpy as np
from memlens.policies.lru import LRU

import memlens
from memlens.simulator import simulate
from memlens.trace.classic import classic_trace, zipf_keys
from memlens.trace.io import load_trace, trace_from_events, write_trace


def best_cpu(fn, repeats: int):
    best, out = float("inf"), None
    for _ in range(repeats):
        t0 = time.process_time()
        out = fn()
        best = min(best, time.process_time() - t0)
    return best, out


def parse_events(n: int, rng: np.random.Generator):
    for k in range(n):
        yield {"event": "write", "id": f"m{k}", "tokens": 10, "type": "tool_result"}
        needs = [f"m{int(x)}" for x in rng.integers(0, k + 1, 3)]
        yield {"event": "request", "id": f"r{k}", "needs": needs}


def classic_events(tr) -> list[dict]:
    ids = list(tr.item_id)
    out = []
    for e in range(tr.n_events):
        x = int(tr.ev_ref[e])
        if int(tr.ev_kind[e]) == 0:
            out.append({"event": "write", "id": ids[x], "tokens": int(tr.item_tokens[x]),
                        "type": "tool_result"})  # fmt: skip
        else:
            out.append({"event": "request", "id": f"r{x}",
                        "needs": [ids[i] for i in tr.needs_of(x).tolist()]})  # fmt: skip
    return out


def alternatives(events: list[dict]) -> list[dict] | None:
    try:
        from memlens.testing import with_alternatives
    except ImportError:
        return None  # a tree without format 1.1
    return with_alternatives(events, np.random.default_rng(1))


def parse_rows(n: int, folder: str) -> list[str]:
    events = list(parse_events(n, np.random.default_rng(0)))
    rows = []
    for label, evs in (("v1", events), ("1.1", alternatives(events))):
        if evs is None:
            continue
        path = os.path.join(folder, f"parse-{label}.jsonl")
        write_trace(path, evs)
        cpu, tr = best_cpu(lambda p=path: load_trace(p), 3)
        rows.append(f"| parse | {label} | {tr.n_events / cpu:,.0f} | needs {tr.n_references:,} |")
    return rows


def replay_rows(accesses: int) -> list[str]:
    rng = np.random.default_rng(7)
    v1 = classic_trace(zipf_keys(accesses, 20_000, 0.8, rng), rng.integers(1, 64, size=20_000))
    traces = [("v1", v1)]
    alt = alternatives(classic_events(v1))
    if alt is not None:
        traces.append(("1.1", trace_from_events(alt)))
    rows = []
    for label, tr in traces:
        for engine, repeats in (("fast", 7), ("reference", 2)):

            def go(tr=tr, engine=engine):
                return simulate(tr, LRU(), budget=30_000, demand_fetch=True, engine=engine)

            go()  # warm-up (numba cache load)
            cpu, res = best_cpu(go, repeats)
            rows.append(f"| replay LRU {engine} | {label} | {tr.n_events / cpu:,.0f} | "
                        f"hits {int(res.need_hit.sum()):,} |")  # fmt: skip
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--requests", type=int, default=100_000, help="parse workload size")
    ap.add_argument("--accesses", type=int, default=300_000, help="replay workload size")
    args = ap.parse_args()
    print(f"memlens from {os.path.dirname(memlens.__file__)}\n")
    print("| workload | format | events/s (CPU) | check |\n|---|---|---|---|")
    with tempfile.TemporaryDirectory() as folder:
        for line in parse_rows(args.requests, folder):
            print(line, flush=True)
    for line in replay_rows(args.accesses):
        print(line, flush=True)


if __name__ == "__main__":
    main()
