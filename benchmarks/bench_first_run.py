"""A new user's first ten minutes: the first ``memlens compare`` against the second, cold.

    .venv/bin/python benchmarks/bench_first_run.py --rev HEAD --label after
    .venv/bin/python benchmarks/bench_first_run.py --rev 3031bc6 --label before
    .venv/bin/python benchmarks/bench_first_run.py --rev HEAD --scenario imported --no-warm

Each scenario starts from nothing: the revision ``--rev`` exported with ``git archive`` into a
fresh folder (no ``__pycache__``, so no numba cache beside the sources), an empty ``HOME``, no
``MEMLENS_CACHE``/``NUMBA_CACHE_DIR`` (so every cache lives under the empty home), and a fresh
working directory (``outputs/``, ``mlflow.db``).  The code runs from the export with this
interpreter (``PYTHONPATH`` = the export), like a fresh clone with the dependencies installed.

* ``bundled``: ``memlens compare`` (every default setting: the bundled trace, every policy,
  four budgets, MLflow on, resume on), twice;
* ``imported``: 15 conversations of tau-bench (``/work/shared/datasets/tau-bench/
  gpt-4o-airline.json``, the first 15 trajectories, one ``{"messages": [...]}`` row each)
  through ``memlens data import openai``, then ``memlens compare trace=<it>``, twice.

With a revision that has it (and without ``--no-warm``) the scenario starts with
``memlens cache warm``, the step ``make setup`` runs: its time is reported apart, as set-up.
Every step is one process; its wall time and CPU time (user + system of it and the workers it
waited for, from ``os.wait4``) are recorded with the machine's load average: the machine is
shared, and CPU seconds move less with the load than wall seconds.  Results: one JSON row per
scenario appended to ``benchmarks/results/first_run.jsonl``; ``first_run.md`` is written from
every row kept there.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
TAU = Path("/work/shared/datasets/tau-bench/gpt-4o-airline.json")
CONVERSATIONS = 15


def export(rev: str, dest: Path) -> Path:
    """``rev`` of this repository as a plain folder: what a fresh clone holds."""
    dest.mkdir(parents=True)
    archive = subprocess.run(["git", "-C", str(ROOT), "archive", rev], check=True,
                             capture_output=True).stdout  # fmt: skip
    subprocess.run(["tar", "-x", "-C", str(dest)], input=archive, check=True)
    return dest


def step(name: str, cmd: list[str], env: dict, cwd: Path) -> dict:
    """Run one command: wall and CPU seconds; stops the benchmark on failure."""
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        start = time.perf_counter()
        proc = subprocess.Popen(cmd, env=env, cwd=cwd, stdout=out, stderr=err)
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - start
        err.seek(0)
        stderr = err.read().decode(errors="replace")
        if os.waitstatus_to_exitcode(status):
            raise SystemExit(f"{name}: {' '.join(cmd)} failed:\n{stderr[-4000:]}")
    cpu = usage.ru_utime + usage.ru_stime
    row = {"step": name, "wall_s": round(wall, 1), "cpu_s": round(cpu, 1),
           "load_avg_1m": round(os.getloadavg()[0], 2),
           "stderr_head": stderr.strip().splitlines()[:3]}  # fmt: skip
    print(json.dumps(row), flush=True)
    return row


def imported_log(work: Path) -> Path:
    """The first ``CONVERSATIONS`` tau-bench trajectories as an OpenAI-messages JSONL file."""
    rows = json.loads(TAU.read_text())[:CONVERSATIONS]
    path = work / "tau-airline-15.jsonl"
    path.write_text("".join(json.dumps({"messages": r["traj"]}) + "\n" for r in rows))
    return path


def has_warm(checkout: Path) -> bool:
    cache = checkout / "memlens" / "cli" / "cache.py"
    return cache.exists() and "warm" in cache.read_text()


def scenario(kind: str, rev: str, work: Path, warm: bool) -> dict:
    checkout = export(rev, work / "checkout")
    home, cwd = work / "home", work / "cwd"
    home.mkdir()
    cwd.mkdir()
    env = {k: v for k, v in os.environ.items()
           if k not in ("MEMLENS_CACHE", "NUMBA_CACHE_DIR", "PYTHONPATH")}  # fmt: skip
    env |= {"HOME": str(home), "PYTHONPATH": str(checkout), "PYTHONWARNINGS": "ignore"}
    memlens = [sys.executable, "-m", "memlens"]
    steps, trace = [], []
    if kind == "imported":
        log = imported_log(work)
        out = work / "tau-airline-15.trace.jsonl.gz"
        steps.append(step("import", [*memlens, "data", "import", "openai", str(log),
                                     f"out={out}"], env, cwd))  # fmt: skip
        trace = [f"trace={out}"]
    warmed = warm and has_warm(checkout)
    if warmed:
        steps.append(step("cache warm", [*memlens, "cache", "warm", *trace], env, cwd))
    for n in ("first compare", "second compare"):
        steps.append(step(n, [*memlens, "compare", *trace], env, cwd))
    first, second = steps[-2]["wall_s"], steps[-1]["wall_s"]
    return {"scenario": kind, "rev": rev, "warm_step": warmed, "steps": steps,
            "first_over_second": round(first / max(second, 1e-9), 2),
            "nproc": os.cpu_count()}  # fmt: skip


def markdown(rows: list[dict]) -> str:
    lines = ["# The first run against the second (benchmarks/bench_first_run.py)", "",
             "Fresh export of the revision, empty HOME, no cache variables; wall / CPU seconds "
             "per step (CPU: user + system of the process and its workers). The machine is "
             "shared (2 cores): the 1-minute load average is given per step.", "",
             "| label | scenario | rev | step | wall s | CPU s | load | first / second |",
             "|---|---|---|---|---:|---:|---:|---:|"]  # fmt: skip
    for r in rows:
        for i, s in enumerate(r["steps"]):
            ratio = f"{r['first_over_second']}x" if i == len(r["steps"]) - 1 else ""
            lines.append(f"| {r.get('label', '')} | {r['scenario']} | {r['rev']} | {s['step']} "
                         f"| {s['wall_s']} | {s['cpu_s']} | {s['load_avg_1m']} | {ratio} |")  # fmt: skip
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rev", default="HEAD", help="the revision to export and time")
    ap.add_argument("--label", default="", help="a name for the rows (before, after)")
    ap.add_argument("--scenario", choices=("bundled", "imported", "both"), default="both")
    ap.add_argument("--no-warm", action="store_true", help="skip `memlens cache warm`")
    ap.add_argument("--workdir", default=None, help="kept for inspection (default: a temp dir)")
    args = ap.parse_args()
    kinds = ["bundled", "imported"] if args.scenario == "both" else [args.scenario]
    base = Path(args.workdir or tempfile.mkdtemp(prefix="memlens-first-run-"))
    log = RESULTS / "first_run.jsonl"
    for kind in kinds:
        row = scenario(kind, args.rev, base / kind, not args.no_warm) | {"label": args.label}
        with log.open("a") as f:
            f.write(json.dumps(row) + "\n")
    rows = [json.loads(line) for line in log.read_text().splitlines() if line.strip()]
    (RESULTS / "first_run.md").write_text(markdown(rows))
    print(f"results: {log}, {RESULTS / 'first_run.md'}")


if __name__ == "__main__":
    main()
