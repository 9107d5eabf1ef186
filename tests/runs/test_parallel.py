"""Sweeps on several worker processes give exactly the serial numbers (memlens._util.parallel)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from memlens._util.parallel import cores, run_parallel, workers
from memlens.analyze.registry import declared

MEMLENS = [sys.executable, "-m", "memlens"]


def memlens(*args: str, cwd: Path, check: bool = True) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONWARNINGS": "ignore"}
    proc = subprocess.run([*MEMLENS, *args], cwd=cwd, capture_output=True, text=True, env=env)
    if check and proc.returncode != 0:
        raise AssertionError(f"memlens {' '.join(args)} failed:\n{proc.stdout}\n{proc.stderr}")
    return proc


@pytest.fixture(scope="module")
def trace(tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("trace")
    memlens("data", "generate", "archetype=support", "seed=4", "streams=6",
            "events_per_stream=300", f"out={d / 't.jsonl.gz'}", cwd=d)  # fmt: skip
    return d / "t.jsonl.gz"


def without_timing(rows: list[dict]) -> list[dict]:
    """compare.json rows minus wall-clock figures (the only values allowed to differ)."""
    timing = {k for k, m in declared().items() if m.kind == "timing"}
    return [{k: v for k, v in r.items() if k not in timing} for r in rows]


@pytest.mark.slow  # two memlens processes and a worker pool: about 40 s on a busy 2-core machine
def test_two_workers_give_the_serial_compare_json_bit_for_bit(tmp_path, trace):
    common = [f"trace={trace}", "policies=[lru,rule]", "budgets=[256,1024]",
              "reference=lru", "mlflow.enabled=false", "resume=false"]  # fmt: skip
    memlens("compare", *common, "n_jobs=1", f"hydra.run.dir={tmp_path / 'serial'}", cwd=tmp_path)
    proc = memlens("compare", *common, "n_jobs=2", "parallel_min_events=0",
                   f"hydra.run.dir={tmp_path / 'two'}", cwd=tmp_path)  # fmt: skip
    serial = json.loads((tmp_path / "serial" / "compare.json").read_text())
    two = json.loads((tmp_path / "two" / "compare.json").read_text())
    assert len(serial) == 4
    assert without_timing(two) == without_timing(serial)  # floats compared exactly
    assert json.loads((tmp_path / "two" / "sweep.json").read_text())["workers"] == 2
    assert "4 job(s): 4 ran on 2 worker(s)" in proc.stderr

    def columns(run: str) -> list[list[str]]:
        return [
            line.split(",")[:4]
            for line in (tmp_path / run / "compare.csv").read_text().splitlines()
        ]

    assert columns("two") == columns("serial")


def sweep_json(trace: Path, n_jobs: int, out: Path) -> list[dict]:
    """compare.json of a sweep run in this process through memlens.runs.sweep with ``n_jobs``."""
    from memlens.cli.replay import Row, add_differences, compare_jobs, write_compare
    from memlens.config.compose import compose_config
    from memlens.config.schema import resolve
    from memlens.runs.pipeline import load_trace
    from memlens.runs.sweep import execute, plan

    settings = resolve(compose_config("compare", [
        f"trace={trace}", "policies=[lru,rule]", "budgets=[256,1024]", "reference=lru",
        "mlflow.enabled=false", f"n_jobs={n_jobs}", "parallel_min_events=0"]))  # fmt: skip
    loaded = load_trace(settings)
    jobs = plan(settings, list(compare_jobs(settings)), {str(trace): loaded.sha256})
    sweep = execute(settings, jobs, None, resumable=False, events={str(trace): loaded.n_events})
    assert sweep.workers == n_jobs and not sweep.failed
    rows = [Row({**o.report.row(), "policy": o.job.policy_name}, o.report) for o in sweep.outcomes]
    add_differences(rows, "lru", settings.stats)
    write_compare(out, rows, "lru")
    return json.loads((out / "compare.json").read_text())


@pytest.mark.slow  # kept out of the default run (6-minute budget); make test-all runs it
def test_a_sweep_on_two_workers_equals_the_serial_one(tmp_path, trace):
    (tmp_path / "one").mkdir(), (tmp_path / "two").mkdir()
    serial = sweep_json(trace, 1, tmp_path / "one")
    assert len(serial) == 4 and serial[0]["policy"] == "lru" and serial[-1]["budget"] == 1024
    assert without_timing(sweep_json(trace, 2, tmp_path / "two")) == without_timing(serial)


def test_small_sweeps_stay_serial_and_workers_never_exceed_jobs():
    assert workers(-1, 10, total_events=1_000, min_events=200_000) == 1
    assert workers(-1, 10, total_events=10**7, min_events=200_000) == min(cores(), 10)
    assert workers(8, 3, total_events=10**7, min_events=0) == 3
    assert workers(2, 5, total_events=0, min_events=0) == 2


def square(x: int) -> int:
    return x * x


@pytest.mark.parametrize("n", [1, 2])
def test_run_parallel_returns_every_task_once_with_its_index(n):
    got = dict(run_parallel(square, range(7), n, progress=False))
    assert got == {i: i * i for i in range(7)}


def test_n_jobs_is_refused_before_any_work(tmp_path):
    proc = memlens("compare", "n_jobs=0", "mlflow.enabled=false", cwd=tmp_path, check=False)
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines()[-1].startswith("error: n_jobs must be -1 (every core)")


def test_job_batches_group_a_policy_and_split_when_workers_would_idle():
    from types import SimpleNamespace

    from memlens.runs.sweep import job_batches

    def job(trace, policy):
        return SimpleNamespace(settings=SimpleNamespace(trace=trace), policy_name=policy)

    jobs = [job("a", p) for p in ("lru", "rule") for _ in range(4)] + [job("b", "lru")]
    assert job_batches(jobs, 2) == [[0, 1, 2, 3], [4, 5, 6, 7], [8]]
    alone = [job("a", "rule") for _ in range(5)]
    assert sorted(map(sorted, job_batches(alone, 2))) == [[0, 1], [2, 3, 4]]
    assert job_batches(alone, 8) and sorted(i for b in job_batches(alone, 8) for i in b) == [
        0, 1, 2, 3, 4]  # fmt: skip
    assert job_batches([], 2) == []


def test_job_batches_hand_out_the_heaviest_first_and_results_keep_job_order():
    """Batches go out by weight (jobs x the policy's ``sweep_weight``), ties in job order; the
    policies' own weights put the learned scorer's batch first, Generative Agents' next."""
    from types import SimpleNamespace

    from memlens.policies.generative_agents import GenerativeAgents
    from memlens.policies.learned import LearnedScorer
    from memlens.policies.lru import LRU

    from memlens.runs.sweep import batch_weights, job_batches

    def job(policy):
        return SimpleNamespace(settings=SimpleNamespace(trace="a"), policy_name=policy)

    names = ["lru", "generative_agents", "window", "learned"]
    jobs = [job(p) for p in names for _ in range(4)]
    weights = batch_weights({"lru": LRU(), "generative_agents": GenerativeAgents(),
                             "learned": LearnedScorer(model=None), "window": object()})  # fmt: skip
    assert weights["window"] == weights["lru"] == 1.0
    batches = job_batches(jobs, 2, weights)
    assert [jobs[b[0]].policy_name for b in batches] == ["learned", "generative_agents",
                                                         "lru", "window"]  # fmt: skip
    assert sorted(i for b in batches for i in b) == list(range(16))
    assert job_batches(jobs, 2) == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9, 10, 11], [12, 13, 14, 15]]


