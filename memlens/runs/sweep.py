"""A sweep of replays: many (trace, policy, budget) jobs, run on every core, resumable, tracked.

``memlens compare`` and ``memlens recommend`` are sweeps.  This module takes their job list
and

* skips every job already finished by an earlier run of the same sweep (``memlens.runs.resume``:
  key = resolved settings + trace hash + code version), saying how many it skipped;
* runs the rest on ``n_jobs`` worker processes (``memlens._util.parallel``), each reading its trace
  from the parsed-trace cache, with one progress bar over the jobs; ``backend=ray`` sends them
  to a Ray cluster instead (``ray_address``), one task per job;
* records one MLflow child run per job under the sweep's parent run, tagged with the sweep id,
  the git commit, the trace hash and the job's resume key.  Children are created here, in the
  main process, as results arrive: workers never talk to the tracking store, so a SQLite store
  sees one writer and a crashed worker cannot leave a run RUNNING;
* lets a job that raises fail alone: its child run ends FAILED with the error as a tag, the
  sweep goes on, and :class:`Sweep` lists it (the command exits 1 after writing its tables).

The numbers do not depend on ``n_jobs``: each job is the same deterministic replay, and the
results are put back in job order before anything is written.
"""

from __future__ import annotations

import contextlib
import sys
import time
import traceback
import uuid
from dataclasses import dataclass, field, fields

from memlens._util.parallel import connect_ray, run_parallel, start_workers, workers
from memlens.analyze.metrics import PER_TRACE_KEY
from memlens.analyze.report import Report, git_commit
from memlens.config.schema import (
    CommonConfig,
    CompareConfig,
    RunConfig,
    build_policy,
    policy_kwargs,
)
from memlens.kernels.warm import COMPILE_S, compile_seconds
from memlens.policy import announce_budgets
from memlens.runs import resume
from memlens.runs.pipeline import JOB_ANALYZERS, forget_traces, load_trace, run
from memlens.trace.cache import cached_events
from memlens.trace.features import CONTENT_FEATURES_KEY

#: Per-trace caches every job of a sweep reads, kept on a worker's trace between batches: the
#: metrics' per-trace values, and the items' content features (28 bytes an item) that three
#: policies read, which were otherwise computed again for each policy's batch.
SHARED_PER_TRACE = frozenset({PER_TRACE_KEY, CONTENT_FEATURES_KEY})

#: Exit code of a sweep whose tables were written but in which some job failed.
JOB_FAILED_EXIT = 1


@dataclass(frozen=True)
class Job:
    """One replay of a sweep; ``settings.policy`` is a plain dict, so the job pickles."""

    index: int
    policy_name: str
    settings: RunConfig
    trace_sha256: str
    key: str

    @property
    def label(self) -> str:
        return f"{self.policy_name}@{self.settings.budget}"


@dataclass
class Outcome:
    job: Job
    report: Report | None = None
    error: str | None = None  # the exception's last line, when the job failed
    skipped: bool = False  # served from an earlier run (memlens.runs.resume)


@dataclass
class Sweep:
    """What a sweep did: every job's outcome, in job order, and its counts."""

    sweep_id: str
    outcomes: list[Outcome] = field(default_factory=list)
    workers: int = 1
    wall_s: float = 0.0
    compiled: dict[str, float] = field(default_factory=dict)  # kernel stage -> seconds

    @property
    def failed(self) -> list[Outcome]:
        return [o for o in self.outcomes if o.error is not None]

    @property
    def skipped(self) -> int:
        return sum(o.skipped for o in self.outcomes)

    def summary(self) -> dict:
        return {
            "sweep_id": self.sweep_id,
            "jobs": len(self.outcomes),
            "ran": len(self.outcomes) - self.skipped - len(self.failed),
            "skipped": self.skipped,
            "failed": [
                {"job": o.job.label, "trace": o.job.settings.trace, "error": o.error}
                for o in self.failed
            ],  # fmt: skip
            "workers": self.workers,
            "wall_s": round(self.wall_s, 3),
            "compile_s": round(sum(self.compiled.values()), 3),
            "compiled": {k: round(v, 3) for k, v in self.compiled.items()},
        }

    def line(self) -> str:
        s = self.summary()
        return (f"sweep {self.sweep_id}: {s['jobs']} job(s): {s['ran']} ran on {self.workers} "
                f"worker(s), {s['skipped']} skipped (finished by an earlier run), "
                f"{len(s['failed'])} failed; {self.wall_s:.1f} s"
                + (f" (kernels compiled first: {s['compile_s']:.1f} s)" if s["compile_s"] else ""))  # fmt: skip


def plan(settings: CompareConfig, jobs, trace_hashes: dict[str, str]) -> list[Job]:
    """The sweep's jobs from ``memlens.cli.replay.compare_jobs`` tuples, with their resume keys."""
    shared = {f.name: getattr(settings, f.name) for f in fields(CommonConfig)}
    shared["progress"] = False  # one bar over the jobs instead of one per replay
    out = []
    for i, (path, name, policy, budget) in enumerate(jobs):
        target, params = policy_kwargs(policy)
        job = RunConfig(**{**shared, "trace": path}, policy={"_target_": target, **params},
                        budget=budget)  # fmt: skip
        out.append(Job(i, name, job, trace_hashes[path], resume.job_key(job, trace_hashes[path])))
    return out


