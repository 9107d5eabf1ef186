"""The learned scorer's per-trace preparation: the heap keys of every anchor at a compare's four
budgets, the longest part of that policy's compare batch (issue 34).

    .venv/bin/python benchmarks/learned_preparation.py --trace /tmp/memlens-bench-many/agent-5800x150-s34.jsonl.gz
    .venv/bin/python benchmarks/learned_preparation.py --trace T --derived cold

One fresh process per run (``--runs``, default 3; the best is kept), each loading the trace
from the parsed-trace cache (``MEMLENS_CACHE``) and timing ``anchor_key_arrays`` at budgets
512, 1024, 2048 and 4096 as a compare's batch asks for them (the first call builds the features
block by block and scores the forest at all four budgets).  ``--derived warm`` (the default)
keeps the arrays the trace's texts give (``memlens.trace.derived``) from an untimed first run;
``cold`` empties them before each run.  It prints the SHA-256 of the keys' bytes: the same
digest before and after a change means the same keys, bit for bit.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
from pathlib import Path

CHILD = r"""
import hashlib, sys, time
from memlens.config.compose import compose_config
from memlens.config.schema import build_policy, resolve
from memlens.policies.learned import anchor_key_arrays
from memlens.runs.pipeline import load_trace
from memlens.runs.sweep import announce_budgets

budgets = [512, 1024, 2048, 4096]
settings = resolve(compose_config("simulate", [f"trace={sys.argv[1]}", "policy=learned"]))
trace = load_trace(settings)
policy = build_policy(settings.policy)
announce_budgets(trace, budgets)
start = time.perf_counter()
keys = [anchor_key_arrays(trace, policy.model, b, policy.decay, policy.size_exponent)
        for b in budgets]
wall = time.perf_counter() - start
digest = hashlib.sha256(b"".join(k.tobytes() for k in keys)).hexdigest()
print(f"{wall:.3f} {keys[0].shape[1]} {digest}")
"""


def one_run(trace: str, env: dict) -> tuple[float, int, str]:
    out = subprocess.run([sys.executable, "-c", CHILD, trace], env=env, check=True,
                         capture_output=True, text=True).stdout.split()  # fmt: skip
    return float(out[0]), int(out[1]), out[2]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--trace", required=True)
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--derived", choices=["warm", "cold"], default="warm")
    args = p.parse_args()
    env = {**os.environ, "PYTHONWARNINGS": "ignore"}
    root = Path(env.get("MEMLENS_CACHE") or Path.home() / ".cache" / "memlens")
    one_run(args.trace, env)  # untimed: the parsed trace, kernels, and (warm) derived arrays
    walls = []
    for _ in range(args.runs):
        if args.derived == "cold":
            shutil.rmtree(root / "derived", ignore_errors=True)
        wall, points, digest = one_run(args.trace, env)
        walls.append(wall)
    load = os.getloadavg()[0]
    print(f"anchor keys at 4 budgets: best {min(walls):.2f} s of {args.runs} "
          f"({', '.join(f'{w:.2f}' for w in walls)}); {points:,} points; derived arrays "
          f"{args.derived}; load {load:.1f}")  # fmt: skip
    print(f"keys sha256 {digest}")


if __name__ == "__main__":
    main()
