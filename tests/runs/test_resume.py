"""Rerunning a sweep skips the jobs it finished; a job that crashes fails alone (memlens.runs.sweep)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient

from memlens.analyze.report import Report
from memlens.runs import resume

CRASH_POLICY = '''
import os
from memlens.policies.lru import LRU

class CrashAtBudget(LRU):
    """LRU that raises at the start of every stream when its budget is $CRASH_BUDGET."""

    def reset(self, ctx):
        if str(ctx.budget) == os.environ.get("CRASH_BUDGET"):
            raise RuntimeError(f"told to crash at budget {ctx.budget}")
        super().reset(ctx)
'''


@pytest.fixture(scope="module")
def env(tmp_path_factory) -> dict:
    """A private cache (so earlier tests' jobs are not reused) and the crashing policy."""
    d = tmp_path_factory.mktemp("resume")
    (d / "crashpol.py").write_text(CRASH_POLICY)
    path = os.pathsep.join([str(d), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    return {**os.environ, "PYTHONPATH": path, "PYTHONWARNINGS": "ignore",
            "MEMLENS_CACHE": str(d / "cache")}  # fmt: skip


def memlens(*args: str, cwd: Path, env: dict) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "memlens", *args], cwd=cwd, env=env,
                          capture_output=True, text=True)  # fmt: skip


@pytest.fixture(scope="module")
def trace(tmp_path_factory, env) -> Path:
    d = tmp_path_factory.mktemp("trace")
    proc = memlens("data", "generate", "archetype=support", "seed=5", "streams=3",
                   "events_per_stream=200", f"out={d / 't.jsonl.gz'}", cwd=d, env=env)  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    return d / "t.jsonl.gz"


@pytest.mark.slow  # three memlens processes: about 35 s on a busy 2-core machine
def test_a_rerun_skips_finished_jobs_and_gives_the_same_tables(tmp_path, trace, env):
    args = [f"trace={trace}", "policies=[lru,window]", "budgets=[128,512]", "n_jobs=1",
            f"mlflow.tracking_uri=sqlite:///{tmp_path / 'm.db'}"]  # fmt: skip
    first = memlens("compare", *args, f"hydra.run.dir={tmp_path / 'a'}", cwd=tmp_path, env=env)
    assert first.returncode == 0, first.stderr
    assert "4 job(s): 4 ran on 1 worker(s), 0 skipped" in first.stderr
    again = memlens("compare", *args, "budgets=[128,512,1024]", f"hydra.run.dir={tmp_path / 'b'}",
                    cwd=tmp_path, env=env)  # fmt: skip
    assert again.returncode == 0, again.stderr
    assert "6 job(s): 2 ran on 1 worker(s), 4 skipped (finished by an earlier run)" in again.stderr
    a = json.loads((tmp_path / "a" / "compare.json").read_text())
    b = json.loads((tmp_path / "b" / "compare.json").read_text())
    assert [r for r in b if r["budget"] != 1024] == a  # the stored jobs, every value
    runs = MlflowClient(f"sqlite:///{tmp_path / 'm.db'}").search_runs(["1"])
    parents = [r for r in runs if "mlflow.parentRunId" not in r.data.tags]
    assert sorted(r.data.params["jobs_skipped"] for r in parents) == ["0", "4"]
    assert len(runs) == 2 + 4 + 2  # a skipped job is not recorded twice
    fresh = memlens("compare", *args, "resume=false", f"hydra.run.dir={tmp_path / 'c'}",
                    cwd=tmp_path, env=env)  # fmt: skip
    assert "4 job(s): 4 ran on 1 worker(s), 0 skipped" in fresh.stderr


@pytest.mark.slow  # two memlens processes: about 35 s on a busy 2-core machine
def test_a_crashing_job_is_failed_in_mlflow_and_the_sweep_goes_on(tmp_path, trace, env):
    uri = f"sqlite:///{tmp_path / 'm.db'}"
    proc = memlens("compare", f"trace={trace}", "policies=[lru]", "budgets=[128,256,512]",
                   "policy._target_=crashpol.CrashAtBudget", f"mlflow.tracking_uri={uri}",
                   f"hydra.run.dir={tmp_path / 'run'}", cwd=tmp_path,
                   env={**env, "CRASH_BUDGET": "256"})  # fmt: skip
    assert proc.returncode == 1, proc.stderr
    assert "error: job lru@256 on" in proc.stderr and "told to crash at budget 256" in proc.stderr
    assert "3 job(s): 2 ran on 1 worker(s), 0 skipped (finished by an earlier run), 1 failed" in (
        proc.stderr
    )
    rows = json.loads((tmp_path / "run" / "compare.json").read_text())
    assert [r["budget"] for r in rows] == [128, 512]  # the tables of the jobs that finished
    sweep = json.loads((tmp_path / "run" / "sweep.json").read_text())
    assert [f["job"] for f in sweep["failed"]] == ["lru@256"]
    runs = MlflowClient(uri).search_runs(["1"])
    status = {r.info.run_name: r.info.status for r in runs}
    assert status == {"compare": "FINISHED", "lru@128": "FINISHED", "lru@256": "FAILED",
                      "lru@512": "FINISHED"}  # fmt: skip
    failed = next(r for r in runs if r.info.run_name == "lru@256")
    assert "told to crash" in failed.data.tags["memlens.error"]
    # the rerun (crash fixed) runs only the failed job
    again = memlens("compare", f"trace={trace}", "policies=[lru]", "budgets=[128,256,512]",
                    "policy._target_=crashpol.CrashAtBudget", f"mlflow.tracking_uri={uri}",
                    f"hydra.run.dir={tmp_path / 'rerun'}", cwd=tmp_path, env=env)  # fmt: skip
    assert again.returncode == 0, again.stderr
    assert "3 job(s): 1 ran on 1 worker(s), 2 skipped" in again.stderr


def test_in_process_sweep_skips_what_it_finished_and_survives_a_crash(tmp_path, monkeypatch):
    """The same two properties, fast: memlens.runs.sweep.execute with one worker, in this process."""
    from memlens.cli.replay import compare_jobs
    from memlens.config.compose import compose_config
    from memlens.config.schema import resolve
    from memlens.runs import sweep as sweep_mod
    from memlens.runs.pipeline import load_trace

    monkeypatch.setenv("MEMLENS_CACHE", str(tmp_path / "cache"))
    settings = resolve(compose_config("compare", ["policies=[lru,window]", "budgets=[256,1024]",
                                                  "mlflow.enabled=false", "n_jobs=1"]))  # fmt: skip
    trace = load_trace(settings)
    jobs = sweep_mod.plan(settings, list(compare_jobs(settings)), {settings.trace: trace.sha256})
    real_run = sweep_mod.run

    def crash_window_at_1024(job_settings, loaded, **kwargs):
        if job_settings.budget == 1024 and job_settings.policy["_target_"].endswith("Window"):
            raise RuntimeError("boom")
        return real_run(job_settings, loaded, **kwargs)

    monkeypatch.setattr(sweep_mod, "run", crash_window_at_1024)
    first = sweep_mod.execute(settings, jobs)
    assert [o.job.label for o in first.failed] == ["window@1024"]
    assert first.failed[0].error == "RuntimeError: boom"
    assert [o.report is not None for o in first.outcomes] == [True, True, True, False]
    assert first.summary()["ran"] == 3 and first.skipped == 0
    monkeypatch.setattr(sweep_mod, "run", real_run)
    second = sweep_mod.execute(settings, jobs)
    assert second.skipped == 3 and not second.failed
    assert [o.skipped for o in second.outcomes] == [True, True, True, False]
    for a, b in zip(first.outcomes[:3], second.outcomes[:3]):
        assert a.report.to_dict() == b.report.to_dict()


def test_a_stored_report_comes_back_equal(tmp_path):
    from memlens.config.compose import run_settings
    from memlens.runs.pipeline import run

    settings = run_settings(["policy=rule", "budget=1024", "mlflow.enabled=false"])
    _, report = run(settings)
    assert resume.save("ab" * 32, report, tmp_path)
    back = resume.load("ab" * 32, tmp_path)
    assert isinstance(back, Report)
    assert back.to_dict() == json.loads(json.dumps(report.to_dict()))
    assert back.row() == report.row()
    for name, (num, den) in report.stream_parts.items():
        assert back.stream_parts[name][0].tolist() == num.tolist()
        assert (den is None) == (back.stream_parts[name][1] is None)


def test_the_key_changes_with_settings_trace_and_code(monkeypatch):
    from dataclasses import replace

    from memlens.config.compose import run_settings

    settings = run_settings(["policy=lru"])
    key = resume.job_key(settings, "t" * 64)
    assert resume.job_key(settings, "t" * 64) == key
    assert resume.job_key(replace(settings, budget=999), "t" * 64) != key
    assert resume.job_key(settings, "u" * 64) != key
    monkeypatch.setattr(resume, "code_version", lambda: "another version")
    assert resume.job_key(settings, "t" * 64) != key


def test_a_relative_local_store_counts_by_its_folder(tmp_path, monkeypatch):
    from dataclasses import replace

    from memlens.config.compose import run_settings

    settings = run_settings(["policy=lru"])  # mlflow.tracking_uri=sqlite:///mlflow.db
    (tmp_path / "a").mkdir(), (tmp_path / "b").mkdir()
    monkeypatch.chdir(tmp_path / "a")
    in_a = resume.job_key(settings, "t" * 64)
    absolute = replace(settings, mlflow=replace(settings.mlflow,
                       tracking_uri=f"sqlite:///{tmp_path / 'a' / 'mlflow.db'}"))  # fmt: skip
    assert resume.job_key(absolute, "t" * 64) == in_a
    monkeypatch.chdir(tmp_path / "b")
    assert resume.job_key(settings, "t" * 64) != in_a


def test_the_key_changes_when_a_named_model_file_is_retrained_in_place(tmp_path):
    """A learned model rewritten at the same path is a new job, not a finished one."""
    import shutil

    from memlens.config.compose import run_settings
    from memlens.scorer.model import DEFAULT_MODEL

    model = tmp_path / "m.txt"
    shutil.copy(DEFAULT_MODEL, model)
    shutil.copy(DEFAULT_MODEL.with_suffix(".json"), tmp_path / "m.json")
    settings = run_settings(["policy=learned", f"policy.model={model}"])
    key = resume.job_key(settings, "t" * 64)
    assert resume.job_key(settings, "t" * 64) == key
    model.write_bytes(model.read_bytes() + b"\n")  # "retrained": other bytes, same path
    assert resume.job_key(settings, "t" * 64) != key


def test_a_stored_report_holds_what_a_json_round_trip_of_it_holds(tmp_path):
    """``save`` encodes the report once, in the entry's header (``default=_plain``), where it
    used to round-trip it through json first: the header's metadata is the same text."""
    import dataclasses

    import numpy as np

    from memlens.config.compose import run_settings
    from memlens.runs.pipeline import run

    settings = run_settings(["policy=lru", "budget=512", "mlflow.enabled=false"])
    _, report = run(settings)
    assert resume.save("cd" * 32, report, tmp_path)
    with np.load(resume.entry_path("cd" * 32, tmp_path), allow_pickle=False) as z:
        header = json.loads(z["__header__"].tobytes())
    fields = {f.name: getattr(report, f.name) for f in dataclasses.fields(Report)}
    fields["intervals"] = {k: iv.to_dict() for k, iv in report.intervals.items()}
    fields["stream_parts"] = {name: i for i, name in enumerate(report.stream_parts)}
    old = json.loads(json.dumps(fields, default=resume._plain))
    assert json.dumps(header["meta"]) == json.dumps(old)
