"""Issue 34's three ratios on the shape real logs have: thousands of short streams.

    .venv/bin/python benchmarks/bench_many_streams.py --label before
    .venv/bin/python benchmarks/bench_many_streams.py --label after
    .venv/bin/python benchmarks/bench_many_streams.py --streams 580 --label small   # a quick look
    .venv/bin/python benchmarks/bench_many_streams.py --label after --rerun compare_off
    .venv/bin/python benchmarks/bench_many_streams.py --label tau --copies-of \
        datasets/taubench/airline.jsonl.gz --copies 29 --workdir /tmp/memlens-bench-tau

The trace is a held-out-like generated agent trace: ``memlens data generate archetype=agent
streams=5800 events_per_stream=150 seed=34`` (about 870,000 events in 5,800 streams of 75 to
225 events each; not a bundled trace, not a seed any test uses), made once and kept in
``--workdir`` (default ``/tmp/memlens-bench-many``, whose ``cache`` folder is
``MEMLENS_CACHE``).  One run of this script then measures, each case one fresh process:

* ``help``: ``memlens --help`` (target: under 0.5 s);
* (warm-up, not timed: one ``simulate`` and a one-budget ``compare`` of the bundled small trace,
  so that the parsed trace, every compiled kernel and the oracle's bound at 1024 are cached;
  then one ``simulate`` each of ``policy=learned`` and ``policy=generative_agents``, so that
  the arrays the trace's texts give, which its cache entry keeps beside it, are kept too:
  ``memlens.trace.derived``; with ``--derived cold`` they are emptied before each compare
  instead, and each compare makes them again);
* ``simulate``: a warm ``memlens simulate policy=lru budget=1024`` (parsed-trace cache, kernels
  and the oracle's bound at 1024 already cached by an identical run first), its wall time over
  the replay's own time (``metrics.json`` ``timing.wall_s``) (target: within 10x); once with
  the event log (the default) and once with ``events.enabled=false``;
* ``compare`` without the oracle (``oracle.enabled=false``) over the sum of its jobs' replay
  times (``compare.json`` ``wall_s``) (target: within 3x);
* ``compare`` with the oracle (the default), the oracle's disk cache emptied first, over the
  compare without it (target: within 1.5x).

Every compare is ``mlflow.enabled=false resume=false`` (MLflow's share is bench_compare's
``--tracking-runs``).  Results go to ``benchmarks/results/many_streams_<label>.json`` and a
row per label in ``benchmarks/results/many_streams.md``.  The machine is shared: the load
average is recorded with every case.
"""

from __future__ import annotations

import argparse
import gzip
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
QUIET = ["mlflow.enabled=false"]


def run_child(cmd: list[str], env: dict) -> dict:
    """Run ``cmd``: its wall time and peak RSS (``os.wait4``), stdout and stderr's tail."""
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        start = time.perf_counter()
        proc = subprocess.Popen(cmd, env=env, stdout=out, stderr=err)
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - start
        out.seek(0), err.seek(0)
        stdout, stderr = out.read().decode(), err.read().decode()
    code = os.waitstatus_to_exitcode(status)
    if code:
        raise SystemExit(f"{' '.join(cmd)} failed ({code}):\n{stderr[-4000:]}")
    return {"wall_s": round(wall, 3), "peak_rss_mb": round(usage.ru_maxrss / 1024, 1),
            "load": round(os.getloadavg()[0], 2), "stdout": stdout, "stderr": stderr}  # fmt: skip


def copied(source: Path, copies: int, out: Path) -> None:
    """``copies`` copies of every stream of the trace at ``source``, each copy's streams and
    ids (``id``, ``target``, ``needs``) prefixed ``c<k>/``: a real log's shape (its streams'
    lengths, item sizes and needs) at the scale of thousands of streams, where the bundled
    one has hundreds.  Same content in every copy, so only the timings mean anything."""

    def renamed(value, k: int):
        if isinstance(value, list):
            return [renamed(v, k) for v in value]
        return f"c{k}/{value}"

    with gzip.open(source, "rt") as f:
        header, *lines = f.read().splitlines()
    events = [json.loads(line) for line in lines]
    with gzip.open(out, "wt") as f:
        f.write(header + "\n")
        for k in range(copies):
            for e in events:
                e2 = {**e, **{key: renamed(e[key], k) for key in ("stream", "id", "target",
                                                                   "needs") if key in e}}  # fmt: skip
                f.write(json.dumps(e2) + "\n")


