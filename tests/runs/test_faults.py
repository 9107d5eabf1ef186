"""Faults survived: concurrent starts on one SQLite store, runs killed by SIGTERM/SIGINT/kill -9,
an unreachable tracking server, and a reused run folder whose second run fails halfway.

The real ``memlens`` command is started as a subprocess.  A policy that announces its first
request with a marker file and then replays slowly (written to a temporary module, put on the
subprocess's PYTHONPATH) lets a test signal the run at a known moment: mid-replay, with the
MLflow run open and the run folder staged.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from memlens._util.processes import Process, start_time
from memlens.config.compose import compose_config
from memlens.config.schema import MlflowConfig
from memlens.runs import mlflow_store, writers
from memlens.runs.interrupts import interruptible, signals_held

mlflow = pytest.importorskip("mlflow")
from helpers import MEMLENS, memlens  # noqa: E402
from mlflow.tracking import MlflowClient  # noqa: E402

SLOW_POLICY = '''
import os, time
from memlens.policies.lru import LRU

class SlowLRU(LRU):
    """LRU that touches $SLOW_MARKER at its first request, then sleeps $SLOW_SLEEP s per
    request, or raises there when $SLOW_FAIL is set."""

    def observe(self, request, now):
        marker = os.environ.get("SLOW_MARKER")
        if marker and not os.path.exists(marker):
            open(marker, "w").close()
        if os.environ.get("SLOW_FAIL"):
            raise RuntimeError("slow policy told to fail")
        time.sleep(float(os.environ.get("SLOW_SLEEP", "0")))
        return super().observe(request, now)
'''
RUN_FILES = {"metrics.json", "per_request.parquet", "moves.parquet", "resolved_config.yaml",
             "events.parquet", "report.html"}  # fmt: skip


@pytest.fixture(scope="module")
def slow_env(tmp_path_factory) -> dict:
    """Environment for a subprocess that can use ``policy._target_=slowpol.SlowLRU``."""
    d = tmp_path_factory.mktemp("slowpol")
    (d / "slowpol.py").write_text(SLOW_POLICY)
    path = os.pathsep.join([str(d), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    return {**os.environ, "PYTHONPATH": path, "PYTHONWARNINGS": "ignore"}


@pytest.fixture(scope="module")
def migrated_db(tmp_path_factory) -> Path:
    """A created and migrated MLflow SQLite store, copied by tests that do not test migration."""
    db = tmp_path_factory.mktemp("store") / "mlflow.db"
    MlflowClient(tracking_uri=f"sqlite:///{db}").search_experiments()  # creates and migrates
    return db


def store_in(tmp_path: Path, migrated_db: Path) -> str:
    shutil.copy(migrated_db, tmp_path / "mlflow.db")
    return f"sqlite:///{tmp_path / 'mlflow.db'}"


def runs(uri: str) -> list:
    client = MlflowClient(tracking_uri=uri)
    exp = client.get_experiment_by_name("memlens")
    return [] if exp is None else client.search_runs([exp.experiment_id])


def snapshot(folder: Path) -> dict[str, bytes]:
    """Every file of a run folder (Hydra's own files aside) and its bytes."""
    return {
        p.name: p.read_bytes()
        for p in folder.iterdir()
        if p.is_file() and not p.name.endswith(".log")
    }


def debris(folder: Path) -> list[Path]:
    return [p for p in folder.parent.iterdir() if p.name.startswith(f".{folder.name}.")]


def start_slow(trace: Path, run_dir: Path, env: dict, marker: Path, *extra: str):
    """A simulate that stays mid-replay (the marker exists) until it is signalled."""
    env = {**env, "SLOW_MARKER": str(marker), "SLOW_SLEEP": "0.5"}
    args = [MEMLENS, "simulate", f"trace={trace}", "policy._target_=slowpol.SlowLRU",
            "budget=512", f"hydra.run.dir={run_dir}", *extra]  # fmt: skip
    proc = subprocess.Popen(args, cwd=run_dir.parent, env=env, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)  # fmt: skip
    while not marker.exists() and proc.poll() is None:
        time.sleep(0.05)
    assert proc.poll() is None, proc.communicate()
    return proc


def simulate(trace: Path, run_dir: Path, *extra: str, check: bool = True):
    return memlens("simulate", f"trace={trace}", "policy=lru", "budget=512",
                   f"hydra.run.dir={run_dir}", *extra, cwd=run_dir.parent, check=check)  # fmt: skip


# --- concurrent starts on a fresh SQLite store --------------------------------------------


@pytest.mark.slow
def test_concurrent_runs_on_a_fresh_sqlite_store_all_succeed(tmp_path, small_trace):  # noqa: F811
    n = 6
    env = {**os.environ, "PYTHONWARNINGS": "ignore"}
    procs = [
        subprocess.Popen(
            [
                MEMLENS,
                "simulate",
                f"trace={small_trace}",
                "policy=lru",
                f"budget={100 * (k + 1)}",
                f"hydra.run.dir={tmp_path / f'run{k}'}",
            ],
            cwd=tmp_path,
            env=env,
            text=True,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )  # fmt: skip
        for k in range(n)
    ]
    outs = [p.communicate() for p in procs]
    assert [p.returncode for p in procs] == [0] * n, outs
    assert not any("warning: MLflow" in err for _, err in outs)
    found = runs(f"sqlite:///{tmp_path / 'mlflow.db'}")
    assert sorted(r.data.params["budget"] for r in found) == sorted(str(100 * (k + 1)) for k in range(n))  # fmt: skip
    assert {r.info.status for r in found} == {"FINISHED"}
    for k in range(n):
        assert RUN_FILES <= set(os.listdir(tmp_path / f"run{k}"))


@pytest.mark.slow  # two migrations of a new store: about 20 s on a busy 2-core machine
def test_a_run_killed_while_migrating_a_new_store_leaves_no_half_store(tmp_path, small_trace):  # noqa: F811
    env = {**os.environ, "PYTHONWARNINGS": "ignore"}
    args = [MEMLENS, "simulate", f"trace={small_trace}", f"hydra.run.dir={tmp_path / 'run'}"]
    proc = subprocess.Popen(args, cwd=tmp_path, env=env, stderr=subprocess.PIPE, text=True)
    while not list(tmp_path.glob(".mlflow.db.*.tmp")) and proc.poll() is None:
        time.sleep(0.01)
    proc.kill()  # the migration is under way, under its temporary name
    proc.communicate()
    assert not (tmp_path / "mlflow.db").exists()  # no database rather than half of one
    out = memlens("simulate", f"trace={small_trace}", f"hydra.run.dir={tmp_path / 'run'}",
                  cwd=tmp_path)  # fmt: skip
    assert "warning" not in out.stderr
    assert [r.info.status for r in runs(f"sqlite:///{tmp_path / 'mlflow.db'}")] == ["FINISHED"]
    assert not list(tmp_path.glob(".mlflow.db.*.tmp"))


def test_the_store_lock_excludes_other_processes(tmp_path):
    import fcntl

    lock = tmp_path / "mlflow.db.lock"
    holder = subprocess.Popen(
        [sys.executable, "-c", "import sys; from pathlib import Path;"
         "from memlens.runs.mlflow_store import file_lock\n"
         f"with file_lock(Path({str(lock)!r})):\n print('held', flush=True); sys.stdin.read()"],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)  # fmt: skip
    assert holder.stdout.readline().strip() == "held"
    fd = os.open(lock, os.O_RDWR)
    try:
        with pytest.raises(BlockingIOError):
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        holder.communicate("")  # the holder ends: the kernel drops its lock
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    finally:
        os.close(fd)


def test_locked_database_errors_are_retried_and_others_are_not(monkeypatch):
    monkeypatch.setattr(mlflow_store.time, "sleep", lambda s: None)
    calls = []

    def flaky(x):
        calls.append(x)
        if len(calls) < 3:
            raise RuntimeError("(sqlite3.OperationalError) database is locked")
        return x * 2

    assert mlflow_store.retry(flaky, 21) == 42 and len(calls) == 3

    def always_locked():
        calls.append(None)
        raise RuntimeError("database is locked")

    calls.clear()
    with pytest.raises(RuntimeError, match="locked"):
        mlflow_store.retry(always_locked)
    assert len(calls) == mlflow_store.ATTEMPTS  # bounded

    def broken():
        calls.append(None)
        raise ValueError("no such table: runs")

    calls.clear()
    with pytest.raises(ValueError):
        mlflow_store.retry(broken)
    assert len(calls) == 1


def test_sqlite_file_of_a_tracking_uri():
    assert mlflow_store.sqlite_file("sqlite:///mlflow.db") == Path("mlflow.db")
    assert mlflow_store.sqlite_file("sqlite:////abs/x.db?timeout=9") == Path("/abs/x.db")
    assert mlflow_store.sqlite_file("sqlite:///:memory:") is None
    assert mlflow_store.sqlite_file("http://127.0.0.1:5000") is None


# --- killed runs ----------------------------------------------------------------------------


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
@pytest.mark.slow  # kept out of the default run (6-minute budget); make test-all runs it
def test_a_signalled_run_ends_killed_and_keeps_the_previous_run(
    tmp_path,
    small_trace,  # noqa: F811
    slow_env,
    migrated_db,
    sig,
):
    uri = store_in(tmp_path, migrated_db)
    run_dir = tmp_path / "run"
    simulate(small_trace, run_dir, "mlflow.enabled=false")  # a complete earlier run
    before = snapshot(run_dir)
    proc = start_slow(small_trace, run_dir, slow_env, tmp_path / "m", f"mlflow.tracking_uri={uri}")
    proc.send_signal(sig)
    _, err = proc.communicate()
    assert proc.returncode == 128 + sig, err
    assert f"interrupted by {sig.name}" in err
    assert set(before) == RUN_FILES
    assert snapshot(run_dir) == before  # the previous complete run
    assert debris(run_dir) == []
    assert [(r.info.run_name, r.info.status) for r in runs(uri)] == [("SlowLRU@512", "KILLED")]


@pytest.mark.slow  # kept out of the default run (6-minute budget); make test-all runs it
def test_a_signalled_first_run_leaves_no_folder(tmp_path, small_trace, slow_env, migrated_db):  # noqa: F811
    uri = store_in(tmp_path, migrated_db)
    run_dir = tmp_path / "run"
    proc = start_slow(small_trace, run_dir, slow_env, tmp_path / "m", f"mlflow.tracking_uri={uri}")
    proc.send_signal(signal.SIGTERM)
    proc.communicate()
    assert proc.returncode == 143
    assert not run_dir.exists() and debris(run_dir) == []
    assert [r.info.status for r in runs(uri)] == ["KILLED"]


@pytest.mark.slow  # >10 s: kept out of the default run (make test-all runs it)
def test_a_signalled_compare_keeps_the_previous_tables(tmp_path, small_trace, slow_env):  # noqa: F811
    run_dir = tmp_path / "cmp"
    args = [f"trace={small_trace}", "policies=[lru]", "budgets=[100,200,300]",
            "mlflow.enabled=false", f"hydra.run.dir={run_dir}"]  # fmt: skip
    memlens("compare", *args, cwd=tmp_path)
    before = snapshot(run_dir)
    assert {"compare.csv", "compare.json"} <= set(before)
    env = {**slow_env, "SLOW_MARKER": str(tmp_path / "m"), "SLOW_SLEEP": "0.5"}
    proc = subprocess.Popen([MEMLENS, "compare", *args, "policy._target_=slowpol.SlowLRU"],
                            cwd=tmp_path, env=env, stderr=subprocess.PIPE, text=True)  # fmt: skip
    while not (tmp_path / "m").exists() and proc.poll() is None:
        time.sleep(0.05)
    proc.send_signal(signal.SIGTERM)
    proc.communicate()
    assert proc.returncode == 143
    assert snapshot(run_dir) == before
    assert debris(run_dir) == []


@pytest.mark.slow  # >10 s: kept out of the default run (make test-all runs it)
def test_a_run_killed_with_kill_9_is_ended_by_the_next_start(
    tmp_path,
    small_trace,  # noqa: F811
    slow_env,
    migrated_db,
):
    uri = store_in(tmp_path, migrated_db)
    run_dir = tmp_path / "run"
    proc = start_slow(small_trace, run_dir, slow_env, tmp_path / "m", f"mlflow.tracking_uri={uri}")
    dead_pid = proc.pid
    proc.kill()
    proc.communicate()
    assert [r.info.status for r in runs(uri)] == ["RUNNING"]  # what kill -9 leaves
    assert len(debris(run_dir)) == 1  # and a staging folder
    out = simulate(small_trace, run_dir, f"mlflow.tracking_uri={uri}")
    notes = [line for line in out.stderr.splitlines() if "left RUNNING" in line]
    assert len(notes) == 1 and "SlowLRU@512 (run " in notes[0] and f"pid {dead_pid})" in notes[0]
    assert sorted((r.info.run_name, r.info.status) for r in runs(uri)) == [
        ("LRU@512", "FINISHED"),
        ("SlowLRU@512", "KILLED"),
    ]
    assert debris(run_dir) == [] and RUN_FILES <= set(os.listdir(run_dir))


def test_runs_of_live_or_unknown_processes_are_left_running(tmp_path, migrated_db, capsys):
    from memlens.runs import tracking

    uri = store_in(tmp_path, migrated_db)
    cfg = MlflowConfig(tracking_uri=uri, artifact_location=str(tmp_path / "art"))
    client, exp = mlflow_store.open_store(cfg)
    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True).stdout.strip()  # fmt: skip
    host = socket.gethostname()
    made = {
        "mine": mlflow_store.process_tags(),  # this process: alive
        "gone": {"memlens.host": host, "memlens.pid": gone},
        "elsewhere": {"memlens.host": host + "-other", "memlens.pid": gone},
        "untagged": {},
    }
    ids = {name: client.create_run(exp, run_name=name, tags=t).info.run_id
           for name, t in made.items()}  # fmt: skip
    tracking._swept.discard((uri, "memlens"))
    with tracking.mlflow_run(cfg, "next") as run:
        assert run is not None
    err = capsys.readouterr().err
    assert err.count("left RUNNING") == 1 and "gone (run" in err and "mine" not in err
    status = {n: client.get_run(i).info.status for n, i in ids.items()}
    assert status == {"mine": "RUNNING", "gone": "KILLED", "elsewhere": "RUNNING",
                      "untagged": "RUNNING"}  # fmt: skip


