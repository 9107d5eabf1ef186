"""Interruptions survived: runs killed at random moments, and runs started all at once.

Every scenario runs the real ``memlens`` command in a subprocess, in a scratch directory, with
the default tracking store (``sqlite:///mlflow.db`` in the working directory):

* ``simulate`` and ``compare`` killed with SIGTERM, SIGINT and kill -9 at four moments:
  ``startup`` (a random delay before the replay begins: imports, validation, opening MLflow),
  ``mid-run`` (a random delay after the replay has begun; a slowed-down LRU policy written to a
  scratch module keeps it going), ``writing`` (as soon as the first result file is in the
  staging folder: the other files, MLflow's artifacts, the swap) and ``finishing`` (a random
  delay around the end of a normal run).  Each kill goes into a run folder that holds a
  complete earlier run.
* ``concurrent-fresh-db``: six ``simulate`` started together on a fresh SQLite store.
* ``concurrent-one-folder``: four ``simulate`` started together into one run folder.
* ``kill -9 during the first migration``: a run killed while it creates a new store; the next
  run on that store must succeed (it used to find a half-migrated database).

Checked after each kill: the run folder holds exactly one run's files (the previous complete
run, or a complete new one: file set, metrics.json against per_request.parquet and
resolved_config.yaml, compare.json against compare.csv) and no MLflow run ever FINISHED is
gone.  Checked at the end: the next ``simulate`` and ``compare`` succeed, and afterwards no MLflow
run is left RUNNING by a process that is gone.  "Data lost" counts a complete run whose files
are gone from both its folder and MLflow.

    .venv/bin/python benchmarks/bench_interruptions.py                  # 1 kill per case
    .venv/bin/python benchmarks/bench_interruptions.py --repeat 3 --seed 7
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow.parquet as pq

from memlens._util.processes import Process

MEMLENS = shutil.which("memlens") or str(Path(sys.executable).parent / "memlens")
SLOW_POLICY = '''
import os, time
from memlens.policies.lru import LRU

class SlowLRU(LRU):
    """LRU that touches $SLOW_MARKER at its first request and sleeps $SLOW_SLEEP s per request."""

    def observe(self, request, now):
        marker = os.environ.get("SLOW_MARKER")
        if marker and not os.path.exists(marker):
            open(marker, "w").close()
        time.sleep(float(os.environ.get("SLOW_SLEEP", "0")))
        return super().observe(request, now)
'''
SIMULATE_FILES = {"metrics.json", "per_request.parquet", "moves.parquet", "resolved_config.yaml"}
COMPARE_FILES = {"compare.csv", "compare.json"}
COMPARE_ARGS = ["policies=[lru]", "budgets=[100,200,300]"]
SIGNALS = {"SIGTERM": signal.SIGTERM, "SIGINT": signal.SIGINT, "kill -9": signal.SIGKILL}


@dataclass
class Outcome:
    scenario: str
    tried: int = 0
    exit_codes: Counter = field(default_factory=Counter)
    whole: int = 0
    kept: int = 0  # the folder still holds the previous complete run
    new: int = 0  # the folder holds the interrupted run, complete
    lost: int = 0

    @property
    def survived(self) -> int:
        return self.whole - self.lost


class Workspace:
    """A scratch directory with a small trace, the slow policy and its own MLflow store."""

    def __init__(self, root: Path):
        self.root = root
        (root / "slowpol.py").write_text(SLOW_POLICY)
        pythonpath = os.pathsep.join([str(root), os.environ.get("PYTHONPATH", "")])
        self.env = {**os.environ, "PYTHONPATH": pythonpath.rstrip(os.pathsep),
                    "PYTHONWARNINGS": "ignore"}  # fmt: skip
        self.reaped = 0  # runs that later starts ended as KILLED (their warning lines)
        self.left: set[str] = set()  # runs left RUNNING by a dead process, seen after a kill
        self.trace = root / "t.jsonl.gz"
        subprocess.run([MEMLENS, "data", "generate", "archetype=simple", "seed=3", "streams=2",
                        "events_per_stream=300", f"out={self.trace}"], cwd=root,
                       env=self.env, check=True, capture_output=True)  # fmt: skip

    @property
    def uri(self) -> str:
        return f"sqlite:///{self.root / 'mlflow.db'}"

    def args(self, command: str, folder: Path, slow: bool = False) -> list[str]:
        args = [MEMLENS, command, f"trace={self.trace}", f"hydra.run.dir={folder}"]
        args += COMPARE_ARGS if command == "compare" else ["policy=lru", "budget=512"]
        return args + (["policy._target_=slowpol.SlowLRU"] if slow else [])

    def start(self, args: list[str], marker: Path | None = None,
              cwd: Path | None = None) -> subprocess.Popen:  # fmt: skip
        env = self.env if marker is None else {**self.env, "SLOW_MARKER": str(marker),
                                                "SLOW_SLEEP": "0.01"}  # fmt: skip
        return subprocess.Popen(args, cwd=cwd or self.root, env=env, stdout=subprocess.DEVNULL,
                                stderr=subprocess.PIPE, text=True)  # fmt: skip

    def finish(self, proc: subprocess.Popen) -> tuple[int, str]:
        """Wait for ``proc``; (exit code, stderr), counting the runs it ended as KILLED."""
        _, err = proc.communicate()
        self.reaped += sum(int(n) for n in re.findall(r"ended as KILLED (\d+) run", err))
        return proc.returncode, err


def run_signature(folder: Path, command: str) -> str | None:
    """The identity of the one complete run in ``folder`` (None if it holds none, or a mix)."""
    files = {p.name for p in folder.iterdir() if p.is_file() and not p.name.endswith(".log")}
    try:
        if command == "simulate":
            if files != SIMULATE_FILES:
                return None
            metrics = json.loads((folder / "metrics.json").read_text())
            rows = pq.read_metadata(folder / "per_request.parquet").num_rows
            config = (folder / "resolved_config.yaml").read_text()
            if (
                rows != metrics["overall"]["requests"]
                or f"budget: {metrics['budget']}" not in config
            ):
                return None
            return (folder / "metrics.json").read_text()
        if files != COMPARE_FILES:
            return None
        rows = json.loads((folder / "compare.json").read_text())
        csv_lines = (folder / "compare.csv").read_text().strip().splitlines()
        if len(rows) != 3 or len(csv_lines) != len(rows) + 1:
            return None
        return (folder / "compare.json").read_text()
    except (OSError, ValueError, KeyError):
        return None


def tracked_runs(uri: str) -> list:
    import logging

    from mlflow import MlflowClient

    logging.getLogger("mlflow").setLevel(logging.WARNING)
    client = MlflowClient(tracking_uri=uri)
    exp = client.get_experiment_by_name("memlens")
    return [] if exp is None else client.search_runs([exp.experiment_id], max_results=5000)


def left_running_by_dead(uri: str) -> set[str]:
    """MLflow runs still RUNNING whose process (host, pid, start time) is gone."""
    found = set()
    for run in tracked_runs(uri):
        tags = run.data.tags
        pid = tags.get("memlens.pid", "")
        if run.info.status == "RUNNING" and pid.isdigit():
            proc = Process(tags.get("memlens.host", ""), int(pid), tags.get("memlens.started"))
            if proc.is_dead():
                found.add(run.info.run_id)
    return found


def finished_ids(uri: str) -> set[str]:
    return {r.info.run_id for r in tracked_runs(uri) if r.info.status == "FINISHED"}


def run_to_end(ws: Workspace, command: str, folder: Path) -> float:
    t0 = time.perf_counter()
    code, err = ws.finish(ws.start(ws.args(command, folder)))
    if code != 0:
        raise SystemExit(f"a normal {command} failed:\n{err}")
    return time.perf_counter() - t0


def kill_once(ws: Workspace, command: str, folder: Path, sig: int, moment: str,
              rng: random.Random, duration: float) -> int:  # fmt: skip
    """One run into ``folder``, signalled at ``moment``; its exit code."""
    marker = ws.root / "marker"
    marker.unlink(missing_ok=True)
    slow = moment == "mid-run"
    proc = ws.start(ws.args(command, folder, slow=slow), marker if slow else None)
    if moment == "startup":
        time.sleep(rng.uniform(0.2, 0.6 * duration))
    elif moment == "mid-run":
        while not marker.exists() and proc.poll() is None:
            time.sleep(0.02)
        time.sleep(rng.uniform(0.0, 1.5))
    elif moment == "writing":
        first = "per_request.parquet" if command == "simulate" else "compare.csv"
        pattern = f".{folder.name}.staging.*/{first}"
        while not any(folder.parent.glob(pattern)) and proc.poll() is None:
            time.sleep(0.002)
    else:
        time.sleep(rng.uniform(0.85, 1.05) * duration)
    if proc.poll() is None:
        proc.send_signal(sig)
    code = ws.finish(proc)[0]
    ws.left |= left_running_by_dead(ws.uri)
    return code


def kill_scenarios(ws: Workspace, repeat: int, rng: random.Random) -> list[Outcome]:
    outcomes = []
    for command in ("simulate", "compare"):
        folder = ws.root / f"{command}-run"
        duration = run_to_end(ws, command, folder)
        previous = run_signature(folder, command)
        assert previous is not None, f"a normal {command} left an incomplete folder"
        for name, sig in SIGNALS.items():
            for moment in ("startup", "mid-run", "writing", "finishing"):
                out = Outcome(f"{command} {name} {moment}")
                for _ in range(repeat):
                    finished = finished_ids(ws.uri)
                    out.tried += 1
                    out.exit_codes[kill_once(ws, command, folder, sig, moment, rng, duration)] += 1
                    now = run_signature(folder, command) if folder.exists() else None
                    out.whole += now is not None
                    out.kept += now == previous
                    out.new += now is not None and now != previous
                    out.lost += now is None or not finished <= finished_ids(ws.uri)
                    previous = now or previous
                outcomes.append(out)
                print(f"  {out.scenario}: {dict(out.exit_codes)}", file=sys.stderr, flush=True)
    return outcomes


def killed_migration(ws: Workspace, repeat: int, rng: random.Random) -> Outcome:
    """A run killed while it creates a new store; the next run on that store must work."""
    out = Outcome("kill -9 during the first migration")
    for k in range(repeat):
        cwd = ws.root / f"fresh{k}"
        cwd.mkdir()
        proc = ws.start(ws.args("simulate", cwd / "run"), cwd=cwd)
        while not list(cwd.glob(".mlflow.db.*.tmp")) and proc.poll() is None:
            time.sleep(0.005)
        time.sleep(rng.uniform(0.0, 1.0))
        proc.kill()
        out.tried += 1
        out.exit_codes[ws.finish(proc)[0]] += 1
        code, err = ws.finish(ws.start(ws.args("simulate", cwd / "run"), cwd=cwd))
        uri = f"sqlite:///{cwd / 'mlflow.db'}"
        ok = code == 0 and "warning: MLflow" not in err and finished_ids(uri)
        out.whole += bool(ok and run_signature(cwd / "run", "simulate"))
        out.new += bool(ok)
        out.lost += not ok
    return out


def concurrent(ws: Workspace, n: int, one_folder: bool) -> Outcome:
    """``n`` simulates at once (distinct budgets); every run FINISHED, every folder whole."""
    out = Outcome(f"concurrent-{'one-folder' if one_folder else 'fresh-db'} x{n}", tried=1)
    folders = [ws.root / ("shared" if one_folder else f"c{k}") for k in range(n)]
    fresh = not (ws.root / "mlflow.db").exists()
    before = set() if fresh else {r.info.run_id for r in tracked_runs(ws.uri)}
    procs = []
    for k, folder in enumerate(folders):
        args = ws.args("simulate", folder)
        procs.append(
            ws.start([a if a != "budget=512" else f"budget={100 * (k + 1)}" for a in args])
        )
    codes = [ws.finish(p)[0] for p in procs]
    out.exit_codes.update(codes)
    runs = [r for r in tracked_runs(ws.uri) if r.info.run_id not in before]
    finished = [r for r in runs if r.info.status == "FINISHED"]
    signatures = {run_signature(f, "simulate") for f in set(folders)}
    ok = codes == [0] * n and len(finished) == len(runs) == n and None not in signatures
    out.whole = out.new = int(ok)
    if one_folder:  # one folder keeps one run's files; the others are in MLflow's artifacts
        from mlflow import MlflowClient

        client = MlflowClient(tracking_uri=ws.uri)
        with_files = [r for r in finished
                      if "metrics.json" in {a.path for a in client.list_artifacts(r.info.run_id)}]  # fmt: skip
        out.lost = int(len(with_files) < n)
    return out


def table(outcomes: list[Outcome]) -> str:
    head = ["scenario", "tried", "exit codes", "folder whole", "previous kept", "new complete",
            "data lost"]  # fmt: skip
    rows = [[o.scenario, str(o.tried), " ".join(f"{c}x{k}" for k, c in sorted(o.exit_codes.items())),
             f"{o.whole}/{o.tried}", str(o.kept), str(o.new), str(o.lost)] for o in outcomes]  # fmt: skip
    widths = [max(len(r[i]) for r in [head, *rows]) for i in range(len(head))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(r, widths)) for r in [head, *rows]]
    return "\n".join([lines[0], "  ".join("-" * w for w in widths), *lines[1:]])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=1, help="kills per (command, signal, moment)")
    ap.add_argument("--seed", type=int, default=0, help="seed of the random delays")
    ap.add_argument("--keep", action="store_true", help="keep the scratch directory")
    opts = ap.parse_args()
    rng = random.Random(opts.seed)
    root = Path(tempfile.mkdtemp(prefix="memlens-interruptions-"))
    try:
        ws = Workspace(root)
        t0 = time.perf_counter()
        outcomes = [concurrent(ws, 6, one_folder=False)]
        outcomes.append(concurrent(ws, 4, one_folder=True))
        outcomes.append(killed_migration(ws, 2 * opts.repeat, rng))
        outcomes += kill_scenarios(ws, opts.repeat, rng)
        dead_before = left_running_by_dead(ws.uri)
        later = {c: ws.finish(ws.start(ws.args(c, ws.root / f"{c}-run")))[0]
                 for c in ("simulate", "compare")}  # fmt: skip
        dead_after = left_running_by_dead(ws.uri)
        debris = sorted(
            p.name for p in root.iterdir() if ".staging." in p.name or ".old." in p.name
        )
        print(table(outcomes))
        tried = sum(o.tried for o in outcomes)
        print(f"\nscenarios tried: {tried}, survived: {sum(o.survived for o in outcomes)}, "
              f"data lost: {sum(o.lost for o in outcomes)}")  # fmt: skip
        print(f"MLflow runs left RUNNING by killed processes: {len(ws.left)} seen right after the "
              f"kills, {ws.reaped} ended as KILLED by a later start (with a warning), "
              f"{len(dead_before)} left before the final starts, {len(dead_after)} after")  # fmt: skip
        print(f"later runs: {', '.join(f'{c} exit {rc}' for c, rc in later.items())}; "
              f"staging folders left behind: {len(debris)}")  # fmt: skip
        print(f"({time.perf_counter() - t0:.0f} s; seed {opts.seed}, repeat {opts.repeat})")
    finally:
        if opts.keep:
            print(f"scratch directory kept: {root}")
        else:
            shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