def trace_path(args, env: dict) -> Path:
    """The generated trace, or the copies of ``--copies-of`` (written once per workdir and
    shape)."""
    if args.copies_of:
        source = Path(args.copies_of)
        path = args.workdir / f"{source.name.split('.')[0]}-x{args.copies}.jsonl.gz"
        if not path.exists():
            tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp.jsonl.gz")
            copied(source, args.copies, tmp)
            tmp.replace(path)
        return path
    path = args.workdir / f"agent-{args.streams}x{args.events_per_stream}-s{args.seed}.jsonl.gz"
    if not path.exists():
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp.jsonl.gz")
        run_child([MEMLENS, "data", "generate", "archetype=agent", f"seed={args.seed}",
                   f"streams={args.streams}", f"events_per_stream={args.events_per_stream}",
                   f"out={tmp}"], env)  # fmt: skip
        tmp.replace(path)
    return path


def simulate(trace: Path, run_dir: Path, env: dict, extra: list[str]) -> dict:
    """One ``memlens simulate`` (lru at 1024): wall time, replay time and their ratio."""
    shutil.rmtree(run_dir, ignore_errors=True)
    cmd = [MEMLENS, "simulate", f"trace={trace}", "policy=lru", "budget=1024", *QUIET, *extra,
           f"hydra.run.dir={run_dir}"]  # fmt: skip
    case = run_child(cmd, env)
    replay = json.loads((run_dir / "metrics.json").read_text())["timing"]["wall_s"]
    return {"cmd": " ".join(cmd[1:]), "wall_s": case["wall_s"], "replay_s": round(replay, 3),
            "ratio": round(case["wall_s"] / replay, 2), "peak_rss_mb": case["peak_rss_mb"],
            "load": case["load"]}  # fmt: skip


def compare(trace: Path, run_dir: Path, env: dict, oracle: bool, cache: Path,
            derived: str = "warm") -> dict:  # fmt: skip
    """One ``memlens compare`` (oracle cache emptied first, and with ``derived="cold"`` the
    arrays kept from the trace's texts too): wall time, jobs, replay sum."""
    shutil.rmtree(run_dir, ignore_errors=True)
    shutil.rmtree(cache / "oracle", ignore_errors=True)
    if derived == "cold":
        shutil.rmtree(cache / "derived", ignore_errors=True)
    cmd = [MEMLENS, "compare", f"trace={trace}", *QUIET, "resume=false",
           f"oracle.enabled={str(oracle).lower()}", f"hydra.run.dir={run_dir}"]  # fmt: skip
    case = run_child(cmd, env)
    rows = json.loads((run_dir / "compare.json").read_text())
    replays = sum(r["wall_s"] for r in rows if r.get("wall_s") is not None)
    noisy = [ln for ln in case["stderr"].splitlines() + case["stdout"].splitlines()
             if "Highs" in ln or "tmpSolver" in ln]  # fmt: skip
    return {"cmd": " ".join(cmd[1:]), "wall_s": case["wall_s"], "jobs": len(rows),
            "replays_s": round(replays, 3), "peak_rss_mb": case["peak_rss_mb"],
            "load": case["load"], "solver_lines_on_terminal": len(noisy)}  # fmt: skip


def _save(out: dict) -> None:
    """The cases measured so far (a run stopped part-way keeps them)."""
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / f"many_streams_{out['label']}.json").write_text(json.dumps(out, indent=2) + "\n")


