"""What a warm `simulate` would cost in a process kept alive between commands (issue 34).

    .venv/bin/python benchmarks/simulate_in_process.py --trace T
    .venv/bin/python benchmarks/simulate_in_process.py --trace T -- events.enabled=false

Runs ``memlens simulate trace=T policy=lru budget=1024 mlflow.enabled=false`` (plus the extra
overrides) three times in this one process through ``memlens.cli.main.main``: the first pays
the imports and the kernels' loading, the later ones only what a run itself does (composition,
the trace from its cache, the replay, metrics, intervals, writers).  Prints each run's wall
time and its replay's (``timing.wall_s`` of metrics.json): the floor any warm server would
have, since it would still run these.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path


def arguments(doc: str) -> argparse.Namespace:
    """``--trace``, ``--runs`` and the extra overrides (after ``--``) of the warm ``simulate``
    benchmarks (this one and ``simulate_served.py``)."""
    p = argparse.ArgumentParser(description=doc.split("\n")[0])
    p.add_argument("--trace", required=True)
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("overrides", nargs="*", help="extra overrides, after --")
    return p.parse_args()


def main() -> None:
    args = arguments(__doc__)
    from memlens.cli.main import main as memlens_main

    out = Path(tempfile.mkdtemp(prefix="memlens-inproc-"))
    for k in range(args.runs):
        folder = out / str(k)
        t0 = time.perf_counter()
        try:
            memlens_main(["simulate", f"trace={args.trace}", "policy=lru", "budget=1024",
                          "mlflow.enabled=false", f"hydra.run.dir={folder}", *args.overrides])  # fmt: skip
        except SystemExit as exc:
            if exc.code not in (0, None):
                raise
        wall = time.perf_counter() - t0
        replay = json.loads((folder / "metrics.json").read_text())["timing"]["wall_s"]
        print(json.dumps({"run": k, "wall_s": round(wall, 3), "replay_s": round(replay, 3),
                          "ratio": round(wall / replay, 1)}), flush=True)  # fmt: skip


if __name__ == "__main__":
    main()
