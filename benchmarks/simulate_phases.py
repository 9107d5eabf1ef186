"""Where a warm ``memlens simulate`` spends its wall time, phase by phase (issue 34).

    .venv/bin/python benchmarks/simulate_phases.py --trace /tmp/memlens-bench-many/agent-5800x150-s34.jsonl.gz
    .venv/bin/python benchmarks/simulate_phases.py --trace T -- events.enabled=false

Runs ``memlens simulate trace=T policy=lru budget=1024 mlflow.enabled=false`` (plus the extra
overrides) once to warm every cache, then once more under cProfile in a fresh process, and
prints the cumulative seconds of the phases a reader can act on: the process and its imports,
validation (composition, the trace load), Hydra's compositions (validation's and the run's),
the replay (and in it the compiled kernel's loop, ``timing.wall_s``), the analyzers and the
writers.  cProfile
adds its own overhead to Python-heavy phases; the whole-process wall time without it is
printed too.  The phases overlap where one calls another (the trace load is inside
validation), so they do not add up to the total.
"""

from __future__ import annotations

import argparse
import json
import os
import pstats
import subprocess
import sys
import tempfile
import time
from pathlib import Path

MEMLENS = [sys.executable, "-m", "memlens"]
PHASES = {  # label: (file suffix, function name)
    "validation (compose + checks + trace load)": ("memlens/config/app.py", "validate"),
    "  trace load (parsed-trace cache)": ("memlens/trace/cache.py", "load_trace_cached"),
    "Hydra compositions (validation's and the run's)": (
        "hydra/_internal/hydra.py",
        "compose_config",
    ),
    "replay (build, kernel load, loop)": ("memlens/runs/pipeline.py", "replay"),
    "analyzers (metrics, oracle, tiers, intervals)": ("memlens/runs/pipeline.py", "analyze"),
    "  intervals": ("memlens/analyze/stats.py", "intervals"),
    "writers (Parquet, event log, report, metrics.json)": ("memlens/runs/writers.py", "write_run"),
}


def simulate(trace: str, run_dir: Path, extra: list[str], profile: Path | None = None) -> float:
    cmd = [*MEMLENS, "simulate", f"trace={trace}", "policy=lru", "budget=1024",
           "mlflow.enabled=false", *extra, f"hydra.run.dir={run_dir}"]  # fmt: skip
    if profile is not None:
        cmd = [sys.executable, "-m", "cProfile", "-o", str(profile), *cmd[1:]]
    start = time.perf_counter()
    subprocess.run(
        cmd, check=True, capture_output=True, env={**os.environ, "PYTHONWARNINGS": "ignore"}
    )
    return time.perf_counter() - start


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--trace", required=True)
    p.add_argument("extra", nargs="*", help="more overrides (after --)")
    args = p.parse_args()
    with tempfile.TemporaryDirectory(prefix="memlens-phases-") as d:
        d = Path(d)
        simulate(args.trace, d / "warm", args.extra)
        wall = min(simulate(args.trace, d / f"plain{k}", args.extra) for k in range(2))
        replay = json.loads((d / "plain1" / "metrics.json").read_text())["timing"]["wall_s"]
        simulate(args.trace, d / "prof", args.extra, d / "sim.prof")
        stats = pstats.Stats(str(d / "sim.prof")).stats
    total = max(v[3] for v in stats.values())
    print(
        f"whole process, no profiler: {wall:.2f} s (best of 2); the kernel's loop: "
        f"{replay:.3f} s; ratio {wall / replay:.1f}x; load {os.getloadavg()[0]:.1f}"
    )
    print(f"under cProfile: {total:.2f} s in all")
    for label, (suffix, name) in PHASES.items():
        cum = sum(v[3] for (f, _, fn), v in stats.items() if f.endswith(suffix) and fn == name)
        print(f"  {label:<52} {cum:6.2f} s")
    imports = sum(v[3] for (f, _, fn), v in stats.items()
                  if fn == "_find_and_load" and "importlib._bootstrap" in f)  # fmt: skip
    print(f"  {'imports (outermost, everywhere)':<52} {imports:6.2f} s")


if __name__ == "__main__":
    main()
