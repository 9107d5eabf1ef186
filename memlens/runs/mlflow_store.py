"""Reaching the MLflow store safely from many processes at once.

Faults and costs seen in practice, and what is done about each:

* Four runs started together on a fresh ``sqlite:///mlflow.db`` all failed and left the database
  half-migrated (MLflow's schema migration raced itself), so every later run failed too.  The
  first use of a SQLite store in a process (creating and migrating it, creating the experiment)
  now happens under an exclusive ``flock`` on a lock file beside the database; the kernel drops
  the lock when its holder dies, so a killed run never blocks the next.  A new database is
  built and migrated under a temporary name and linked into place only when complete, so a run
  killed during the migration leaves no database rather than a half-migrated one.
* SQLite lets one writer in at a time: a busy moment gives "database is locked".  Every store
  call is retried on that error, a bounded number of times with growing, jittered pauses.
* Every commit to a SQLite store in its default journal mode costs two file syncs; the store is
  switched to write-ahead-log mode (:func:`use_wal`), one sync per commit.
* A run killed with kill -9 stays RUNNING.  Every run is tagged with its process (host, pid,
  start time); the first run a process starts ends, as KILLED, the RUNNING runs of the
  experiment whose process on this host is gone, and says which.
"""

from __future__ import annotations

import contextlib
import fcntl
import glob
import logging
import os
import random
import socket
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TypeVar

from memlens._util.processes import Process
from memlens.config.schema import MlflowConfig

HOST_TAG, PID_TAG, STARTED_TAG = "memlens.host", "memlens.pid", "memlens.started"
LOCKED = "database is locked"
ATTEMPTS = 8  # about 10 s of pauses in all, on top of SQLite's own 5 s wait per attempt

T = TypeVar("T")


def sqlite_file(uri: str) -> Path | None:
    """The database file of a ``sqlite:///...`` URI (None for other stores and ``:memory:``)."""
    if not uri.startswith("sqlite:///"):
        return None
    path = uri[len("sqlite:///") :].split("?", 1)[0]
    return Path(path) if path and path != ":memory:" else None


