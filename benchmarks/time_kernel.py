"""Events per second of one policy's compiled replay at budgets 1024 and 65536 (best of 5).

    .venv/bin/python benchmarks/time_kernel.py . memlens.policies.lru:LRU

The first argument is the checkout whose ``benchmarks/agent_traces.py`` makes the trace (the
generated agent trace of 300,000 events); run it in alternation against an older checkout
(``PYTHONPATH=OLD python benchmarks/time_kernel.py OLD ...``) to compare two versions of a
kernel on a shared machine, where only pairs of runs close in time mean anything.
"""

import importlib
import sys
import time

sys.path.insert(0, sys.argv[1] + "/benchmarks")
from agent_traces import agent_trace_path  # noqa: E402

try:
    from memlens.trace.io import load_trace
except ImportError:  # a checkout from before the trace package
    from memlens.trace_io import load_trace
from memlens.simulator import simulate  # noqa: E402

module, cls = sys.argv[2].split(":")
make = getattr(importlib.import_module(module), cls)
trace = load_trace(agent_trace_path(300_000))
simulate(trace, make(), 1024, progress=False)  # compile (or load) outside the timing
figures = []
for budget in (1024, 65536):
    best = float("inf")
    for _ in range(5):
        t0 = time.perf_counter()
        result = simulate(trace, make(), budget, progress=False)
        best = min(best, time.perf_counter() - t0)
    figures.append(f"{budget}:{trace.n_events / best / 1e6:.2f}M")
print(" ".join(figures), "hits", int(result.need_hit.sum()))
