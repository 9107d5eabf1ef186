"""Wall time and peak memory of a whole ``memlens compare`` vs trace size, oracle on and off.

    .venv/bin/python benchmarks/bench_compare.py                       # 10k and 100k events
    .venv/bin/python benchmarks/bench_compare.py --sizes 1000000 10000000 --oracle off
    .venv/bin/python benchmarks/bench_compare.py --sizes 100000 -- budgets=[1024] n_jobs=1
    .venv/bin/python benchmarks/bench_compare.py --tracking-runs 44   # MLflow's share alone
    .venv/bin/python benchmarks/bench_compare.py --tiers-trace T      # tier replay: Python/numba

Each size is a generated ``agent`` trace (``memlens data generate archetype=agent streams=4
events_per_stream=N/4 seed=0``), made once and kept in ``--workdir`` (default
``/tmp/memlens-bench-compare``).  Each case is one fresh ``memlens compare trace=T
mlflow.enabled=false resume=false`` process (every registered policy at the default four
budgets unless overrides after ``--`` say otherwise), with

* ``oracle=off``: ``oracle.enabled=false`` (no bounds solved, the ``oracle`` row left out);
* ``oracle=on``: ``oracle.enabled=true`` with the oracle's disk cache emptied first (the
  bounds solved in the run, once per budget before the jobs, as a fresh compare does).

The trace's parsed-trace cache is warmed first (``MEMLENS_CACHE`` = ``--workdir``/cache, one
``memlens simulate`` that also compiles the kernels), so a case times the compare, not the JSON
parse.  Peak RSS is ``ru_maxrss`` from ``os.wait4`` on the compare process: the largest of that
process and the worker processes it waited for (``RUSAGE_CHILDREN``'s figure, per case rather
than a running maximum over every case).  Results go to ``benchmarks/results/compare.json``
(rows merged by (events, oracle, overrides): a later run at other sizes adds to it) and
``compare.md``.  The machine is shared: the load average is recorded with every row.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
MEMLENS = str(Path(sys.executable).parent / "memlens")
STREAMS = 4
ORACLE = {"off": ["oracle.enabled=false"], "on": ["oracle.enabled=true"]}


def run_child(cmd: list[str], env: dict) -> dict:
    """Run ``cmd``: its wall time and peak RSS (``os.wait4``); stops the benchmark on failure."""
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        start = time.perf_counter()
        proc = subprocess.Popen(cmd, env=env, stdout=out, stderr=err)
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - start
        code = os.waitstatus_to_exitcode(status)
        if code:
            err.seek(0)
            raise SystemExit(f"{' '.join(cmd)} failed ({code}):\n{err.read().decode()[-4000:]}")
    return {"wall_s": round(wall, 3), "peak_rss_mb": round(usage.ru_maxrss / 1024, 1)}


def trace_for(size: int, workdir: Path, env: dict) -> Path:
    """The agent trace of ``size`` events (4 streams, seed 0), generated once per workdir."""
    path = workdir / f"agent-{size}.jsonl.gz"
    if not path.exists():
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp.jsonl.gz")
        run_child([MEMLENS, "data", "generate", "archetype=agent", "seed=0",
                   f"streams={STREAMS}", f"events_per_stream={max(1, size // STREAMS)}",
                   f"out={tmp}"], env)  # fmt: skip
        tmp.replace(path)
        warm = [MEMLENS, "simulate", f"trace={path}", "policy=lru", "mlflow.enabled=false",
                "oracle.enabled=false", f"hydra.run.dir={workdir / 'runs' / 'warm'}"]  # fmt: skip
        run_child(warm, env)  # parsed-trace cache filled, kernels compiled
    return path


def measure(size: int, oracle: str, overrides: list[str], workdir: Path) -> dict:
    """One ``memlens compare`` case: its settings, wall time, peak RSS and the machine's load."""
    env = {**os.environ, "MEMLENS_CACHE": str(workdir / "cache"), "PYTHONWARNINGS": "ignore"}
    trace = trace_for(size, workdir, env)
    run_dir = workdir / "runs" / f"{size}-{oracle}"
    shutil.rmtree(workdir / "cache" / "oracle", ignore_errors=True)  # solved in the run
    cmd = [MEMLENS, "compare", f"trace={trace}", "mlflow.enabled=false", "resume=false",
           *ORACLE[oracle], *overrides, f"hydra.run.dir={run_dir}"]  # fmt: skip
    row = {"events": size, "oracle": oracle, "overrides": " ".join(overrides)}
    row |= run_child(cmd, env)
    jobs = len(json.loads((run_dir / "compare.json").read_text()))
    row |= {"jobs": jobs, "load_avg_1m": round(os.getloadavg()[0], 2)}
    print(json.dumps(row), flush=True)
    return row


def tracking_cost(runs: int, workdir: Path) -> dict:
    """Seconds to record ``runs`` compare jobs as MLflow child runs (``memlens.runs.sweep``'s way:
    create, log the report, end) in a fresh SQLite store: the tracking share of a compare.
    Run it with ``PYTHONPATH`` at another checkout's top level to time that checkout's
    ``memlens.runs.tracking``."""
    import memlens.runs.tracking as tracking
    from memlens.config.compose import run_settings
    from memlens.runs.pipeline import run

    db = workdir / f"tracking-{os.getpid()}.db"
    settings = run_settings(["policy=lru", "budget=1024", "oracle.enabled=false",
                             f"mlflow.tracking_uri=sqlite:///{db}",
                             f"mlflow.artifact_location={workdir / 'artifacts'}"])  # fmt: skip
    _, report = run(settings)
    cfg = settings.mlflow
    with tracking.mlflow_run(cfg, run_name="warm-up"):
        pass  # the store created and migrated before the clock starts
    start = time.perf_counter()
    with tracking.mlflow_run(cfg, run_name="compare") as parent:
        for i in range(runs):
            with tracking.mlflow_run(
                cfg, run_name=f"job{i}", parent=parent, tags={"i": str(i)}
            ) as child:
                tracking.log_report(child, report)
    wall = time.perf_counter() - start
    db.unlink(missing_ok=True)
    return {"module": tracking.__file__, "runs": runs, "wall_s": round(wall, 3),
            "ms_per_run": round(1000 * wall / runs, 1), "load_avg_1m": round(os.getloadavg()[0], 2)}  # fmt: skip