@contextlib.contextmanager
def file_lock(path: Path) -> Iterator[None]:
    """An exclusive inter-process lock on ``path`` (created if missing), held for the block."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o666)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # closing releases the lock


def _is_locked(exc: BaseException | None) -> bool:
    seen = 0
    while exc is not None and seen < 10:
        if LOCKED in str(exc).lower():
            return True
        exc, seen = exc.__cause__ or exc.__context__, seen + 1
    return False


def retry(fn: Callable[..., T], *args, **kwargs) -> T:
    """``fn(*args, **kwargs)``, tried again while it fails with "database is locked"."""
    for attempt in range(ATTEMPTS):
        try:
            return fn(*args, **kwargs)
        except Exception as exc:
            if attempt == ATTEMPTS - 1 or not _is_locked(exc):
                raise
            time.sleep(min(2.0, 0.1 * 2**attempt) * random.uniform(0.5, 1.5))
    raise AssertionError("unreachable")


def _experiment_id(client, cfg: MlflowConfig) -> str:
    from mlflow.exceptions import MlflowException

    experiment = client.get_experiment_by_name(cfg.experiment)
    if experiment is not None:
        return experiment.experiment_id
    root = cfg.artifact_location
    root = Path(root).resolve().as_uri() if root else None
    try:
        return client.create_experiment(cfg.experiment, artifact_location=root)
    except MlflowException as exc:  # a run on another machine created it just now
        if exc.error_code != "RESOURCE_ALREADY_EXISTS":
            raise
        return client.get_experiment_by_name(cfg.experiment).experiment_id


def _create_db(db: Path) -> None:
    """A new, fully migrated SQLite store at ``db`` (call with the lock held)."""
    from mlflow.store.tracking import DEFAULT_LOCAL_FILE_AND_ARTIFACT_PATH
    from mlflow.store.tracking.sqlalchemy_store import SqlAlchemyStore

    for stale in db.parent.glob(f".{glob.escape(db.name)}.*.tmp"):  # a run killed migrating
        stale.unlink(missing_ok=True)
    tmp = db.with_name(f".{db.name}.{os.getpid()}.tmp")
    store = SqlAlchemyStore(f"sqlite:///{tmp}", DEFAULT_LOCAL_FILE_AND_ARTIFACT_PATH)
    store.engine.dispose()  # closes the file: nothing more is written under the temporary name
    try:
        os.link(tmp, db)  # fails if a database appeared meanwhile: that one is kept
    except FileExistsError:
        pass
    finally:
        tmp.unlink(missing_ok=True)


def use_wal(db: Path) -> bool:
    """Put the SQLite store in write-ahead-log mode (call with the lock held); False if it
    could not be (another process holds the database open: it stays as it is).

    A sweep writes a few transactions per job (create the run, log its values, end it).  In
    SQLite's default rollback-journal mode each commit syncs the journal and the database; in
    WAL mode it appends to the log and syncs once, which halved the time to record a compare's
    44 child runs (``benchmarks/bench_compare.py --tracking-runs 44``).  The mode is stored in
    the file, so it is set once.  WAL needs every process on one host (no network file system),
    as a shared SQLite file does anyway."""
    import sqlite3

    try:
        con = sqlite3.connect(db, timeout=1.0)
        try:
            mode = con.execute("PRAGMA journal_mode=WAL").fetchone()[0]
        finally:
            con.close()
    except sqlite3.Error:
        return False
    return str(mode).lower() == "wal"


_opened: dict[tuple, tuple[object, str]] = {}


def open_store(cfg: MlflowConfig) -> tuple[object, str]:
    """(MlflowClient, experiment id); a SQLite store is created and migrated under a lock."""
    key = (cfg.tracking_uri, cfg.experiment, cfg.artifact_location)
    if key in _opened:
        return _opened[key]
    os.environ.setdefault("MLFLOW_ENABLE_ASYNC_LOGGING", "false")
    for name in ("alembic", "mlflow.store.db.utils"):  # "Creating initial MLflow database..."
        logging.getLogger(name).setLevel(logging.WARNING)
    from mlflow import MlflowClient

    db = sqlite_file(cfg.tracking_uri)
    lock = file_lock(db.with_name(db.name + ".lock")) if db else contextlib.nullcontext()
    with lock:
        if db is not None and not db.exists():
            _create_db(db)
        if db is not None:
            use_wal(db)
        client = MlflowClient(tracking_uri=cfg.tracking_uri)
        _opened[key] = client, retry(_experiment_id, client, cfg)
    return _opened[key]


def process_tags() -> dict[str, str]:
    """Tags naming this process, so a later start can tell whether it is still running."""
    me = Process.current()
    tags = {HOST_TAG: me.host, PID_TAG: str(me.pid)}
    if me.started is not None:
        tags[STARTED_TAG] = me.started
    return tags


def end_dead_runs(client, experiment_id: str) -> list[str]:
    """End as KILLED the RUNNING runs whose process on this host is gone; their descriptions."""
    host = socket.gethostname()
    if "'" in host:
        return []
    found = retry(
        client.search_runs,
        [experiment_id],
        filter_string=f"attributes.status = 'RUNNING' and tags.`{HOST_TAG}` = '{host}'",
        max_results=5000,
    )
    ended = []
    for run in found:
        tags = run.data.tags
        pid = tags.get(PID_TAG, "")
        if pid.isdigit() and Process(host, int(pid), tags.get(STARTED_TAG)).is_dead():
            retry(client.set_terminated, run.info.run_id, "KILLED")
            ended.append(f"{run.info.run_name} (run {run.info.run_id[:8]}, pid {pid})")
    return ended
