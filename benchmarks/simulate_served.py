"""A warm ``simulate`` through ``memlens serve``, against the same command in a new process.

    .venv/bin/python benchmarks/simulate_served.py --trace T [--runs 3] [-- events.enabled=false]

Starts ``memlens serve`` on a socket in a temporary folder (its warm-up not timed), then runs
``memlens simulate trace=T policy=lru budget=1024 mlflow.enabled=false`` (plus the extra
overrides) ``--runs`` times through it (``MEMLENS_SERVER`` set) and as many times without it,
alternating, each in a new client process, and prints each run's wall time, its replay's
(``timing.wall_s`` of metrics.json) and their ratio, then the best of each way.  The first
run of each way is not counted: it fills the parsed-trace cache if needed.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from simulate_in_process import arguments  # a sibling script (benchmarks/ is on the path)

MEMLENS = [sys.executable, "-m", "memlens"]


def one(trace: str, folder: Path, extra: list[str], env: dict) -> dict:
    cmd = [*MEMLENS, "simulate", f"trace={trace}", "policy=lru", "budget=1024",
           "mlflow.enabled=false", *extra, f"hydra.run.dir={folder}"]  # fmt: skip
    start = time.perf_counter()
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - start
    if proc.returncode != 0 or "note:" in proc.stderr:
        raise SystemExit(f"{' '.join(cmd)}: exit {proc.returncode}\n{proc.stderr}")
    replay = json.loads((folder / "metrics.json").read_text())["timing"]["wall_s"]
    return {"wall_s": round(wall, 3), "replay_s": round(replay, 3),
            "ratio": round(wall / replay, 1)}  # fmt: skip


def main() -> None:
    args = arguments(__doc__)
    tmp = Path(tempfile.mkdtemp(prefix="memlens-served-"))
    env = {**os.environ, "PYTHONWARNINGS": "ignore"}
    sock = tmp / "memlens.sock"
    server = subprocess.Popen([*MEMLENS, "serve", "--socket", str(sock)], env=env,
                              stdout=subprocess.PIPE, text=True)  # fmt: skip
    try:
        if not server.stdout.readline().startswith("memlens serve: warm"):
            raise SystemExit("the server did not start")
        ways = {"served": {**env, "MEMLENS_SERVER": str(sock)}, "new process": env}
        best: dict[str, dict] = {}
        for k in range(args.runs + 1):
            for way, way_env in ways.items():
                row = one(args.trace, tmp / f"{way}-{k}", args.overrides, way_env)
                print(json.dumps({"way": way, "run": k, **row}), flush=True)
                if k and (way not in best or row["wall_s"] < best[way]["wall_s"]):
                    best[way] = row
        for way, row in best.items():
            print(f"best {way}: {row['wall_s']} s for a {row['replay_s']} s replay "
                  f"({row['ratio']}x)")  # fmt: skip
    finally:
        server.send_signal(signal.SIGINT)
        server.wait()


if __name__ == "__main__":
    main()