def test_mlflow_run_status_on_success_error_and_interrupt(tmp_path, migrated_db):
    from memlens.runs import tracking

    uri = store_in(tmp_path, migrated_db)
    cfg = MlflowConfig(tracking_uri=uri, artifact_location=str(tmp_path / "art"))
    with tracking.mlflow_run(cfg, "ok") as ok, tracking.mlflow_run(cfg, "child", parent=ok):
        pass
    with pytest.raises(RuntimeError), tracking.mlflow_run(cfg, "boom"):
        raise RuntimeError("boom")
    with pytest.raises(KeyboardInterrupt), tracking.mlflow_run(cfg, "stop") as stop:
        with tracking.mlflow_run(cfg, "stop-child", parent=stop):
            raise KeyboardInterrupt
    found = {r.info.run_name: r for r in runs(cfg.tracking_uri)}
    assert {n: r.info.status for n, r in found.items()} == {
        "ok": "FINISHED", "child": "FINISHED", "boom": "FAILED", "stop": "KILLED",
        "stop-child": "KILLED"}  # fmt: skip
    assert found["child"].data.tags["mlflow.parentRunId"] == found["ok"].info.run_id
    assert found["ok"].data.tags["memlens.pid"] == str(os.getpid())


def test_signals_become_exit_codes_and_wait_for_held_renames():
    handlers = signal.getsignal(signal.SIGTERM), signal.getsignal(signal.SIGINT)
    with pytest.raises(SystemExit) as exc, interruptible():
        with signals_held():
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(0.01)
            reached = True  # the signal waited for the held block
        raise AssertionError("the signal should have stopped the run here")
    assert reached and exc.value.code == 143
    assert (signal.getsignal(signal.SIGTERM), signal.getsignal(signal.SIGINT)) == handlers
    with pytest.raises(SystemExit) as exc, interruptible():
        os.kill(os.getpid(), signal.SIGINT)
        time.sleep(1)
    assert exc.value.code == 130