def measure(args) -> dict:
    cache = args.workdir / "cache"
    env = {**os.environ, "MEMLENS_CACHE": str(cache), "PYTHONWARNINGS": "ignore"}
    trace = trace_path(args, env)
    runs = args.workdir / "runs"
    out = {"label": args.label, "trace": str(trace), "streams": args.streams,
           "events_per_stream": args.events_per_stream, "seed": args.seed,
           "machine": f"{platform.machine()}, {os.cpu_count()} cores, "
                      f"Python {platform.python_version()}"}  # fmt: skip
    if args.copies_of:  # not generated: say what it is instead
        out.update(copies_of=args.copies_of, copies=args.copies, events_per_stream=None, seed=None)
    t0 = time.perf_counter()
    run_child([MEMLENS, "--help"], env)  # page cache warm
    out["help"] = {"wall_s": min(run_child([MEMLENS, "--help"], env)["wall_s"] for _ in range(3))}
    _save(out)
    # warm-up: parsed-trace cache, compiled kernels, the oracle's bound at 1024
    simulate(trace, runs / "warm", env, [])
    compile_kernels(runs / "compile", env)
    out["derived"] = args.derived
    if args.derived == "warm":
        keep_derived(trace, runs / "derived", env)
    out["simulate"] = simulate(trace, runs / "simulate", env, [])
    _save(out)
    out["simulate_no_events"] = simulate(trace, runs / "simulate-ne", env, ["events.enabled=false"])
    _save(out)
    out["compare_off"] = compare(trace, runs / "compare-off", env, False, cache, args.derived)
    _save(out)
    out["compare_on"] = compare(trace, runs / "compare-on", env, True, cache, args.derived)
    _save(out)
    out["ratios"] = ratios(out)
    out["bench_wall_s"] = round(time.perf_counter() - t0, 1)
    return out


def keep_derived(trace: Path, run_dir: Path, env: dict) -> None:
    """What the trace's cache entry keeps beside it (``memlens.trace.derived``: the content
    counts and bags of words the rule, Generative Agents and learned scorers read, and
    Generative Agents' TF-IDF query arrays), made by one ``simulate policy=learned`` and one
    ``policy=generative_agents``, so that every compare measured finds them, as a second
    compare of the same trace does; ``--derived cold`` empties them before each compare."""
    for policy in ("learned", "generative_agents"):
        shutil.rmtree(run_dir, ignore_errors=True)
        run_child([MEMLENS, "simulate", f"trace={trace}", f"policy={policy}", "budget=1024",
                   "events.enabled=false", "oracle.enabled=false", *QUIET,
                   f"hydra.run.dir={run_dir}"], env)  # fmt: skip


def compile_kernels(run_dir: Path, env: dict) -> None:
    """Every policy's compiled kernel built (numba caches it beside its source): a one-budget
    compare of the small bundled trace, without worker processes."""
    from memlens.config.store import DATA_DIR

    shutil.rmtree(run_dir, ignore_errors=True)
    run_child([MEMLENS, "compare", f"trace={DATA_DIR / 'default' / 'agent-small.jsonl.gz'}",
               "budgets=[512]", "oracle.enabled=false", "n_jobs=1", "resume=false", *QUIET,
               f"hydra.run.dir={run_dir}"], env)  # fmt: skip


def rerun(args, case: str) -> dict:
    """Measure ``case`` again into the label's existing results (kernels compiled first)."""
    out = json.loads((RESULTS / f"many_streams_{args.label}.json").read_text())
    cache = args.workdir / "cache"
    env = {**os.environ, "MEMLENS_CACHE": str(cache), "PYTHONWARNINGS": "ignore"}
    trace, runs = Path(out["trace"]), args.workdir / "runs"
    compile_kernels(runs / "compile", env)
    if case.startswith("compare"):
        if args.derived == "warm":
            keep_derived(trace, runs / "derived", env)
        out[case] = compare(trace, runs / case, env, case == "compare_on", cache, args.derived)
        out[f"{case}_derived"] = args.derived
    else:
        extra = ["events.enabled=false"] if case == "simulate_no_events" else []
        out[case] = simulate(trace, runs / case, env, extra)
    out.setdefault("rerun", []).append(case)
    if all(k in out for k in ("simulate", "simulate_no_events", "compare_off", "compare_on")):
        out["ratios"] = ratios(out)
    return out