def tiers_cost(trace_path: str, budget: int = 1024) -> dict:
    """Seconds to replay an LRU run's move log through the lower tiers: the Python state
    machine (``replay_tiers_reference``) against the compiled kernel (best of 3 each, after
    a warm-up call that compiles), and whether their logs are equal."""
    import numpy as np

    from memlens.config.compose import run_settings
    from memlens.retrieval.tiers import replay_tiers, replay_tiers_reference
    from memlens.runs.pipeline import load_trace, replay

    settings = run_settings([f"trace={trace_path}", "policy=lru", f"budget={budget}",
                             "oracle.enabled=false", "mlflow.enabled=false"])  # fmt: skip
    trace = load_trace(settings)
    result = replay(settings, trace).result
    stc = settings.tiers.short_term_tokens
    out = {"events": trace.n_events, "moves": int(result.move_event.size)}
    for name, fn in (("python_s", replay_tiers_reference), ("compiled_s", replay_tiers)):
        logs, times = [fn(trace, result, stc)], []
        for _ in range(3):
            start = time.perf_counter()
            logs.append(fn(trace, result, stc))
            times.append(time.perf_counter() - start)
        out[name], out[name[:-2]] = round(min(times), 4), logs[-1]
    a, b = out.pop("python"), out.pop("compiled")
    out["equal"] = all(np.array_equal(getattr(a, f), getattr(b, f))
                       for f in ("event", "item", "src", "dst", "final_tier"))  # fmt: skip
    return out


def merged(old: list[dict], new: list[dict]) -> list[dict]:
    """Rows of ``old`` not measured again, then ``new``, in (events, oracle) order."""
    key = lambda r: (r["events"], r["oracle"], r.get("overrides", ""))  # noqa: E731
    fresh = {key(r) for r in new}
    return sorted([r for r in old if key(r) not in fresh] + new, key=key)


def markdown(rows: list[dict], command: str) -> str:
    lines = ["# `memlens compare` wall time and peak memory vs trace size (issue 16)", "",
             f"Latest command: `{command}` (each row's own command is in compare.json)  ",
             f"Machine: {platform.machine()}, {os.cpu_count()} cores (shared with other work), "
             f"Python {platform.python_version()}; agent traces, {STREAMS} streams, seed 0; "
             "`mlflow.enabled=false resume=false`; peak RSS from `os.wait4`.", "",
             "| events | oracle | overrides | jobs | wall (s) | s/job | peak RSS (MB) | load |",
             "|---:|---|---|---:|---:|---:|---:|---:|"]  # fmt: skip
    for r in rows:
        per_job = r["wall_s"] / r["jobs"] if r["jobs"] else float("nan")
        lines.append(f"| {r['events']:,} | {r['oracle']} | {r.get('overrides') or '-'} | "
                     f"{r['jobs']} | {r['wall_s']:.1f} | {per_job:.2f} | "
                     f"{r['peak_rss_mb']:,.0f} | {r['load_avg_1m']:.1f} |")  # fmt: skip
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> list[dict]:
    argv = sys.argv[1:] if argv is None else argv
    extra = argv[argv.index("--") + 1 :] if "--" in argv else []
    own = argv[: argv.index("--")] if "--" in argv else argv
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", type=int, nargs="+", default=[10_000, 100_000])
    ap.add_argument("--oracle", nargs="+", choices=sorted(ORACLE), default=["off", "on"])
    ap.add_argument("--oracle-max", type=int, default=10**7,
                    help="largest trace run with oracle=on (solving grows fast with size)")  # fmt: skip
    ap.add_argument("--workdir", type=Path, default=Path("/tmp/memlens-bench-compare"))
    ap.add_argument("--out", type=Path, default=RESULTS)
    ap.add_argument("--tracking-runs", type=int, default=0,
                    help="instead: time recording this many MLflow child runs (tracking_cost)")  # fmt: skip
    ap.add_argument("--tiers-trace", help="instead: time the tier replay on this trace")
    args = ap.parse_args(own)
    args.workdir.mkdir(parents=True, exist_ok=True)
    if args.tiers_trace:
        print(json.dumps(tiers_cost(args.tiers_trace)))
        return []
    if args.tracking_runs:
        print(json.dumps(tracking_cost(args.tracking_runs, args.workdir)))
        return []
    rows = [measure(size, oracle, extra, args.workdir) for size in args.sizes
            for oracle in args.oracle if oracle == "off" or size <= args.oracle_max]  # fmt: skip
    args.out.mkdir(parents=True, exist_ok=True)
    store = args.out / "compare.json"
    old = json.loads(store.read_text())["rows"] if store.exists() else []
    command = "python benchmarks/bench_compare.py " + " ".join(argv)
    rows = merged(old, [{**r, "command": command} for r in rows])
    store.write_text(json.dumps({"rows": rows}, indent=1) + "\n")
    (args.out / "compare.md").write_text(markdown(rows, command))
    return rows


if __name__ == "__main__":
    main()