def test_a_second_signal_ends_a_held_wait_at_once(tmp_path):
    code = (
        "import os, signal, time\n"
        "from memlens.runs.interrupts import interruptible, signals_held\n"
        "with interruptible(), signals_held():\n"
        "    os.kill(os.getpid(), signal.SIGTERM)\n"
        "    time.sleep(0.05)\n"
        "    print('first signal held', flush=True)\n"
        "    os.kill(os.getpid(), signal.SIGINT)\n"
        "    time.sleep(0.05)\n"
        "    print('not reached', flush=True)\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert proc.returncode == 130 and proc.stdout == "first signal held\n", proc


def test_a_process_is_dead_only_when_sure():
    me = Process.current()
    assert not me.is_dead()
    assert Process(me.host, me.pid, "1").is_dead() is (start_time(me.pid) is not None)  # reused
    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True).stdout.strip()  # fmt: skip
    assert Process(me.host, int(gone)).is_dead()
    assert not Process(me.host + "-other", int(gone)).is_dead()  # another host: cannot tell


# --- an unreachable tracking server ---------------------------------------------------------


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]  # closed again once the socket is


@pytest.mark.slow  # >10 s: kept out of the default run (make test-all runs it)
def test_an_unreachable_tracking_server_costs_one_warning_not_the_run(tmp_path, small_trace):  # noqa: F811
    uri = f"http://127.0.0.1:{_closed_port()}"
    env = {**os.environ, "PYTHONWARNINGS": "ignore", "MLFLOW_HTTP_REQUEST_MAX_RETRIES": "0",
           "MLFLOW_HTTP_REQUEST_TIMEOUT": "2"}  # fmt: skip
    for required, code in (("false", 0), ("true", 3)):
        run_dir = tmp_path / f"run-{required}"
        args = [MEMLENS, "simulate", f"trace={small_trace}", f"hydra.run.dir={run_dir}",
                f"mlflow.tracking_uri={uri}", f"mlflow.required={required}"]  # fmt: skip
        proc = subprocess.run(args, cwd=tmp_path, env=env, capture_output=True, text=True)
        assert proc.returncode == code, proc.stderr
        warnings = [line for line in proc.stderr.splitlines() if line.startswith("warning:")]
        assert len(warnings) == 1 and warnings[0].startswith("warning: MLflow tracking failed: ")
        assert ("error: MLflow tracking failed and mlflow.required=true" in proc.stderr) is (
            code == 3
        )
        assert RUN_FILES <= set(os.listdir(run_dir))
        metrics = json.loads((run_dir / "metrics.json").read_text())
        assert metrics["overall"]["requests"] > 0