def run_job(job: Job) -> tuple[Report | None, str | None]:
    """One replay (in a worker process): its report, or the error that stopped it."""
    try:
        _, report = run(job.settings, load_trace(job.settings), analyzers=JOB_ANALYZERS)
        return report, None
    except Exception as exc:  # noqa: BLE001 - one job's failure must not stop the sweep
        last = traceback.format_exception_only(type(exc), exc)[-1].strip()
        return None, last


def run_batch(jobs: list[Job]) -> list[tuple[Report | None, str | None]]:
    """Several jobs of one (trace, policy) in one worker, in order (``job_batches``).

    What the batch cached on its trace (the policy's per-trace preparation: TF-IDF vectors,
    the learned scorer's anchor table, ...) is dropped afterwards: no other batch of this
    sweep uses it, and on a 5M-event trace keeping every policy's preparation in one worker
    ran out of memory.  The metrics' per-trace values (stream index, reference prices:
    :data:`SHARED_PER_TRACE`) are kept: every batch's jobs use them, and the worker keeps
    its parsed trace (``memlens.runs.pipeline.load_trace``) for every batch it runs."""
    try:
        trace = load_trace(jobs[0].settings) if jobs else None
    except Exception:  # noqa: BLE001 - each job reports it as its own failure
        trace = None
    before = set(trace.__dict__) if trace is not None else set()
    if trace is not None:
        announce_budgets(trace, [job.settings.budget for job in jobs])
    try:
        return [run_job(job) for job in jobs]
    finally:
        if trace is not None:
            for key in set(trace.__dict__) - before - SHARED_PER_TRACE:
                del trace.__dict__[key]


