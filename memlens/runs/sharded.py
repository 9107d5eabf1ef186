"""Replay one trace larger than a machine: one task per shard of streams and job, merged exactly.

``memlens simulate|compare ... shards=N backend=ray [ray_address=HOST:PORT]``:

1. the driver splits the trace by stream into N shards (``memlens.trace.shard``: streamed,
   bounded memory, cached by the input's bytes and N), checking what can be checked while
   splitting (a bad line: file, line, field, exit 2);
2. one *prepare* task per shard parses and validates its shard with the exact parser (kept
   in the worker's parsed-trace cache); an error names the input's file and line, and the
   command exits 2 before any replay;
3. one *replay* task per shard and job replays its streams through the same pipeline as a
   single process (``memlens.runs.pipeline.replay`` and the analyzers), writes its
   per-request rows, event log and moves as Parquet parts (event, item and request numbers
   renumbered to the whole trace's), and returns a small ``ShardSummary`` (per stream:
   metrics and parts; a histogram of context tokens; the oracle's stream bounds);
4. the driver merges the summaries (``memlens.analyze.merge``: equal to the single-process
   report bit for bit) and the Parquet parts (``memlens.runs.parts``).

The driver never parses the trace: it holds per-stream figures and one batch per Parquet
part.  ``backend=ray``: tasks on the cluster at ``ray_address`` (``auto``: ``$RAY_ADDRESS``
if set, else a Ray started here on 127.0.0.1 with a small object store and stopped at the
end); a task whose worker dies is retried (:data:`MAX_RETRIES`) and, being deterministic,
gives the same result.  Every node must see the shard folder (a shared filesystem) and the
run folder.  ``backend=loky``: the tasks run one after another in this process (one shard's
trace in memory at a time), which is what the fast tests use.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import shutil
import tempfile
import time
import traceback
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from memlens.analyze.merge import ShardSummary, check_mergeable, merge_sections
from memlens.analyze.report import Report, assemble
from memlens.analyze.stats import intervals
from memlens.config.schema import CommonConfig, RunConfig, build_policy, policy_kwargs
from memlens.config.store import SettingsError
from memlens.runs.pipeline import ANALYZERS, ROW_ANALYZERS, Replay, job_compile_s, replay
from memlens.trace.lines import TraceError
from memlens.trace.shard import ShardSet, resolved_shard, shard_trace

#: Times Ray runs a task again after its worker died (a killed process, a lost node).
MAX_RETRIES = 3
#: The object store of a Ray started here: tasks return small summaries, never arrays.
OBJECT_STORE_BYTES = 100_000_000


@dataclass(frozen=True)
class ShardTask:
    """One task: shard ``k`` of the shard set in ``folder``, for one job's settings (a plain
    policy dict, so it pickles).  ``parts_dir``: where the per-request rows, event log and
    moves go (simulate); None for a compare job."""

    folder: str
    n: int
    k: int
    settings: RunConfig
    parts_dir: str | None = None
    job: int = 0


def shard_set(task: ShardTask) -> ShardSet:
    return ShardSet(
        Path(task.folder), task.n, json.loads((Path(task.folder) / "meta.json").read_text())
    )


_LOADED: dict[tuple[str, int], object] = {}


def load_shard(task: ShardTask):
    """Shard ``k``'s trace (resolved, parsed, validated), memoised: a worker keeps the last
    shard it loaded (the next job of the same shard reuses it) and only that one."""
    from memlens.trace.cache import load_trace_cached

    key = (task.folder, task.k)
    if key not in _LOADED:
        _LOADED.clear()
        shards = shard_set(task)
        path, _ = resolved_shard(shards, task.k)
        s = task.settings
        try:
            _LOADED[key] = load_trace_cached(path, enabled=s.trace_cache, limits=s.trace_limits)
        except TraceError as err:
            raise shards.error(task.k, err) from None
    return _LOADED[key]


def prepare_shard(task: ShardTask) -> tuple[np.ndarray, tuple | None, dict]:
    """Parse and validate a shard: (which broadcast lines it kept, the error as (file, line,
    field, message) or None, the worker's memory during the parse)."""
    reset_peak_rss()
    memory = {"rss_start_kib": rss_kib(), "pid": os.getpid()}
    try:
        load_shard(task)
    except TraceError as err:
        return np.zeros(0, dtype=bool), (err.path, err.line, err.field, err.message), memory
    memory["rss_peak_kib"] = rss_kib("VmHWM")
    return resolved_shard(shard_set(task), task.k)[1], None, memory


def replay_shard(task: ShardTask) -> tuple[ShardSummary | None, str | None]:
    """Replay one shard for one job: its summary (and its Parquet parts), or the error."""
    try:
        return _replay_shard(task), None
    except Exception as exc:  # noqa: BLE001 - the job fails, the others go on
        return None, traceback.format_exception_only(type(exc), exc)[-1].strip()


def rss_kib(field: str = "VmRSS") -> int:
    """This process's resident memory (``VmRSS``) or its peak (``VmHWM``), KiB (0 where
    /proc does not say)."""
    try:
        with open("/proc/self/status") as fh:
            for row in fh:
                if row.startswith(field + ":"):
                    return int(row.split()[1])
    except OSError:
        pass
    return 0


def reset_peak_rss() -> None:
    """Start this process's peak-RSS count again from now (Linux: ``clear_refs`` 5)."""
    with contextlib.suppress(OSError), open("/proc/self/clear_refs", "w") as fh:
        fh.write("5")


def _replay_shard(task: ShardTask) -> ShardSummary:
    reset_peak_rss()  # the summary reports what this task (its shard) took at its peak
    start_kib = rss_kib()
    trace = load_shard(task)
    shards, s = shard_set(task), task.settings
    record = task.parts_dir is not None and s.events.enabled
    done = replay(s, trace, record_values=record)
    analyzers = ANALYZERS if task.parts_dir is not None else ROW_ANALYZERS
    sections = {(a.__name__): a(done) for a in analyzers}
    metrics, oracle = sections["analyze_metrics"], sections["analyze_oracle"]
    first = dict(shards.meta["shards"][task.k]["streams"])
    values, counts = np.unique(done.result.context_tokens, return_counts=True)
    tiers = sections.get("analyze_tiers")
    if task.parts_dir is not None:
        write_parts(Path(task.parts_dir), task.k, done, shards)
    memory = {"rss_start_kib": start_kib, "rss_peak_kib": rss_kib("VmHWM"), "pid": os.getpid(),
              "events": trace.n_events}  # fmt: skip
    return ShardSummary(
        task.k, list(trace.stream_names), [int(first[n]) for n in trace.stream_names],
        metrics.streams, metrics.stream_parts, values, counts.astype(np.int64), oracle.data,
        oracle.timing, None if tiers is None else tiers.data,
        sections["analyze_retrieval"].data, done.result.engine, float(done.result.wall_s),
        not done.outside_oracle_class, memory,
    )  # fmt: skip


def _global(index: np.ndarray, local: np.ndarray) -> np.ndarray:
    """Shard-local indices as the whole trace's (negative: none, kept)."""
    safe = np.where(local >= 0, local, 0)
    return np.where(local >= 0, index[safe], local).astype(local.dtype)


def write_parts(folder: Path, k: int, run: Replay, shards: ShardSet) -> None:
    """The shard's per-request rows, event log and moves, renumbered to the whole trace."""
    import pyarrow.parquet as pq

    from memlens.analyze.eventlog import DICTIONARY_COLUMNS, event_table
    from memlens.analyze.metrics import per_request_table
    from memlens.runs.parts import BATCH
    from memlens.runs.writers import moves_table, write_parquet

    folder.mkdir(parents=True, exist_ok=True)  # row groups of BATCH rows: what the merge reads
    s, trace = run.settings, run.trace
    events = shards.sidecar(k, "events")
    cols = per_request_table(trace, run.result, run.retrieval, s.price_per_mtok, s.costs)
    cols["event"] = events[trace.req_event]
    write_parquet(folder / f"per_request.{k}.parquet", cols, BATCH)
    if s.output.moves:
        moves = moves_table(run)
        moves["event"] = _global(events, np.asarray(moves["event"]))
        write_parquet(folder / f"moves.{k}.parquet", moves, BATCH)
    if s.events.enabled:
        import pyarrow as pa

        table = event_table(run)
        renumbered = {"event": events, "item": shards.sidecar(k, "items"),
                      "request": shards.sidecar(k, "requests")}  # fmt: skip
        for name, index in renumbered.items():
            col = table.column(name).to_numpy()
            at = table.schema.get_field_index(name)
            table = table.set_column(at, name, pa.array(_global(index, col)))
        pq.write_table(table, folder / f"events.{k}.parquet", row_group_size=BATCH,
                       use_dictionary=list(DICTIONARY_COLUMNS))  # fmt: skip


# ----------------------------------------------------------------------- the driver
def plain_policy(settings: RunConfig) -> RunConfig:
    """The settings with the policy as a plain dict (what a task pickles)."""
    target, params = policy_kwargs(settings.policy)
    return dataclasses.replace(settings, policy={"_target_": target, **params})


def check_shardable(settings: CommonConfig, policies: list = ()) -> None:
    """What a sharded run cannot do, as a ``SettingsError`` before any work: retrieval, a
    policy whose streams depend on each other (``Policy.stream_local``), a metric without an
    exact merge rule."""
    for policy in policies:
        if not getattr(policy, "stream_local", True):
            name = getattr(policy, "name", type(policy).__name__)
            raise SettingsError(f"shards: policy {name} prepares its scores from every stream "
                                "of the trace at once, so a shard of streams would replay "
                                "differently; run it without shards")  # fmt: skip
    if settings.retrieval.enabled:
        raise SettingsError("shards: request-time retrieval indexes the whole trace's long-term "
                            "store; run it without shards (retrieval.enabled=false to shard)")  # fmt: skip
    try:
        check_mergeable()
    except ValueError as exc:
        raise SettingsError(str(exc)) from None


@contextlib.contextmanager
def ray_session(address: str) -> Iterator[None]:
    """Ray for the tasks: the cluster at ``address``, or (``auto`` without ``$RAY_ADDRESS``) a
    Ray started here on 127.0.0.1 and stopped when the block ends."""
    try:
        import ray
    except ImportError:
        raise SettingsError("backend=ray needs Ray, which is not installed: "
                            "pip install 'memlens[ray]'") from None  # fmt: skip
    if ray.is_initialized():
        yield
        return
    temp = None
    if address == "auto" and not os.environ.get("RAY_ADDRESS"):
        from memlens._util.parallel import cores

        temp = tempfile.mkdtemp(prefix="ray", dir="/tmp")  # short: Ray's socket paths are limited
        ray.init(address="local", _node_ip_address="127.0.0.1", num_cpus=cores(),
                 object_store_memory=OBJECT_STORE_BYTES, include_dashboard=False,
                 _temp_dir=temp, log_to_driver=False, logging_level="ERROR")  # fmt: skip
    else:
        ray.init(address=address, log_to_driver=False, logging_level="ERROR")
    try:
        yield
    finally:
        ray.shutdown()
        if temp is not None:
            shutil.rmtree(temp, ignore_errors=True)


def _ray_map(fn: Callable, tasks: list) -> list:
    import ray

    remote = ray.remote(num_cpus=1, max_retries=MAX_RETRIES)(fn)
    return ray.get([remote.remote(t) for t in tasks])


@contextlib.contextmanager
def task_runner(settings: CommonConfig) -> Iterator[Callable[[Callable, list], list]]:
    """``map(fn, tasks)`` on Ray (``backend=ray``) or in this process, one task at a time."""
    if getattr(settings, "backend", "loky") == "ray":
        with ray_session(settings.ray_address):
            yield _ray_map
    else:
        yield lambda fn, tasks: [fn(t) for t in tasks]


def split(settings: CommonConfig, path: str) -> ShardSet:
    """The trace's shards (made once); a bad line raises ``TraceError``."""
    return shard_trace(path, settings.shards, limits=settings.trace_limits)


def prepare(run_tasks: Callable, tasks: list[ShardTask], shards: ShardSet) -> list[dict]:
    """Validate every shard (one task each); raise the first error as a ``TraceError`` naming
    the input's file and line.  Returns each task's worker memory."""
    results = run_tasks(prepare_shard, tasks)
    errors = [TraceError(*e) for _, e, _ in results if e is not None]
    if errors:
        raise min(errors, key=lambda e: (e.path, e.line))
    lost = shards.unkept_error([kept for kept, _, _ in results])
    if lost is not None:
        raise lost
    return [memory for _, _, memory in results]


def shard_tasks(shards: ShardSet, settings: RunConfig, parts_dir: str | None = None,
                job: int = 0) -> list[ShardTask]:  # fmt: skip
    """A task per shard that holds a stream (a shard without one has nothing to replay)."""
    return [ShardTask(str(shards.folder), shards.n, k, settings, parts_dir, job)
            for k, info in enumerate(shards.meta["shards"]) if info["streams"]]  # fmt: skip


def merged_report(settings: RunConfig, shards: ShardSet, summaries: list[ShardSummary],
                  wall_s: float, policy=None) -> Report:  # fmt: skip
    """The single-process report of the job, from its shards' summaries."""
    policy = policy if policy is not None else build_policy(settings.policy)
    applies = all(s.applies for s in summaries)
    sections = merge_sections(summaries, settings.budget, settings.demand_fetch,
                              settings.price_per_mtok, applies)  # fmt: skip
    sections[0].timing.update(wall_s=wall_s, compile_s=job_compile_s(policy, settings))
    events = sections[0].overall["events"]
    sections[0].timing["events_per_s"] = events / wall_s if wall_s > 0 else None
    target, params = policy_kwargs(settings.policy)
    identity = {
        "trace": {"path": settings.trace, "sha256": shards.sha256, "events": shards.n_events,
                  "streams": shards.n_streams},
        "policy": policy.name,
        "policy_config": {"_target_": target, **params},
        "budget": settings.budget,
        "demand_fetch": settings.demand_fetch,
        "seed": settings.seed,
        "outside_oracle_class": not applies,
    }  # fmt: skip
    report = assemble(identity, sections)
    report.intervals = intervals(report.stream_parts, settings.stats)
    return report


def no_requests(shards: ShardSet, path: str) -> TraceError | None:
    """The single-process error for a trace without a request (nothing to replay)."""
    if shards.meta["requests"]:
        return None
    return TraceError(path, 0, None, "no requests in the trace: nothing to replay "
                                     f"({shards.n_events} events, none a request)")  # fmt: skip


def simulate_sharded(settings: RunConfig, folder: Path, resolved_yaml: str,
                     stats: dict | None = None) -> Report:  # fmt: skip
    """``simulate ... shards=N``: the merged report, and every file a single-process run
    writes into ``folder`` (metrics.json, per_request.parquet, events.parquet, ...).
    ``stats``: a dict that receives each phase's seconds and the workers' memory per task
    (``benchmarks/bench_shard.py``)."""
    from memlens.runs.preflight import warm_kernels

    check_shardable(settings, [build_policy(settings.policy)])
    settings = plain_policy(settings)
    clock = _Clock(stats if stats is not None else {})
    shards = split(settings, settings.trace)
    if (err := no_requests(shards, settings.trace)) is not None:
        raise err
    policy = build_policy(settings.policy)
    warm_kernels(settings, [policy], tiers=True)
    clock.lap("split_s")
    parts = Path(tempfile.mkdtemp(prefix=".parts.", dir=folder))
    try:
        tasks = shard_tasks(shards, settings, str(parts))
        with task_runner(settings) as run_tasks:
            clock.lap("start_s")
            clock.stats["prepare_memory"] = prepare(run_tasks, tasks, shards)
            clock.lap("prepare_s")
            results = run_tasks(replay_shard, tasks)
            wall = clock.lap("replay_s")
        failed = [e for _, e in results if e is not None]
        if failed:
            raise RuntimeError(f"a shard's replay failed: {failed[0]}")
        clock.stats["replay_memory"] = [r.memory for r, _ in results]
        report = merged_report(settings, shards, [r for r, _ in results], wall, policy)
        write_merged(folder, parts, [t.k for t in tasks], report, settings, resolved_yaml)
        clock.lap("merge_s")
    finally:
        shutil.rmtree(parts, ignore_errors=True)
    return report


class _Clock:
    """Seconds per phase, and this process's peak RSS in it (KiB), into ``stats``."""

    def __init__(self, stats: dict):
        self.stats, self.last = stats, time.perf_counter()
        reset_peak_rss()

    def lap(self, name: str) -> float:
        now = time.perf_counter()
        self.stats[name], self.last = now - self.last, now
        self.stats.setdefault("driver_peak_kib", {})[name] = rss_kib("VmHWM")
        reset_peak_rss()
        return self.stats[name]


#: Event-log rows above which a sharded run writes no ``report.html``: the static report loads
#: the whole log into an in-memory DuckDB database (``memlens.analyze.prepared``), about 300
#: bytes a row, which is the very thing a sharded driver must not hold.
REPORT_MAX_ROWS = 2_000_000


def static_report(folder: Path, events: Path, report: Report) -> list[Path]:
    """``report.html`` from the merged event log, unless the log is too large to load whole
    (then a note on stderr says so; ``memlens ui`` still reads ``events.parquet``)."""
    import sys

    import pyarrow.parquet as pq

    from memlens.present.static_report import write_static_report

    rows = pq.ParquetFile(events).metadata.num_rows
    if rows > REPORT_MAX_ROWS:
        print(f"note: shards: no report.html ({rows:,} event-log rows, more than "
              f"{REPORT_MAX_ROWS:,} to load whole); events.parquet has them all", file=sys.stderr)  # fmt: skip
        return []
    return [write_static_report(folder / "report.html", events, report.to_dict())]


def write_merged(folder: Path, parts: Path, ks: list[int], report: Report, settings: RunConfig,
                 resolved_yaml: str) -> list[Path]:  # fmt: skip
    """The run's files from the shards' parts, as ``memlens.runs.writers.write_run`` names them."""
    from memlens._util.atomic import write_json, write_text
    from memlens.analyze.eventlog import DICTIONARY_COLUMNS
    from memlens.runs.parts import merge_sorted

    paths = [merge_sorted([parts / f"per_request.{k}.parquet" for k in ks],
                          folder / "per_request.parquet", "event")]  # fmt: skip
    if settings.output.moves:
        paths.append(merge_sorted([parts / f"moves.{k}.parquet" for k in ks],
                                  folder / "moves.parquet", "event"))  # fmt: skip
    paths.append(folder / "resolved_config.yaml")
    write_text(paths[-1], resolved_yaml)
    if settings.events.enabled:
        paths.append(merge_sorted([parts / f"events.{k}.parquet" for k in ks],
                                  folder / "events.parquet", "event", renumber="seq",
                                  use_dictionary=list(DICTIONARY_COLUMNS)))  # fmt: skip
        paths += static_report(folder, paths[-1], report)
    paths.append(folder / "metrics.json")
    write_json(paths[-1], report.to_dict(), flat_lists=True)
    return paths


def trace_splitter(settings: CommonConfig, traces: list[str], policies: list,
                   tiers: bool = False) -> Callable[[], None]:  # fmt: skip
    """The pre-flight step of a sharded run (instead of parsing each trace whole): compile
    the kernels, then split every trace (a bad line found while splitting: ``TraceError``)."""
    from memlens.runs.preflight import warm_kernels

    def run() -> None:
        warm_kernels(settings, list(policies), tiers=tiers)
        for path in dict.fromkeys(traces):
            shards = split(settings, path)
            if (err := no_requests(shards, path)) is not None:
                raise err

    return run


def _workers(settings: CommonConfig) -> int:
    if getattr(settings, "backend", "loky") != "ray":
        return 1
    import ray

    return int(ray.cluster_resources().get("CPU", 1))


def execute_sharded(settings, jobs: list, parent=None, resumable: bool = True,
                    sweep_id: str | None = None):  # fmt: skip
    """``memlens.runs.sweep.execute`` for ``shards=N``: every job not finished before as one
    task per shard, all in flight together; each job's report merged from its shards; the
    same resume entries (a sharded job's numbers are the single-process job's) and MLflow
    child runs.  A bad line in a trace raises ``TraceError`` before any replay."""
    from memlens.kernels.warm import compile_seconds
    from memlens.runs import resume
    from memlens.runs.sweep import Sweep, _record, compile_before_fan_out, new_sweep_id

    start = time.perf_counter()
    sweep = Sweep(sweep_id or new_sweep_id())
    outcomes, todo = {}, []
    for job in jobs:
        done = resume.load(job.key) if resumable else None
        if done is not None:
            outcomes[job.index] = _outcome(job, done, skipped=True)
        else:
            todo.append(job)
    check_shardable(settings, [build_policy(j.settings.policy) for j in todo])
    stages = compile_before_fan_out(settings, todo)
    sets = {p: split(settings, p) for p in dict.fromkeys(j.settings.trace for j in todo)}
    tasks = [t for job in todo
             for t in shard_tasks(sets[job.settings.trace], job.settings, job=job.index)]  # fmt: skip
    results, wall = [], 0.0
    if todo:
        with task_runner(settings) as run_tasks:
            sweep.workers = _workers(settings)
            for shards in sets.values():
                prepare(run_tasks, shard_tasks(shards, todo[0].settings), shards)
            began = time.perf_counter()
            results = run_tasks(replay_shard, tasks)
            wall = time.perf_counter() - began
    by_job: dict[int, list] = {}
    for task, result in zip(tasks, results, strict=True):
        by_job.setdefault(task.job, []).append(result)
    for job in todo:
        outcome = _job_outcome(job, sets[job.settings.trace], by_job.get(job.index, []), wall)
        if outcome.report is not None:
            outcome.report.timing["compile_s"] = round(compile_seconds(stages[job.policy_name]), 3)
            if resumable:
                resume.save(job.key, outcome.report)
        outcomes[job.index] = outcome
        _record(settings, parent, sweep.sweep_id, outcome)
    sweep.outcomes = [outcomes[j.index] for j in jobs]
    sweep.wall_s = time.perf_counter() - start
    return sweep


def _outcome(job, report, error=None, skipped=False):
    from memlens.runs.sweep import Outcome

    return Outcome(job, report, error, skipped)


def _job_outcome(job, shards: ShardSet, results: list, wall: float):
    """One job's outcome from its shards' results: the merged report, or the first error."""
    errors = [e for _, e in results if e is not None]
    if errors:
        return _outcome(job, None, errors[0])
    try:
        return _outcome(job, merged_report(job.settings, shards, [r for r, _ in results], wall))
    except Exception as exc:  # noqa: BLE001 - one job's failure must not stop the sweep
        return _outcome(job, None, traceback.format_exception_only(type(exc), exc)[-1].strip())
