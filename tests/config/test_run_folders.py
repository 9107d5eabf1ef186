"""Run folders that cannot hold a run (issue 33, case 5) and the smaller cases of case 9.

An existing file, a folder under a file, the file system's root, /proc, a read-only or full
file system, the folder that holds the trace: one ``error:`` line and exit 2 before Hydra
creates anything; a disk that fills up while the files are written: one line, exit 2, nothing
kept (the folders made for the run removed too).  Then: one trace under two spellings, a
``MEMLENS_CACHE`` that is a file, a ``sqlite:///`` store that is a folder, a trace path with
``[``, a compare stopped by SIGTERM."""

from __future__ import annotations

import errno
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from memlens._util import folders
from memlens._util.safecache import environment_error
from memlens.config.app import parse_error
from memlens.config.paths import check_run_dir
from memlens.config.schema import CompareConfig, MlflowConfig
from memlens.config.store import DATA_DIR, SettingsError

MEMLENS = shutil.which("memlens") or str(Path(sys.executable).parent / "memlens")
BUNDLED = DATA_DIR / "default" / "agent-small.jsonl.gz"


def memlens(*args: str, cwd: Path, env: dict | None = None, timeout: float = 300):
    return subprocess.run([MEMLENS, *args], capture_output=True, text=True, cwd=cwd,
                          env={**os.environ, **(env or {})}, timeout=timeout)  # fmt: skip


def one_error(proc, words: str) -> None:
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert len(lines) == 1 and lines[0].startswith("error: ") and words in lines[0], proc.stderr
    assert proc.stdout == ""


# ------------------------------------------------------------------ before Hydra runs
@pytest.mark.parametrize("where, words", [
    ("afile", "exists and is not a folder"),
    ("afile/run", "afile is not a folder"),
    ("/", "the file system's root"),
    ("/proc/self/x", "/proc is a virtual file system"),
    ("/sys/run", "/sys is a virtual file system"),
    ("/dev/shm/x/../../null", "/dev is a virtual file system"),
])  # fmt: skip
def test_a_folder_that_cannot_be_a_run_folder_is_refused(tmp_path, monkeypatch, where, words):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "afile").write_text("precious")
    with pytest.raises(SettingsError, match=words):
        check_run_dir("hydra.run.dir", where)
    assert (tmp_path / "afile").read_text() == "precious"


def test_a_new_nested_folder_and_an_existing_one_are_fine(tmp_path):
    check_run_dir("hydra.run.dir", str(tmp_path / "a" / "b" / "c"))
    check_run_dir("hydra.run.dir", str(tmp_path))
    assert sorted(tmp_path.iterdir()) == []  # checking creates nothing


def test_the_trace_s_own_folder_is_refused(tmp_path):
    trace = tmp_path / "data" / "t.jsonl"
    trace.parent.mkdir()
    trace.write_text("")
    with pytest.raises(SettingsError, match="holds the trace"):
        check_run_dir("hydra.run.dir", str(tmp_path / "data"), [str(trace)])
    check_run_dir("hydra.run.dir", str(tmp_path / "data" / "run"), [str(trace)])  # below: fine


class _FS:
    """What ``os.statvfs`` says about a file system (only the fields the check reads)."""

    def __init__(self, flag: int = 0, bavail: int = 1000):
        self.f_flag, self.f_bavail = flag, bavail


@pytest.mark.parametrize("fs, words", [(_FS(flag=os.ST_RDONLY), "read-only file system"),
                                       (_FS(bavail=0), "no space left")])  # fmt: skip
def test_a_read_only_or_full_file_system_is_refused(tmp_path, monkeypatch, fs, words):
    monkeypatch.setattr(os, "statvfs", lambda path: fs)
    with pytest.raises(SettingsError, match=words):
        check_run_dir("hydra.run.dir", str(tmp_path / "run"))


@pytest.mark.parametrize("args, words", [
    (["hydra.run.dir=afile"], "hydra.run.dir=afile: exists and is not a folder"),
    (["hydra.run.dir=/"], "the file system's root"),
    (["hydra.run.dir=/proc/self/x"], "/proc is a virtual file system"),
    (["-m", "budget=512,1024", "hydra.sweep.dir=afile"], "hydra.sweep.dir=afile"),
])  # fmt: skip
@pytest.mark.slow  # kept out of the default run (6-minute budget); make test-all runs it
def test_the_command_refuses_before_hydra_creates_anything(tmp_path, args, words):
    (tmp_path / "afile").write_text("precious")
    proc = memlens("simulate", "mlflow.enabled=false", *args, cwd=tmp_path)
    one_error(proc, words)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["afile"]
    assert (tmp_path / "afile").read_text() == "precious"


# ------------------------------------------------------------------ while writing
@pytest.mark.slow  # kept out of the default run (6-minute budget); make test-all runs it
def test_a_disk_that_fills_up_while_writing_is_one_line_and_keeps_nothing(tmp_path):
    """A real 1 MiB tmpfs (needs root, as the issue's probe had): the bundled trace's run
    does not fit; one line, exit 2, the run folder and the folders made for it gone."""
    disk = tmp_path / "disk"
    disk.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(disk)],
                             capture_output=True)  # fmt: skip
    if mounted.returncode != 0:
        pytest.skip("mounting a tmpfs needs root")
    try:
        proc = memlens("simulate", "mlflow.enabled=false", f"trace={BUNDLED}",
                       f"hydra.run.dir={disk / 'day' / 'run'}", cwd=tmp_path)  # fmt: skip
        one_error(proc, "No space left on device")
        assert sorted(disk.iterdir()) == []
    finally:
        subprocess.run(["umount", str(disk)], check=False)


