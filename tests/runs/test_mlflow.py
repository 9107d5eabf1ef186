"""MLflow records: SQLite by default, any tracking URI by config, FAILED runs, a real server."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from memlens.config.compose import compose_config

mlflow = pytest.importorskip("mlflow")
from helpers import memlens  # noqa: E402
from mlflow.tracking import MlflowClient  # noqa: E402

RUN_PARAMS = {"trace", "trace_sha256", "policy", "policy_cfg._target_", "budget", "demand_fetch",
              "seed", "memlens_version", "git_commit", "schema_version"}  # fmt: skip


@pytest.mark.slow  # >10 s: kept out of the default run (make test-all runs it)
def test_simulate_logs_params_metrics_and_artifacts_to_sqlite(tmp_path):
    trace = tmp_path / "t.jsonl.gz"
    memlens(
        "data",
        "generate",
        "seed=1",
        "streams=1",
        "events_per_stream=200",
        f"out={trace}",
        cwd=tmp_path,
    )
    memlens(
        "simulate",
        f"trace={trace}",
        "policy=lru",
        "budget=300",
        f"hydra.run.dir={tmp_path / 'run'}",
        cwd=tmp_path,
    )
    assert (tmp_path / "mlflow.db").exists()  # the default: sqlite:///mlflow.db in the cwd
    client = MlflowClient(tracking_uri=f"sqlite:///{tmp_path / 'mlflow.db'}")
    exp = client.get_experiment_by_name("memlens")
    (run,) = client.search_runs([exp.experiment_id])
    assert run.info.status == "FINISHED"
    assert run.data.params["policy"] == "lru" and run.data.params["budget"] == "300"
    assert RUN_PARAMS <= set(run.data.params)
    assert 0.0 <= run.data.metrics["hit_rate"] <= 1.0
    arts = {a.path for a in client.list_artifacts(run.info.run_id)}
    assert {"metrics.json", "per_request.parquet", "resolved_config.yaml"} <= arts


@pytest.mark.slow  # an MLflow store and a failing run: 5 s
def test_a_failing_run_is_marked_failed(tmp_path, monkeypatch):
    from memlens.cli import replay as commands

    def explode(*args, **kwargs):
        raise RuntimeError("policy crashed mid-replay")

    monkeypatch.setattr(commands, "run", explode)
    trace = tmp_path / "t.jsonl.gz"
    memlens(
        "data",
        "generate",
        "seed=1",
        "streams=1",
        "events_per_stream=50",
        f"out={trace}",
        cwd=tmp_path,
    )
    uri = f"sqlite:///{tmp_path / 'fail.db'}"
    monkeypatch.chdir(tmp_path)
    cfg = compose_config("simulate", [f"trace={trace}", f"mlflow.tracking_uri={uri}"])
    monkeypatch.setattr(commands, "_run_dir", lambda: tmp_path / "out")
    with pytest.raises(RuntimeError, match="crashed"):
        commands.simulate_task(cfg)
    client = MlflowClient(tracking_uri=uri)
    (run,) = client.search_runs([client.get_experiment_by_name("memlens").experiment_id])
    assert run.info.status == "FAILED"
    assert not (tmp_path / "out" / "metrics.json").exists()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.slow  # >10 s: kept out of the default run (make test-all runs it)
def test_runs_reach_a_tracking_server(tmp_path, mlflow_server):
    trace = tmp_path / "t.jsonl.gz"
    memlens(
        "data",
        "generate",
        "seed=2",
        "streams=1",
        "events_per_stream=100",
        f"out={trace}",
        cwd=tmp_path,
    )
    memlens(
        "compare",
        f"trace={trace}",
        "policies=[window,lru]",
        "budgets=[64,256]",
        f"mlflow.tracking_uri={mlflow_server}",
        "mlflow.experiment=server-test",
        f"hydra.run.dir={Path(tmp_path) / 'cmp'}",
        cwd=tmp_path,
    )
    client = MlflowClient(tracking_uri=mlflow_server)
    exp = client.get_experiment_by_name("server-test")
    runs = client.search_runs([exp.experiment_id])
    assert len(runs) == 1 + 4  # the parent compare run and one child per (policy, budget)
    assert all(r.info.status == "FINISHED" for r in runs)
    children = [r for r in runs if r.data.tags.get("mlflow.parentRunId")]
    # compare's jobs log exactly what simulate logs (they used to log fewer parameters)
    assert all(set(r.data.params) >= RUN_PARAMS for r in children)
    assert {(r.data.params["policy"], r.data.params["budget"]) for r in children} == {
        ("window", "64"),
        ("window", "256"),
        ("lru", "64"),
        ("lru", "256"),
    }