# --- whole run folders ----------------------------------------------------------------------


def _fail_writing_metrics(path, text):  # the Parquet files and the config are written
    from memlens._util.atomic import write_text

    if Path(path).name == "metrics.json":
        raise OSError("disk full")
    write_text(path, text)


def _fail_on_the_writer_thread(*_args, **_kwargs):
    raise OSError("disk full on the writer thread")


@pytest.mark.parametrize(
    ("where", "name", "fail", "message"),
    [
        ("memlens.runs.writers", "write_text", _fail_writing_metrics, "disk full"),
        # the event log is written on a second thread (memlens.runs.writers.write_run): its
        # failure reaches the run all the same
        ("memlens.analyze.eventlog", "write_event_log", _fail_on_the_writer_thread,
         "writer thread"),
    ],
)  # fmt: skip
def test_a_failing_second_run_leaves_the_first_runs_files_untouched(
    tmp_path,
    small_trace,  # noqa: F811
    monkeypatch,
    where,
    name,
    fail,
    message,
):
    import importlib

    from memlens.cli import replay as commands

    run_dir = tmp_path / "run"
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(commands, "_run_dir", lambda: run_dir)
    first = [f"trace={small_trace}", "budget=512", "mlflow.enabled=false"]
    commands.simulate_task(compose_config("simulate", first))
    before = snapshot(run_dir)
    assert set(before) == RUN_FILES

    monkeypatch.setattr(importlib.import_module(where), name, fail)
    with pytest.raises(OSError, match=message):
        commands.simulate_task(compose_config("simulate", [*first[:1], "budget=64", *first[2:]]))
    assert snapshot(run_dir) == before
    assert debris(run_dir) == []