def _wait_for_peers(folder: str) -> int:
    """A task started ahead: registers its process, then waits until two have (so each of
    the two workers took one)."""
    import time

    Path(folder, str(os.getpid())).touch()
    while len(os.listdir(folder)) < 2:
        time.sleep(0.01)
    return os.getpid()


def _pid(_: int) -> int:
    return os.getpid()


def test_workers_started_ahead_run_the_sweep_and_are_let_go(tmp_path):
    """``start_workers`` starts the pool the next ``run_parallel`` of that size uses (no new
    processes); ``release_workers`` lets it go, and a later sweep starts its own."""
    import warnings

    from memlens._util import parallel

    parallel.start_workers(2, _wait_for_peers, str(tmp_path))
    results = dict(run_parallel(_pid, range(6), 2))
    started = {int(p.name) for p in tmp_path.iterdir()}
    assert len(started) == 2 and set(results.values()) <= started
    parallel.release_workers()
    parallel.start_workers(2, _pid, 0)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # joblib's "tasks cancelled" warning is not shown
        parallel.release_workers(kill=True)
    assert sorted(dict(run_parallel(_pid, range(3), 2))) == [0, 1, 2]


def test_a_sweep_starts_workers_ahead_only_when_it_will_use_them(tmp_path, monkeypatch):
    """``start_workers_ahead``: as many as ``execute`` will want, counted from the trace's
    cache entry (none without one, none for a sweep below ``parallel_min_events``)."""
    import numpy as np

    from memlens.config.schema import CompareConfig
    from memlens.runs import sweep
    from memlens.testing import random_events
    from memlens.trace.cache import cached_events, load_trace_cached
    from memlens.trace.io import write_trace

    monkeypatch.setenv("MEMLENS_CACHE", str(tmp_path / "cache"))
    path = tmp_path / "t.jsonl"
    write_trace(path, random_events(np.random.default_rng(3), n_events=200, n_streams=3))
    started = []
    monkeypatch.setattr(sweep, "start_workers", lambda n, fn, task: started.append((n, task)))
    settings = CompareConfig(trace=str(path), budgets=[256, 512], n_jobs=2,
                             parallel_min_events=0)  # fmt: skip
    assert cached_events(path) is None
    sweep.start_workers_ahead(settings, 3)
    assert started == []  # no cache entry yet: the main process parses it first
    n_events = load_trace_cached(path).n_events
    assert cached_events(path) == n_events
    sweep.start_workers_ahead(settings, 3)
    assert started == [(2, (settings, [str(path)]))]
    started.clear()
    big = CompareConfig(trace=str(path), budgets=[256, 512], n_jobs=2,
                        parallel_min_events=6 * n_events + 1)  # fmt: skip
    sweep.start_workers_ahead(big, 3)
    assert started == [(1, (big, [str(path)]))]  # 1: start_workers starts none


