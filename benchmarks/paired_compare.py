"""A paired A/B of one ``memlens compare``: two source trees run alternately, wall and CPU time.

    git archive 2e3a8ee | tar -x -C /tmp/old      # the tree to compare against
    .venv/bin/python benchmarks/paired_compare.py --old /tmp/old \\
        --trace /tmp/memlens-bench-tau/airline-x29.jsonl.gz --runs 3

On a shared 2-core machine a compare's wall time moves by about a second from run to run, as
much as most changes save; runs of the two trees taken in turn see the same load, and their
CPU time (user + system, of the command and its workers: ``os.wait4``) is steadier still.
Each tree runs as ``python -m memlens compare trace=T mlflow.enabled=false resume=false
oracle.enabled=...`` with its own directory first on ``PYTHONPATH`` and its own cache root
(``--old-cache``, ``--new-cache``; each tree's code digest keys its derived arrays and
configs anyway), the oracle's disk cache emptied before each run.  One untimed run per tree
comes first: it compiles the old tree's kernels (minutes, the first time) and keeps the
trace's derived arrays, as any earlier run on the trace would.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def run(tree: Path, cache: Path, trace: str, oracle: bool, out: Path) -> tuple[float, float]:
    """(wall s, user + system CPU s) of one compare of ``tree``'s code."""
    shutil.rmtree(cache / "oracle", ignore_errors=True)
    env = {**os.environ, "PYTHONPATH": str(tree), "MEMLENS_CACHE": str(cache),
           "PYTHONWARNINGS": "ignore"}  # fmt: skip
    cmd = [sys.executable, "-m", "memlens", "compare", f"trace={trace}", "mlflow.enabled=false",
           "resume=false", f"oracle.enabled={str(oracle).lower()}", f"hydra.run.dir={out}"]  # fmt: skip
    start = time.perf_counter()
    proc = subprocess.Popen(cmd, cwd=tree, env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)  # fmt: skip
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - start
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"{tree}: compare failed (exit {os.waitstatus_to_exitcode(status)})")
    return wall, usage.ru_utime + usage.ru_stime


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--old", type=Path, required=True, help="the other tree (e.g. git archive)")
    p.add_argument("--new", type=Path, default=ROOT)
    p.add_argument("--trace", required=True)
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--oracle", action="store_true", help="oracle.enabled=true")
    p.add_argument("--old-cache", type=Path, help="default: a fresh folder")
    p.add_argument("--new-cache", type=Path, default=Path(os.environ.get("MEMLENS_CACHE", "")
                                                          or Path.home() / ".cache/memlens"))  # fmt: skip
    args = p.parse_args()
    work = Path(tempfile.mkdtemp(prefix="memlens-paired-"))
    old_cache = args.old_cache or work / "old-cache"
    trees = {"old": (args.old.resolve(), old_cache), "new": (args.new.resolve(), args.new_cache)}
    for name, (tree, cache) in trees.items():  # untimed: kernels, derived arrays, configs
        run(tree, cache, args.trace, args.oracle, work / f"warm-{name}")
    for k in range(args.runs):
        for name, (tree, cache) in trees.items():
            wall, cpu = run(tree, cache, args.trace, args.oracle, work / name)
            load = os.getloadavg()[0]
            print(f"run {k + 1} {name}: wall {wall:.2f} s, user+sys {cpu:.2f} s, load {load:.2f}",
                  flush=True)  # fmt: skip


if __name__ == "__main__":
    main()