@pytest.mark.slow  # kept out of the default run (6-minute budget); make test-all runs it
def test_a_failing_second_run_subprocess(tmp_path, small_trace, slow_env):  # noqa: F811
    run_dir = tmp_path / "run"
    simulate(small_trace, run_dir, "mlflow.enabled=false")
    before = snapshot(run_dir)
    proc = subprocess.run(
        [MEMLENS, "simulate", f"trace={small_trace}", "policy._target_=slowpol.SlowLRU",
         "mlflow.enabled=false", f"hydra.run.dir={run_dir}"],
        cwd=tmp_path, env={**slow_env, "SLOW_FAIL": "1"}, capture_output=True, text=True,
    )  # fmt: skip
    assert proc.returncode == 1 and "slow policy told to fail" in proc.stderr
    assert set(before) == RUN_FILES and snapshot(run_dir) == before
    assert debris(run_dir) == []


def _write(folder: Path, files: dict[str, str]) -> None:
    for name, text in files.items():
        (folder / name).write_text(text)


def test_run_folder_swaps_in_whole_or_not_at_all(tmp_path):
    target = tmp_path / "run"
    with writers.run_folder(target) as folder:
        _write(folder, {"metrics.json": "1", "per_request.parquet": "1", "moves.parquet": "1"})
    assert snapshot(target) == {"metrics.json": b"1", "per_request.parquet": b"1",
                                "moves.parquet": b"1"}  # fmt: skip
    with writers.run_folder(target) as folder:  # a run without moves.parquet
        _write(folder, {"metrics.json": "2", "per_request.parquet": "2"})
    assert snapshot(target) == {"metrics.json": b"2", "per_request.parquet": b"2"}
    with pytest.raises(RuntimeError), writers.run_folder(target) as folder:
        _write(folder, {"per_request.parquet": "3", "resolved_config.yaml": "3"})
        raise RuntimeError("failed before metrics.json")
    assert snapshot(target) == {"metrics.json": b"2", "per_request.parquet": b"2"}
    assert debris(target) == []