def test_a_failed_check_stops_the_workers_started_ahead_silently(tmp_path, trace):
    """A compare whose workers started ahead (its trace has a cache entry) and whose check
    then fails exits 2 with its one error line: no worker's output, no joblib warning."""
    from memlens.trace.cache import load_trace_cached

    load_trace_cached(trace)  # the entry that lets the compare start its workers ahead
    env = {k: v for k, v in os.environ.items() if k != "PYTHONWARNINGS"}
    proc = subprocess.run([*MEMLENS, "compare", f"trace={trace}", "policies=[lru,bogus]",
                           "n_jobs=2", "parallel_min_events=0", "mlflow.enabled=false",
                           f"hydra.run.dir={tmp_path / 'run'}"], cwd=tmp_path,
                          capture_output=True, text=True, env=env)  # fmt: skip
    assert proc.returncode == 2
    assert proc.stderr.splitlines() == [proc.stderr.splitlines()[0]]
    assert proc.stderr.startswith("error: unknown policy 'bogus'")
    assert not (tmp_path / "run").exists()


def test_a_worker_started_ahead_gives_the_oracle_the_trace_it_loaded(tmp_path, monkeypatch):
    """``warm_worker`` loads the sweep's traces and hands the first to the oracle's chunks
    (``memlens.oracle.batch.keep_trace``): the same object, not a second copy."""
    import numpy as np

    from memlens.config.schema import CompareConfig
    from memlens.oracle import batch
    from memlens.runs import sweep
    from memlens.runs.pipeline import forget_traces, load_trace
    from memlens.testing import random_events
    from memlens.trace.io import write_trace

    monkeypatch.setenv("MEMLENS_CACHE", str(tmp_path / "cache"))
    path = tmp_path / "t.jsonl"
    write_trace(path, random_events(np.random.default_rng(5), n_events=150, n_streams=2))
    settings = CompareConfig(trace=str(path), budgets=[256])
    forget_traces()
    sweep.warm_worker((settings, [str(path)]))
    assert batch._trace(str(path), True) is load_trace(settings, str(path))
    forget_traces()
    batch._TRACE.clear()


def test_a_worker_started_ahead_loads_the_intervals_kernel(tmp_path):
    """numba's first use in a worker (0.4 s) happens while it waits for the main process, not
    in its first job: after ``warm_worker`` the intervals' kernel is loaded, with the argument
    types the intervals use (a second call compiles and loads nothing)."""
    import subprocess
    import sys

    import numpy as np

    from memlens.testing import random_events
    from memlens.trace.io import write_trace

    path = tmp_path / "t.jsonl"
    write_trace(path, random_events(np.random.default_rng(5), n_events=150, n_streams=2))
    code = (
        "import sys\n"
        "from memlens.config.schema import CompareConfig\n"
        "from memlens.kernels.bootstrap import replicate_sums as k\n"
        "from memlens.runs import sweep\n"
        "from memlens.analyze.stats import interval, StatsConfig\n"
        "import numpy as np\n"
        "before = len(k.signatures)\n"
        "sweep.warm_worker((CompareConfig(trace=sys.argv[1], budgets=[256]), [sys.argv[1]]))\n"
        "after = len(k.signatures)\n"
        "interval((np.arange(30.0), np.ones(30)), StatsConfig())\n"
        "print(before, after, len(k.signatures))\n"
    )
    proc = subprocess.run([sys.executable, "-c", code, str(path)], capture_output=True,
                          text=True, check=True)  # fmt: skip
    assert proc.stdout.split() == ["0", "1", "1"]
