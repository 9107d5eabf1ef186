"""Speed of the learned value scorer (issue 12), written to results/learned.md.

    .venv/bin/python benchmarks/bench_learned.py [--events 1000000] [--repeat 3] [--rows 1000000]

* Replay: events per second of ``simulate(..., policy=learned)`` (the bundled model, reference
  engine) on the trace of ``benchmarks/bench_policies.py`` (``generate_simple(seed=1,
  streams=8, events_per_stream=E/8)``), best of ``--repeat``, at budgets 1024 and 4096, with
  ``lru`` and ``rule`` alongside.  The per-trace preparation (decision points, their features
  and one batched prediction per point) is cached on the trace, shared by every budget and
  run of a ``compare``, and timed separately, as bench_policies times content features.
  Required: 100,000 events/s (LRB in libCacheSim replays about 16k requests/s).
* Training: ``ValueScorer`` (the ``memlens train`` defaults, ``n_jobs=2``) fitted on
  ``--rows`` synthetic feature rows (random features, a label that depends on a few of them).
  Required: under 60 s on 2 cores.
* Prediction: the compiled evaluator against LightGBM's own ``predict`` (one thread) on the
  same rows.
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

from bench_policies import bench_trace, make_policy  # noqa: E402

from memlens._util.atomic import write_text  # noqa: E402
from memlens.learn.train import ModelParams  # noqa: E402
from memlens.scorer.decision_features import N_FEATURES  # noqa: E402
from memlens.scorer.model import ValueScorer, load_model  # noqa: E402
from memlens.simulator import simulate  # noqa: E402

BUDGETS = (1024, 4096)
REQUIRED_EVENTS_S = 100_000
REQUIRED_TRAIN_S = 60.0


def timed(trace, name: str, budget: int, repeat: int) -> tuple[float, float]:
    """(best wall events/s, best CPU events/s) of ``repeat`` replays."""
    wall, cpu = [], []
    for _ in range(repeat):
        policy = make_policy(name)
        c0 = time.process_time()
        res = simulate(trace, policy, budget, engine="reference", progress=False)
        cpu.append(trace.n_events / (time.process_time() - c0))
        wall.append(trace.n_events / res.wall_s)
    return max(wall), max(cpu)


def prepare(trace) -> float:
    """Seconds to build the decision points, features and predictions (cached on the trace)."""
    from memlens.policies.learned import anchor_key_arrays, anchor_table

    t0 = time.perf_counter()
    anchor_table(trace)
    for b in BUDGETS:
        anchor_key_arrays(trace, load_model("default"), b, 0.1, 1.0)  # the class defaults
    return time.perf_counter() - t0


def replay_section(trace, gen_args: dict, repeat: int, prep_s: float) -> list[str]:
    lines = [
        "## Replay",
        "",
        f"Trace: `generate_simple({', '.join(f'{k}={v}' for k, v in gen_args.items())})`: "
        f"{trace.n_events:,} events, {trace.n_items:,} items, {trace.n_requests:,} requests.  "
        f"Per-trace preparation (decision points, features, batched predictions at both "
        f"budgets; cached on the trace, not in the figures): {prep_s:.1f} s.  Wall: "
        "`SimResult.wall_s` (what `memlens` reports); CPU: the whole `simulate()` call.",
        "",
        "| policy | "
        + " | ".join(f"wall @{b} | CPU @{b}" for b in BUDGETS)
        + " | required | ok: wall (CPU) |",
        "|---|" + "---:|---:|" * len(BUDGETS) + "---:|---|",
    ]
    for name in ("learned", "rule", "lru"):
        cells, walls, cpus = [], [], []
        for b in BUDGETS:
            wall, cpu = timed(trace, name, b, repeat)
            walls.append(wall)
            cpus.append(cpu)
            cells += [f"{wall:,.0f}", f"{cpu:,.0f}"]
            print(f"{name:8s} @{b}: {wall:,.0f} events/s wall, {cpu:,.0f} events/CPU-s", flush=True)
        req = f"{REQUIRED_EVENTS_S:,}" if name == "learned" else ""
        ok = ""
        if name == "learned":
            ok = " ".join(
                ("yes" if min(x) >= REQUIRED_EVENTS_S else "**no**") for x in (walls, cpus)
            )
            ok = ok.replace(" ", " (", 1) + ")"
        lines.append(f"| {name} | " + " | ".join(cells) + f" | {req} | {ok} |")
    return lines


def synthetic_rows(n: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, N_FEATURES))
    X[rng.random(X.shape) < 0.05] = np.nan  # missing values, as never-needed items have
    logit = 1.5 * X[:, 0] - X[:, 5] + 0.8 * np.nan_to_num(X[:, 9]) * X[:, 1]
    y = (logit + rng.logistic(size=n) > 0).astype(np.float64)
    return X, y


def fit_timed(X, y, **extra) -> tuple[ValueScorer, float, float]:
    """The estimator with the ``memlens train`` defaults on 2 threads; (wall s, CPU s)."""
    params = {**vars(ModelParams()), "n_jobs": 2, **extra}
    t0, c0 = time.perf_counter(), time.process_time()
    est = ValueScorer(**params).fit(X, y)
    return est, time.perf_counter() - t0, time.process_time() - c0


def training_section(rows: int) -> list[str]:
    X, y = synthetic_rows(rows)
    est, fit_s, fit_cpu = fit_timed(X, y)
    print(f"training on {rows:,} rows: {fit_s:.1f} s wall ({fit_cpu:.1f} CPU-s)", flush=True)
    _, goss_s, goss_cpu = fit_timed(X, y, sampling="goss")
    print(f"  with model.sampling=goss: {goss_s:.1f} s wall ({goss_cpu:.1f} CPU-s)", flush=True)
    from memlens.scorer.model import CompiledForest

    forest = CompiledForest.from_dump(est.booster_.dump_model())
    forest.raw(X[:10])  # compile
    t0 = time.perf_counter()
    ours = forest.raw(X)
    ours_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    theirs = est.decision_function(X)
    lgb_s = time.perf_counter() - t0

    def ok(wall: float, cpu: float) -> str:
        return f"{'yes' if wall < REQUIRED_TRAIN_S else '**no**'} ({'yes' if cpu / 2 < REQUIRED_TRAIN_S else '**no**'})"

    return [
        "## Training and prediction",
        "",
        f"The `memlens train` estimator defaults (`{ModelParams()}`) with `n_jobs=2`, on "
        f"{rows:,} synthetic rows x {N_FEATURES} features (5 % missing).  On a machine shared "
        "with other jobs the wall time overstates the cost; CPU s / 2 is what 2 free cores "
        "would take, the figure in brackets under ok.",
        "",
        "| step | wall s | CPU s | required | ok: wall (CPU / 2) |",
        "|---|---:|---:|---:|---|",
        f"| fit | {fit_s:.1f} | {fit_cpu:.1f} | < {REQUIRED_TRAIN_S:.0f} | {ok(fit_s, fit_cpu)} |",
        f"| fit, `model.sampling=goss` | {goss_s:.1f} | {goss_cpu:.1f} | < "
        f"{REQUIRED_TRAIN_S:.0f} | {ok(goss_s, goss_cpu)} |",
        f"| predict, compiled evaluator (1 thread) | {ours_s:.2f} | | | |",
        f"| predict, LightGBM (1 thread) | {lgb_s:.2f} | | | |",
        "",
        f"The two predictions are identical: {bool(np.array_equal(ours, theirs))}.",
    ]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--events", type=int, default=1_000_000)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "learned.md"))
    args = ap.parse_args(argv)
    trace, gen_args = bench_trace(args.events)
    prep_s = prepare(trace)
    print(f"trace: {trace.n_events:,} events; preparation {prep_s:.1f} s", flush=True)
    lines = [
        "# Learned value scorer speed (issue 12)",
        "",
        f"Command: `.venv/bin/python benchmarks/bench_learned.py --events {args.events} "
        f"--repeat {args.repeat} --rows {args.rows}`  ",
        f"Machine: {platform.machine()}, {os.cpu_count()} cores, Python "
        f"{platform.python_version()}, shared by other jobs (best of the repeats; load "
        f"average {os.getloadavg()[0]:.1f} when written).",
        "",
        *replay_section(trace, gen_args, args.repeat, prep_s),
        "",
        *training_section(args.rows),
        "",
    ]
    write_text(args.out, "\n".join(lines))
    print(f"written to {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
