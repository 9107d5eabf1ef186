"""What any fresh ``memlens`` process pays before its first kernel runs (issue 34).

    .venv/bin/python benchmarks/process_floor.py [--replay-s 0.088]

Each case runs in a new process, five times, and the best time is kept:

* ``python``: the interpreter starting and stopping (``python -c pass``);
* ``imports``: the modules ``memlens simulate`` imports before it composes a config
  (``memlens.cli.replay``, which brings numpy, numba, Hydra and OmegaConf);
* ``numba's first call``: those imports, then one call of a trivial kernel already in numba's
  disk cache (compiled by an untimed first run), which pays what numba does once per process
  before any kernel runs: its typing and lowering registries, the LLVM target and its runtime.

The last line compares that floor with a replay's own time (``--replay-s``: ``timing.wall_s``
of the benchmark trace's ``simulate``): a fresh process cannot come within ``floor / replay``
of its replay, whatever the run then does.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path

KERNEL = """
import numba

@numba.njit(cache=True)
def plus_one(x):
    return x + 1
"""


def best(code: str, cwd: Path, runs: int = 5) -> float:
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        subprocess.run([sys.executable, "-c", code], check=True, cwd=cwd)
        times.append(time.perf_counter() - start)
    return min(times)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--replay-s", type=float, default=0.088,
                   help="a replay's own time, for the last line")  # fmt: skip
    args = p.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        cwd = Path(tmp)
        (cwd / "floor_kernel.py").write_text(KERNEL)
        first_call = "import memlens.cli.replay\nfrom floor_kernel import plus_one\nplus_one(1)"
        subprocess.run([sys.executable, "-c", first_call], check=True, cwd=cwd)  # compile once
        cases = {
            "python": best("pass", cwd),
            "imports (memlens.cli.replay)": best("import memlens.cli.replay", cwd),
            "imports + numba's first call": best(first_call, cwd),
        }
    for name, seconds in cases.items():
        print(f"{name:32s} {seconds:6.3f} s")
    floor = cases["imports + numba's first call"]
    print(f"floor / replay ({args.replay_s} s): {floor / args.replay_s:.1f}x")


if __name__ == "__main__":
    main()