def test_run_folder_carries_hydra_files_of_this_run(tmp_path):
    target = tmp_path / "run"
    target.mkdir()
    _write(target, {"metrics.json": "old", "simulate.log": "log"})
    (target / ".hydra").mkdir()
    _write(target / ".hydra", {"config.yaml": "new"})
    with writers.run_folder(target, carry=[".hydra", "simulate.log"]) as folder:
        _write(folder, {"metrics.json": "new"})
    assert snapshot(target) == {"metrics.json": b"new"}
    assert (target / ".hydra" / "config.yaml").read_text() == "new"
    assert (target / "simulate.log").read_text() == "log"


def test_a_folder_with_foreign_files_keeps_them_and_still_never_mixes(tmp_path, monkeypatch):
    target = tmp_path / "here"
    target.mkdir()
    _write(target, {"notes.txt": "mine", "metrics.json": "1", "moves.parquet": "1"})
    with writers.run_folder(target) as folder:
        _write(folder, {"metrics.json": "2", "per_request.parquet": "2"})
    assert snapshot(target) == {"notes.txt": b"mine", "metrics.json": b"2",
                                "per_request.parquet": b"2"}  # fmt: skip
    monkeypatch.chdir(target)  # hydra.run.dir=. : the working directory is never moved away
    (target / "notes.txt").unlink()
    with writers.run_folder(target) as folder:
        _write(folder, {"metrics.json": "3"})
    assert Path.cwd() == target and snapshot(target) == {"metrics.json": b"3"}
    assert os.stat(".").st_ino == os.stat(target).st_ino


def test_debris_of_dead_runs_is_removed_and_of_live_ones_kept(tmp_path):
    target = tmp_path / "run"
    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True).stdout.strip()  # fmt: skip
    host = socket.gethostname()
    dead = tmp_path / f".run.staging.{gone}@{host}.abc"
    live = tmp_path / f".run.staging.{os.getpid()}@{host}.def"
    aside = tmp_path / f".run.old.{gone}@{host}.ghi"  # killed between the two renames
    for d in (dead, live, aside):
        d.mkdir()
    _write(aside, {"metrics.json": "previous"})
    writers.drop_debris(target)
    assert not dead.exists() and live.exists() and not aside.exists()
    assert (target / "metrics.json").read_text() == "previous"  # put back
