"""Sweep wall time: serial vs every core (memlens.runs.sweep), and a 1,000-job sweep on Ray.

    python benchmarks/bench_sweep.py local        # 100 jobs on LoCoMo: n_jobs=1 vs n_jobs=2
    python benchmarks/bench_sweep.py ray          # 1,000 tiny jobs: compare backend=ray against
                                                  # a Ray head this script starts
    python benchmarks/bench_sweep.py hydra-ray --budgets 4 --seeds 2   # simulate -m, Ray launcher

``local``: LoCoMo (locomo10-end, 10 conversations, 7,864 events) x 5 policies x 5 budgets x 4
seeds = 100 jobs, the exact path ``memlens compare`` takes (``memlens.runs.sweep.execute``), resume
off, MLflow off, once with one process and once with two workers; the results of both must be
equal (timings aside), which the script checks.  The oracle bounds of the five budgets are
solved (and cached) before either timed run, so neither pays for them.

``ray``: ``memlens compare backend=ray`` with 4 policies x 250 budgets = 1,000 jobs on a
generated 200-event trace (tiny jobs: this measures the scale-out machinery, not the replay;
oracle, MLflow and resume off) against a head on 127.0.0.1 (2 CPUs, 80 MB object store) started
and stopped here.  ``hydra-ray``: the same through ``memlens simulate -m
hydra/launcher=ray_cluster``, one Hydra job (composed, validated, run folder written) per
combination: on this shared machine about 1 s of config composition per job before the first
job starts and several seconds per job after, so 1,000 jobs there take hours; it is run small.

Both write ``benchmarks/results/sweep.md``-ready lines to stdout.  The machine is shared: the
timings are contended (the load average is printed next to them).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LOCOMO = ROOT / "datasets" / "locomo" / "locomo10-end.jsonl.gz"
POLICIES = ["lru", "window", "lfu", "rule", "memoryos_heat"]
BUDGETS = [256, 512, 1024, 2048, 4096]
SEEDS = [0, 1, 2, 3]


def local_jobs():
    """The 100 jobs (policies x budgets x seeds on LoCoMo) and the settings of the first seed."""
    from dataclasses import replace

    from memlens.cli.replay import compare_jobs
    from memlens.config.compose import compose_config
    from memlens.config.schema import resolve
    from memlens.runs.pipeline import load_trace
    from memlens.runs.sweep import Job, plan

    jobs, settings = [], None
    for seed in SEEDS:
        settings = resolve(compose_config("compare", [
            f"trace={LOCOMO}", f"policies=[{','.join(POLICIES)}]",
            f"budgets=[{','.join(map(str, BUDGETS))}]", f"seed={seed}", "mlflow.enabled=false",
            "parallel_min_events=0"]))  # fmt: skip
        trace = load_trace(settings)
        for job in plan(settings, list(compare_jobs(settings)), {str(LOCOMO): trace.sha256}):
            jobs.append(replace(job, index=len(jobs)))
    assert isinstance(jobs[0], Job)
    return jobs, settings, trace.n_events


def run_local() -> None:
    from dataclasses import replace

    from memlens.analyze.registry import declared
    from memlens.runs.sweep import execute

    jobs, settings, n_events = local_jobs()
    from memlens.oracle.solve import solve
    from memlens.trace.cache import load_trace_cached

    trace = load_trace_cached(LOCOMO)
    for budget in BUDGETS:  # both timed runs find the oracle bounds cached (neither pays for them)
        solve(trace, budget, settings.demand_fetch, settings.oracle)
    timing = {k for k, m in declared().items() if m.kind == "timing"}
    walls, values = {}, {}
    for n in (1, 2):
        start = time.perf_counter()
        sweep = execute(replace(settings, n_jobs=n), jobs, None, resumable=False,
                        events={str(LOCOMO): n_events})  # fmt: skip
        walls[n] = time.perf_counter() - start
        assert not sweep.failed and sweep.workers == n
        values[n] = [{k: v for k, v in o.report.row().items() if k not in timing}
                     for o in sweep.outcomes]  # fmt: skip
    assert values[1] == values[2], "parallel results differ from serial ones"
    load = os.getloadavg()
    print(f"| {len(jobs)} jobs, LoCoMo ({n_events:,} events each) | serial (n_jobs=1) | "
          f"{walls[1]:.1f} s |\n| | 2 workers (n_jobs=2) | {walls[2]:.1f} s "
          f"(speed-up {walls[1] / walls[2]:.2f}x) |")  # fmt: skip
    print(f"results identical (timing fields aside); load average {load[0]:.1f} {load[1]:.1f} "
          f"{load[2]:.1f} on {os.cpu_count()} cores (shared with other work)")  # fmt: skip


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_head(temp: str) -> tuple[subprocess.Popen, str]:
    port = free_port()
    ray = Path(sys.executable).parent / "ray"
    proc = subprocess.Popen(
        [str(ray), "start", "--head", "--block", f"--port={port}", "--node-ip-address=127.0.0.1",
         "--num-cpus=2", "--object-store-memory=80000000", "--include-dashboard=false",
         "--disable-usage-stats", f"--temp-dir={temp}"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    for _ in range(240):
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                time.sleep(2)
                return proc, f"127.0.0.1:{port}"
        time.sleep(0.5)
    proc.terminate()
    raise RuntimeError("the Ray head did not come up")


def run_ray(policies: int, budgets: int) -> None:
    """``memlens compare backend=ray`` with policies x budgets jobs on a tiny trace."""
    work = Path(tempfile.mkdtemp(prefix="bench-sweep-"))
    temp = tempfile.mkdtemp(prefix="ray", dir="/tmp")
    memlens = [sys.executable, "-m", "memlens"]
    subprocess.run([*memlens, "data", "generate", "seed=7", "streams=2", "events_per_stream=100",
                    f"out={work / 't.jsonl.gz'}"], check=True, capture_output=True)  # fmt: skip
    names = ["lru", "window", "lfu", "token_buffer"][:policies]
    budget_list = ",".join(str(32 + 8 * i) for i in range(budgets))
    head, address = start_head(temp)
    try:
        start = time.perf_counter()
        proc = subprocess.run(
            [*memlens, "compare", "backend=ray", f"ray_address={address}",
             f"trace={work / 't.jsonl.gz'}", f"policies=[{','.join(names)}]",
             f"budgets=[{budget_list}]", "mlflow.enabled=false", "resume=false",
             "oracle.enabled=false", f"hydra.run.dir={work / 'run'}"],
            capture_output=True, text=True, env={**os.environ, "MEMLENS_CACHE": str(work / "c")},
        )  # fmt: skip
        wall = time.perf_counter() - start
    finally:
        head.terminate()
        head.wait(timeout=120)
        shutil.rmtree(temp, ignore_errors=True)
    if proc.returncode != 0:
        raise SystemExit(proc.stderr[-3000:])
    sweep = json.loads((work / "run" / "sweep.json").read_text())
    n = policies * budgets
    load = os.getloadavg()
    print(f"| {n} jobs, memlens compare backend=ray (local head, 2 CPUs, 200-event trace) | "
          f"{sweep['ran']} ran, {len(sweep['failed'])} failed | sweep {sweep['wall_s']:.1f} s, "
          f"command {wall:.1f} s ({wall / n * 1000:.0f} ms per job) |")  # fmt: skip
    print(f"load average {load[0]:.1f} {load[1]:.1f} {load[2]:.1f} on {os.cpu_count()} cores "
          "(shared with other work)")  # fmt: skip
    shutil.rmtree(work, ignore_errors=True)


def run_hydra_ray(policies: int, budgets: int, seeds: int) -> None:
    """``memlens simulate -m hydra/launcher=ray_cluster``: one Hydra job per combination."""
    work = Path(tempfile.mkdtemp(prefix="bench-sweep-"))
    temp = tempfile.mkdtemp(prefix="ray", dir="/tmp")
    memlens = [sys.executable, "-m", "memlens"]
    subprocess.run([*memlens, "data", "generate", "seed=7", "streams=1", "events_per_stream=200",
                    f"out={work / 't.jsonl.gz'}"], check=True, capture_output=True)  # fmt: skip
    names = ["lru", "window", "lfu", "token_buffer"][:policies]
    budget_list = ",".join(str(64 * (i + 1)) for i in range(budgets))
    head, address = start_head(temp)
    try:
        start = time.perf_counter()
        proc = subprocess.run(
            [*memlens, "simulate", "-m", "hydra/launcher=ray_cluster",
             f"hydra.launcher.ray.init.address={address}", f"trace={work / 't.jsonl.gz'}",
             f"policy={','.join(names)}", f"budget={budget_list}",
             f"seed={','.join(str(s) for s in range(seeds))}", "mlflow.enabled=false",
             "events.enabled=false", "output.moves=false", f"hydra.sweep.dir={work / 'sweep'}"],
            capture_output=True, text=True,
        )  # fmt: skip
        wall = time.perf_counter() - start
    finally:
        head.terminate()
        head.wait(timeout=120)
        shutil.rmtree(temp, ignore_errors=True)
    if proc.returncode != 0:
        raise SystemExit(proc.stderr[-3000:])
    done = len(list((work / "sweep").glob("*/metrics.json")))
    n = policies * budgets * seeds
    print(
        f"| {n} jobs, simulate -m hydra/launcher=ray_cluster | {done} run folders | "
        f"{wall:.1f} s ({wall / n * 1000:.0f} ms per job, including config validation) |"
    )
    shutil.rmtree(work, ignore_errors=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("mode", choices=["local", "ray", "hydra-ray"])
    ap.add_argument("--policies", type=int, default=4)
    ap.add_argument("--budgets", type=int, default=250)
    ap.add_argument("--seeds", type=int, default=1)
    args = ap.parse_args()
    if args.mode == "local":
        run_local()
    elif args.mode == "ray":
        run_ray(args.policies, args.budgets)
    else:
        run_hydra_ray(args.policies, args.budgets, args.seeds)


if __name__ == "__main__":
    main()
