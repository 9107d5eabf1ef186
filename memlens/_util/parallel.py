"""Run independent jobs on every core, with one progress bar over the jobs.

A sweep's jobs (one replay each) share nothing, so they spread over worker processes
(joblib's loky backend: processes, because the replay loop holds the GIL).  What travels to a
worker is small: the job's settings, which name the trace by its path; each worker reads the
parsed trace from the on-disk trace cache (``memlens.trace.cache``, filled by the main process
when it validated every trace), so no trace arrays are ever pickled.  Results come back as they
finish and are returned in job order, so the output does not depend on the number of workers.

Starting a worker costs seconds (it imports numpy, numba, the policies), which a small sweep
never wins back: :func:`workers` runs a sweep serially, in this process, when its total work
(events replayed, summed over jobs) is below ``min_events``.  A sweep that will use them
starts its workers ahead (:func:`start_workers`), while the main process still checks its
settings on one core, and lets them go as soon as its last result is in
(:func:`release_workers`), so that they exit on the other cores while it writes its tables.
"""

from __future__ import annotations

import atexit
import contextlib
import itertools
import os
import sys
import warnings
from collections.abc import Callable, Iterable, Iterator
from typing import TypeVar

T = TypeVar("T")
R = TypeVar("R")


def cores() -> int:
    """Cores this process may use (its CPU affinity where the OS says, else the CPU count)."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def workers(n_jobs: int, n_tasks: int, total_events: int, min_events: int) -> int:
    """How many processes a sweep gets: ``n_jobs`` (-1: every core), at most one per job, and
    1 for a sweep too small to pay for starting workers."""
    wanted = cores() if n_jobs == -1 else n_jobs
    if total_events < min_events:
        return 1
    return max(1, min(wanted, n_tasks))


def _bar(total: int, progress: bool | None, label: str):
    from tqdm import tqdm

    shown = sys.stderr.isatty() if progress is None else progress
    return tqdm(total=total, desc=label, unit="job", disable=not shown, file=sys.stderr)


def connect_ray(address: str) -> int:
    """Join the Ray cluster at ``address`` (``host:port``, or ``auto``: ``$RAY_ADDRESS`` / the
    local one); the cluster's CPU count."""
    import ray

    if not ray.is_initialized():
        ray.init(address=address, log_to_driver=False, logging_level="ERROR")
    return int(ray.cluster_resources().get("CPU", 1))


def run_parallel(fn: Callable[[T], R], tasks: Iterable[T], n_workers: int,
                 progress: bool | None = None, label: str = "jobs",
                 backend: str = "loky") -> Iterator[tuple[int, R]]:  # fmt: skip
    """``(i, fn(tasks[i]))`` for every task, as they finish (in order when ``n_workers`` is 1).

    ``fn`` must be a module-level function and its tasks picklable when ``n_workers`` > 1;
    ``backend``: ``loky`` (processes on this machine) or ``ray`` (one Ray task per job on the
    cluster joined with :func:`connect_ray`, at most ``n_workers`` running at once; tasks travel
    as pickles, so they carry paths, never arrays)."""
    tasks = list(tasks)
    _join_started()
    with _bar(len(tasks), progress, label) as bar:
        if backend == "ray":
            results = _on_ray(fn, tasks, n_workers)
        elif n_workers <= 1:
            results = ((i, fn(task)) for i, task in enumerate(tasks))
        else:
            from joblib import Parallel, delayed

            pool = Parallel(n_jobs=n_workers, backend="loky", return_as="generator_unordered")
            results = pool(delayed(_indexed)(fn, i, t) for i, t in enumerate(tasks))
        for i, result in results:
            bar.update(1)
            yield i, result


def _on_ray(fn: Callable[[T], R], tasks: list[T], n_workers: int) -> Iterator[tuple[int, R]]:
    """Ray tasks, ``n_workers`` in flight, yielded as they finish."""
    import ray

    remote = ray.remote(num_cpus=1, max_retries=0)(_indexed)
    queue = iter(enumerate(tasks))
    pending = [remote.remote(fn, i, t) for i, t in itertools.islice(queue, max(1, n_workers))]
    while pending:
        done, pending = ray.wait(pending, num_returns=1)
        for ref in done:
            yield ray.get(ref)
        pending += [remote.remote(fn, i, t) for i, t in itertools.islice(queue, len(done))]


def _indexed(fn: Callable[[T], R], i: int, task: T) -> tuple[int, R]:
    return i, fn(task)


#: the results of :func:`start_workers`' tasks, drained before the next parallel run
_STARTED: list[Iterator] = []


def start_workers(n_workers: int, fn: Callable[[T], object], task: T) -> None:
    """Start ``n_workers`` loky worker processes now, each running ``fn(task)`` (what every
    job of the sweep to come needs first: its imports, the parsed trace), and return at once.
    The next :func:`run_parallel` with as many workers finds them up (joblib keeps one pool
    and reuses it for the same size); with another size it starts its own, as without this.
    ``fn`` failing changes nothing: the jobs do the same work again and report it."""
    if n_workers <= 1:
        return
    from joblib import Parallel, delayed

    pool = Parallel(n_jobs=n_workers, backend="loky", return_as="generator_unordered")
    if not _STARTED:  # a command that stops before its sweep waits for them (seconds at most)
        atexit.register(_join_started)  # rather than leave joblib to abort them at teardown
    _STARTED.append(pool(delayed(_ignoring_errors)(fn, task) for _ in range(n_workers)))


def _ignoring_errors(fn: Callable[[T], object], task: T) -> None:
    with contextlib.suppress(Exception):  # the jobs repeat this work and report its errors
        fn(task)


def _join_started() -> None:
    """Wait for the tasks :func:`start_workers` gave (they are short), so that the pool is
    idle when the sweep's jobs go to it."""
    while _STARTED:
        for _ in _STARTED.pop():
            pass


@contextlib.contextmanager
def released_on_error() -> Iterator[None]:
    """Stop the workers :func:`start_workers` started if the block raises (a check failed:
    the command exits before its sweep)."""
    try:
        yield
    except BaseException:
        release_workers(kill=True)
        raise


def release_workers(kill: bool = False) -> None:
    """Shut the worker pool down without waiting: a finished sweep's workers (a gigabyte of
    trace each) then exit on the other cores while this process writes its tables, instead
    of at this process's exit (0.7 s on a 5,800-stream compare).  ``kill``: stop them where
    they are (the command is exiting with an error before its sweep)."""
    if kill:
        with warnings.catch_warnings():  # joblib warns that the tasks were cancelled
            warnings.simplefilter("ignore", UserWarning)
            while _STARTED:
                _STARTED.pop().close()
    else:
        _join_started()
    from joblib.externals.loky import reusable_executor

    executor = getattr(reusable_executor, "_executor", None)  # None: no pool was started
    if executor is not None:
        executor.shutdown(wait=False, kill_workers=kill)