def job_batches(jobs: list[Job], n_workers: int,
                weights: dict[str, float] | None = None) -> list[list[int]]:  # fmt: skip
    """Indices of ``jobs`` in batches of one (trace, policy) each, so that a worker builds a
    policy's per-trace preparation (content features, TF-IDF vectors, the learned scorer's
    anchor table: cached on the trace) once for all its budgets; the largest batches are
    halved while there are fewer batches than workers.

    The batches are handed out heaviest first (longest processing time first: a worker that
    is free takes the next), their weight the jobs' count times their policy's ``weights``
    (default 1; :func:`batch_weights`), ties in job order: a learned scorer's batch listed last
    would otherwise start when the other workers are nearly done.  Results do not depend on
    it (they are put back in job order)."""
    groups: dict[tuple[str, str], list[int]] = {}
    for i, job in enumerate(jobs):
        groups.setdefault((job.settings.trace, job.policy_name), []).append(i)
    batches = list(groups.values())
    while len(batches) < n_workers and max(map(len, batches), default=1) > 1:
        big = max(batches, key=len)
        batches.remove(big)
        batches += [big[: len(big) // 2], big[len(big) // 2 :]]
    weight = weights or {}
    return sorted(batches, key=lambda b: -len(b) * weight.get(jobs[b[0]].policy_name, 1.0))


def batch_weights(policies: dict[str, object]) -> dict[str, float]:
    """Per policy name, how much heavier a job of it is than a plain one: the policy's
    ``sweep_weight`` (a class attribute; 1 when absent), for :func:`job_batches`' order."""
    return {name: float(getattr(p, "sweep_weight", 1.0)) for name, p in policies.items()}


def start_workers_ahead(settings: CompareConfig, n_policies: int) -> None:
    """Start the workers of the sweep ``settings`` describes (``n_policies`` policies on
    every trace and budget) while the caller still checks its settings on one core
    (``memlens.cli.replay.check_jobs``): their imports and parsed traces, 1.5 s before the
    first job of a compare over 5,800 streams (issue 34), then overlap the composing of the
    policies.  Only as many as :func:`execute` will want (loky, not sharded), counted from
    the events in the traces' cache entries: a trace without one is parsed by the main
    process first, which takes longer than starting workers."""
    if settings.backend != "loky" or settings.shards or not settings.trace_cache:
        return
    paths = settings.traces or [settings.trace]
    events = [cached_events(p) for p in paths]
    if None in events:
        return
    per_trace = n_policies * len(settings.budgets)
    n = workers(settings.n_jobs, per_trace * len(paths), per_trace * sum(events),
                settings.parallel_min_events)  # fmt: skip
    start_workers(n, warm_worker, (settings, list(dict.fromkeys(paths))))


def warm_worker(task: tuple[CommonConfig, list[str]]) -> None:
    """In a worker started ahead: the traces its jobs will load (``load_trace`` keeps them);
    the first is also the oracle's, for the bounds solved before the jobs
    (``memlens.oracle.batch.keep_trace``: one copy, not two); and the intervals' compiled
    kernel, numba's first use (0.4 s the first job paid while the main process was still
    checking the settings)."""
    from memlens.analyze.stats import load_kernel

    settings, paths = task
    traces = [load_trace(settings, path) for path in paths]
    if settings.oracle.enabled and traces:
        from memlens.oracle.batch import keep_trace

        keep_trace(paths[0], settings.trace_cache, traces[0])
    load_kernel()  # numba's first use in this process: every job's intervals need it


def compile_before_fan_out(settings: CommonConfig, todo: list[Job],
                           built: dict[str, object] | None = None) -> dict[str, list[str]]:  # fmt: skip
    """Compile the kernels of the jobs' policies in this process, before any worker starts
    (``memlens.kernels.warm``), so that the workers load them from numba's cache instead of
    each compiling its own; nothing when a pre-flight check or an earlier run did it.
    Returns per policy name the stages its jobs needed (what their ``compile_s`` sums);
    ``built`` (if given) receives each policy as built here."""
    from memlens.kernels.warm import stage_labels
    from memlens.runs.preflight import warm_kernels

    built = {} if built is None else built
    for job in todo:
        if job.policy_name not in built:
            built[job.policy_name] = build_policy(job.settings.policy)
    if built:
        warm_kernels(settings, list(built.values()))
    return {n: stage_labels(p, settings.oracle.enabled) for n, p in built.items()}


class _JobFailed(Exception):
    """Raised inside a child run's block so that MLflow ends it FAILED."""


def _record(settings: CompareConfig, parent, sweep_id: str, outcome: Outcome) -> None:
    """The job's MLflow child run (main process): FINISHED with its report, or FAILED."""
    from memlens.runs.tracking import log_report, log_run, mlflow_run

    job = outcome.job
    tags = {"memlens.sweep_id": sweep_id, "memlens.git_commit": git_commit() or "unknown",
            "memlens.trace_sha256": job.trace_sha256, "memlens.job_key": job.key,
            "memlens.code_version": resume.code_version()}  # fmt: skip
    if outcome.error is not None:
        tags["memlens.error"] = outcome.error[:5000]
    with (
        contextlib.suppress(_JobFailed),
        mlflow_run(settings.mlflow, run_name=job.label, parent=parent, tags=tags) as child,
    ):
        if outcome.report is not None:
            log_report(child, outcome.report)
        else:
            log_run(child, {"trace": job.settings.trace, "policy": job.policy_name,
                            "budget": job.settings.budget}, {})  # fmt: skip
            raise _JobFailed


def new_sweep_id() -> str:
    """A sweep's id (random: it names one execution, its MLflow runs share it as a tag)."""
    return uuid.uuid4().hex[:12]


def parent_tags(name: str, sweep_id: str) -> dict[str, str]:
    """The tags of a sweep's MLflow parent run."""
    return {"memlens.runs.sweep": name, "memlens.sweep_id": sweep_id,
            "memlens.git_commit": git_commit() or "unknown"}  # fmt: skip


def execute(settings: CompareConfig, jobs: list[Job], parent=None, resumable: bool = True,
            events: dict[str, int] | None = None, sweep_id: str | None = None) -> Sweep:  # fmt: skip
    """Run the jobs not finished before; record each in MLflow; outcomes in job order."""
    start = time.perf_counter()
    sweep = Sweep(sweep_id or new_sweep_id())
    outcomes: dict[int, Outcome] = {}
    todo = []
    for job in jobs:
        done = resume.load(job.key) if resumable else None
        if done is not None:
            outcomes[job.index] = Outcome(job, done, skipped=True)
        else:
            todo.append(job)
    total = sum((events or {}).get(j.settings.trace, 0) for j in todo)
    if settings.backend == "ray" and todo:
        cpus = connect_ray(settings.ray_address)
        sweep.workers = max(1, min(cpus if settings.n_jobs == -1 else settings.n_jobs, len(todo)))
    else:
        sweep.workers = workers(settings.n_jobs, len(todo), total, settings.parallel_min_events)
    if sweep.workers > 1 or settings.backend == "ray":  # the jobs parse their own copies
        forget_traces()
    policies: dict[str, object] = {}
    stages = compile_before_fan_out(settings, todo, policies)
    batches = job_batches(todo, sweep.workers, batch_weights(policies))
    results = run_parallel(run_batch, [[todo[i] for i in b] for b in batches], sweep.workers,
                           settings.progress, "job batches", settings.backend)  # fmt: skip
    done_jobs = ((i, r) for b, rs in results for i, r in zip(batches[b], rs, strict=True))
    for i, (report, error) in done_jobs:
        if report is not None:  # what the main process compiled for it (workers compile none)
            report.timing["compile_s"] = round(compile_seconds(stages[todo[i].policy_name]), 3)
        outcome = Outcome(todo[i], report, error)
        outcomes[todo[i].index] = outcome
        if report is not None and resumable:
            resume.save(todo[i].key, report)
        if error is not None:
            print(f"warning: job {todo[i].label} on {todo[i].settings.trace} failed: {error}",
                  file=sys.stderr)  # fmt: skip
        _record(settings, parent, sweep.sweep_id, outcome)
    sweep.outcomes = [outcomes[j.index] for j in jobs]
    sweep.compiled = dict(COMPILE_S)
    sweep.wall_s = time.perf_counter() - start
    return sweep
