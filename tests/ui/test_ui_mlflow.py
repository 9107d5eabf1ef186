"""The event log and report.html reach MLflow as artifacts, and memlens ui lists (and opens)
MLflow runs from a SQLite tracking store."""

from __future__ import annotations

import json
import urllib.request

import pytest
from mlflow.tracking import MlflowClient

from memlens.cli import replay as commands
from memlens.config.compose import compose_config
from memlens.trace.io import write_trace
from memlens.ui.sample import sample_events
from memlens.ui.server import UiConfig, running


@pytest.mark.slow  # kept out of the default run (6-minute budget); make test-all runs it
def test_artifacts_logged_and_run_listed(tmp_path, monkeypatch):
    root = tmp_path / "root"
    root.mkdir()
    write_trace(tmp_path / "t.jsonl", sample_events())
    uri = f"sqlite:///{tmp_path / 'ml.db'}"
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(commands, "_run_dir", lambda: root / "local-run")
    cfg = compose_config("simulate", [f"trace={tmp_path / 't.jsonl'}", "policy=lru", "budget=2",
                                      f"mlflow.tracking_uri={uri}",
                                      f"mlflow.artifact_location={root / 'mlartifacts'}"])  # fmt: skip
    commands.simulate_task(cfg)
    client = MlflowClient(tracking_uri=uri)
    (run,) = client.search_runs([client.get_experiment_by_name("memlens").experiment_id])
    names = {a.path for a in client.list_artifacts(run.info.run_id)}
    assert {"report.html", "events.parquet", "metrics.json"} <= names
    ui = UiConfig(root=str(root), port=0, mlflow_uri=uri, feedback_store=str(tmp_path / "f.db"))
    with running(ui) as (url, state):
        token = {"X-MemLens-Token": state.token}  # the token opens the API as a session does
        with urllib.request.urlopen(urllib.request.Request(f"{url}/api/runs", headers=token),
                                    timeout=60) as r:  # fmt: skip
            runs = json.loads(r.read())
        assert runs["mlflow_error"] is None
        (ml,) = runs["mlflow"]
        assert ml["mlflow_run_id"] == run.info.run_id and ml["policy"] == "lru"
        assert ml["run"] is not None and ml["run"].startswith("mlartifacts/")
        assert ml["trace"] == "t.jsonl" and ml["budget"] == "2"
        assert [r["run"] for r in runs["local"] if r["run"] == "local-run"] == ["local-run"]
        req = urllib.request.Request(f"{url}/api/summary?run={ml['run']}", headers=token)
        with urllib.request.urlopen(req, timeout=60) as r:
            summary = json.loads(r.read())
        assert summary["identity"]["hit_rate"] == 0.5


@pytest.mark.slow  # a simulate run logged to MLflow (~15 s); make test-all runs it
def test_a_run_whose_artifacts_lie_outside_opens_its_own_folder(tmp_path, monkeypatch):
    """Artifacts outside the page's root (MLflow's default ./mlartifacts): the run opens its
    own run folder instead, named by the memlens.run_dir tag, when that lies under the root."""
    root = tmp_path / "root"
    root.mkdir()
    write_trace(tmp_path / "t.jsonl", sample_events())
    uri = f"sqlite:///{tmp_path / 'ml.db'}"
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(commands, "_run_dir", lambda: root / "local-run")
    cfg = compose_config("simulate", [f"trace={tmp_path / 't.jsonl'}", "policy=lru", "budget=2",
                                      f"mlflow.tracking_uri={uri}",
                                      f"mlflow.artifact_location={tmp_path / 'elsewhere'}"])  # fmt: skip
    commands.simulate_task(cfg)
    ui = UiConfig(root=str(root), port=0, mlflow_uri=uri, feedback_store=str(tmp_path / "f.db"))
    with running(ui) as (url, state):
        req = urllib.request.Request(f"{url}/api/runs", headers={"X-MemLens-Token": state.token})
        with urllib.request.urlopen(req, timeout=60) as r:
            (ml,) = json.loads(r.read())["mlflow"]
    assert ml["run"] == "local-run" and ml["trace"] == "t.jsonl"