def ratios(out: dict) -> dict:
    """The issue's three ratios (and ``--help``'s time)."""
    off, on = out["compare_off"], out["compare_on"]
    return {
        "simulate_over_replay": out["simulate"]["ratio"],
        "simulate_no_events_over_replay": out["simulate_no_events"]["ratio"],
        "compare_oracle_over_no_oracle": round(on["wall_s"] / off["wall_s"], 2),
        "compare_no_oracle_over_replays": round(off["wall_s"] / off["replays_s"], 2),
        "help_s": out["help"]["wall_s"],
    }


def write_md(results: list[dict]) -> None:
    lines = [
        "# Many short streams: issue 34's ratios (`benchmarks/bench_many_streams.py`)",
        "",
        "Each row is one run of `python benchmarks/bench_many_streams.py --label L` on a generated",
        "agent trace (`memlens data generate archetype=agent streams=S events_per_stream=E "
        "seed=34`),",
        "`mlflow.enabled=false`; the machine has 2 cores shared with other work (load = 1-min "
        "load average).",
        "",
        "| label | streams | help (s) | simulate (s) | its replay (s) | ratio (target 10) "
        "| no events: ratio | compare off (s) | its replays (s) | ratio (target 3) "
        "| compare on (s) | on/off (target 1.5) | solver lines | load |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in results:
        s, off, on, q = r["simulate"], r["compare_off"], r["compare_on"], r["ratios"]
        lines.append(
            f"| {r['label']} | {r['streams']:,} | {r['help']['wall_s']:.2f} | {s['wall_s']:.1f} "
            f"| {s['replay_s']:.2f} | {q['simulate_over_replay']:.1f} "
            f"| {q['simulate_no_events_over_replay']:.1f} | {off['wall_s']:.1f} "
            f"| {off['replays_s']:.1f} | {q['compare_no_oracle_over_replays']:.1f} "
            f"| {on['wall_s']:.1f} | {q['compare_oracle_over_no_oracle']:.2f} "
            f"| {on['solver_lines_on_terminal']} | {on['load']:.1f} |"
        )
    (RESULTS / "many_streams.md").write_text("\n".join(lines) + "\n")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--label", required=True, help="names the result file (before, after, ...)")
    p.add_argument("--streams", type=int, default=5800)
    p.add_argument("--events-per-stream", type=int, default=150)
    p.add_argument("--seed", type=int, default=34)
    p.add_argument("--rerun", choices=["simulate", "simulate_no_events", "compare_off",
                                        "compare_on"], help="measure one case again")  # fmt: skip
    p.add_argument(
        "--label-suffix-streams",
        action="store_true",
        help="name the result file many_streams_<label>_<streams>.json",
    )
    p.add_argument("--derived", choices=["warm", "cold"], default="warm",
                   help="warm: the arrays a trace's texts give are kept (memlens.trace.derived) "
                        "before the compares; cold: emptied before each compare")  # fmt: skip
    p.add_argument("--workdir", type=Path, default=Path("/tmp/memlens-bench-many"))
    p.add_argument("--copies-of", help="instead of a generated trace: copies of this trace's "
                   "streams (a real log's shape at scale; see copied())")  # fmt: skip
    p.add_argument("--copies", type=int, default=29)
    args = p.parse_args()
    args.workdir.mkdir(parents=True, exist_ok=True)
    if args.label_suffix_streams:
        args.label = f"{args.label}_{args.streams}"
    result = rerun(args, args.rerun) if args.rerun else measure(args)
    _save(result)
    results = [json.loads(f.read_text()) for f in sorted(RESULTS.glob("many_streams_*.json"))]
    results = [r for r in results if "ratios" in r]  # runs stopped part-way: no row
    write_md(results)
    print(json.dumps(result.get("ratios", {}), indent=2))


if __name__ == "__main__":
    main()