def test_a_failed_run_removes_the_folders_made_for_it_only(tmp_path):
    from memlens.runs.writers import run_folder

    (tmp_path / "outputs").mkdir()  # existed before: kept
    target = tmp_path / "outputs" / "day" / "time"
    folders.note_missing_parents(target)
    target.mkdir(parents=True)  # as Hydra does, before the command body
    with pytest.raises(OSError), run_folder(target):
        raise OSError(errno.ENOSPC, "No space left on device")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["outputs"]
    assert sorted((tmp_path / "outputs").iterdir()) == []


def test_a_folder_that_holds_other_files_is_never_removed(tmp_path):
    from memlens.runs.writers import run_folder

    target = tmp_path / "outputs" / "day" / "time"
    folders.note_missing_parents(target)
    target.mkdir(parents=True)
    (tmp_path / "outputs" / "day" / "other-run").mkdir()  # a concurrent run's folder
    with pytest.raises(RuntimeError), run_folder(target):
        raise RuntimeError("the run failed")
    assert sorted(p.name for p in (tmp_path / "outputs" / "day").iterdir()) == ["other-run"]


@pytest.mark.slow  # kept out of the default run (6-minute budget); make test-all runs it
def test_a_compare_stopped_by_sigterm_leaves_no_dated_folder(tmp_path):
    """The issue's case: SIGTERM while the sweep runs left ``outputs/<date>`` empty."""
    env = {"MEMLENS_CACHE": str(tmp_path / "cache")}
    proc = subprocess.Popen([MEMLENS, "compare", "policies=[lru,rule,memorybank]",
                             "budgets=[256,512,1024]", "mlflow.enabled=false", "n_jobs=1",
                             "resume=false"], cwd=tmp_path, env={**os.environ, **env},
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)  # fmt: skip
    deadline = time.monotonic() + 240
    while time.monotonic() < deadline and proc.poll() is None:
        if list((tmp_path / "outputs").glob("*/.*.staging.*")):
            break
        time.sleep(0.05)
    assert proc.poll() is None, proc.communicate()
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 143 and "interrupted by SIGTERM" in err
    assert not (tmp_path / "outputs").exists()


# ------------------------------------------------------------------ case 9
def test_one_trace_under_two_spellings_is_refused(tmp_path):
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "t.jsonl").write_text("")
    os.symlink(tmp_path / "a" / "t.jsonl", tmp_path / "link.jsonl")
    one, two, three = (str(tmp_path / p) for p in ("a/t.jsonl", "a/../a/t.jsonl", "link.jsonl"))
    with pytest.raises(ValueError, match=r"traces lists .*a/\.\./a/t\.jsonl twice \(also as"):
        CompareConfig(traces=[one, two], policies=["lru"])
    with pytest.raises(ValueError, match="link.jsonl twice"):
        CompareConfig(traces=[one, three], policies=["lru"])
    CompareConfig(traces=[one, str(BUNDLED)], policies=["lru"])


def test_a_memlens_cache_that_is_a_file_is_refused(tmp_path, monkeypatch):
    (tmp_path / "f").write_text("x")
    monkeypatch.setenv("MEMLENS_CACHE", str(tmp_path / "f"))
    assert "MEMLENS_CACHE=" in environment_error() and "not a folder" in environment_error()
    monkeypatch.setenv("MEMLENS_CACHE", str(tmp_path / "new"))
    assert environment_error() is None
    proc = memlens("simulate", "mlflow.enabled=false", cwd=tmp_path,
                   env={"MEMLENS_CACHE": str(tmp_path / "f")})  # fmt: skip
    one_error(proc, "MEMLENS_CACHE")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["f"]


def test_a_sqlite_store_that_is_a_folder_is_refused_at_once(tmp_path):
    (tmp_path / "db").mkdir()
    with pytest.raises(ValueError, match="is a folder, not a database file"):
        MlflowConfig(tracking_uri=f"sqlite:///{tmp_path / 'db'}")
    with pytest.raises(ValueError, match="does not exist"):
        MlflowConfig(tracking_uri=f"sqlite:///{tmp_path / 'no' / 'm.db'}")
    MlflowConfig(tracking_uri=f"sqlite:///{tmp_path / 'db'}", enabled=False)  # not used: fine
    MlflowConfig(tracking_uri=f"sqlite:///{tmp_path / 'm.db'}")


@pytest.mark.parametrize("override, key", [("trace=a[1].jsonl", "trace=a[1].jsonl"),
                                           ("traces=[x,a[1.jsonl]", "traces=")])  # fmt: skip
def test_a_value_hydra_cannot_parse_names_its_setting(override, key):
    message = parse_error(["budget=512", override])
    assert message.startswith(key) and "quote" in message
    assert parse_error(["trace='a[1].jsonl'", "budget=512"]) is None
