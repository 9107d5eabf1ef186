"""A sweep against an `mlflow server` backed by a database: one parent run, a child per job,
tagged with the sweep id, the git commit and the trace hash; `memlens report` reads it back."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("mlflow")
from helpers import memlens  # noqa: E402
from mlflow.tracking import MlflowClient  # noqa: E402


@pytest.mark.slow  # an MLflow server and two memlens processes: about a minute
def test_a_sweep_on_a_server_is_one_parent_with_tagged_children(tmp_path, mlflow_server):  # noqa: F811
    trace = tmp_path / "t.jsonl.gz"
    memlens("data", "generate", "seed=3", "streams=6", "events_per_stream=150", f"out={trace}",
            cwd=tmp_path)  # fmt: skip
    memlens("compare", f"trace={trace}", "policies=[window,lru,rule]", "budgets=[64,256]",
            f"mlflow.tracking_uri={mlflow_server}", "mlflow.experiment=team-sweeps",
            "n_jobs=2", "parallel_min_events=0", f"hydra.run.dir={tmp_path / 'cmp'}",
            cwd=tmp_path)  # fmt: skip
    client = MlflowClient(tracking_uri=mlflow_server)
    runs = client.search_runs([client.get_experiment_by_name("team-sweeps").experiment_id])
    parents = [r for r in runs if "mlflow.parentRunId" not in r.data.tags]
    children = [r for r in runs if "mlflow.parentRunId" in r.data.tags]
    assert len(parents) == 1 and len(children) == 6
    parent = parents[0]
    sweep_id = parent.data.tags["memlens.sweep_id"]
    assert sweep_id == json.loads((tmp_path / "cmp" / "sweep.json").read_text())["sweep_id"]
    assert parent.data.params["sweep_id"] == sweep_id and parent.data.params["n_workers"] == "2"
    for child in children:
        tags = child.data.tags
        assert tags["mlflow.parentRunId"] == parent.info.run_id
        assert tags["memlens.sweep_id"] == sweep_id
        assert tags["memlens.trace_sha256"] == child.data.params["trace_sha256"]
        assert tags["memlens.git_commit"] == parent.data.tags["memlens.git_commit"]
        assert child.info.status == "FINISHED"
    assert len({c.data.tags["memlens.trace_sha256"] for c in children}) == 1  # one trace
    out = memlens("report", "team-sweeps", "--tracking-uri", mlflow_server, "--out",
                  str(tmp_path / "rep"), cwd=tmp_path)  # fmt: skip
    text = (tmp_path / "rep" / "report.md").read_text()
    assert "report.html" in out.stdout and "## compare" in text
    assert f"sweep id {sweep_id}" in text and "6 recorded (6 FINISHED)" in text
    assert text.count("| t.jsonl.gz |") == 6
    assert "<table>" in (tmp_path / "rep" / "report.html").read_text()
