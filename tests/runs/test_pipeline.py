"""The one run pipeline: simulate and compare agree, reports carry provenance, metrics registry."""

from __future__ import annotations

import json

import numpy as np
import pytest

from memlens.analyze.registry import check_keys, declared, of_kind, summary_columns
from memlens.analyze.report import SCHEMA_VERSION, Section, assemble
from memlens.cli.replay import compare_jobs, job_settings
from memlens.config.compose import compose_config, run_settings
from memlens.config.schema import resolve
from memlens.runs import pipeline

SMALL = ["oracle.enabled=false", "mlflow.enabled=false"]


def compare_reports(argv: list[str]):
    from memlens.cli.main import policy_overrides_to_list

    settings = resolve(compose_config("compare", policy_overrides_to_list([*SMALL, *argv])))
    for path, name, policy, budget in compare_jobs(settings):
        yield name, budget, pipeline.run(job_settings(settings, path, policy, budget))[1]


@pytest.mark.parametrize("threshold", [0.0, 0.9])
@pytest.mark.slow  # kept out of the default run (6-minute budget); make test-all runs it
def test_compare_applies_policy_overrides_exactly_as_simulate(threshold):
    """The bug: compare read conf/policy/*.yaml itself and ignored ``policy.*`` overrides."""
    over = f"policy.admit_threshold={threshold}"
    ((_, _, cmp),) = compare_reports(["policies=[rule]", "budgets=[1024]", over])
    _, sim = pipeline.run(run_settings([*SMALL, "policy=rule", "budget=1024", over]))
    assert cmp.overall == sim.overall
    assert cmp.policy_config["admit_threshold"] == threshold


def test_the_override_changes_the_numbers():
    low = next(compare_reports(["policies=[rule]", "budgets=[1024]", "policy.admit_threshold=0"]))
    high = next(compare_reports(["policies=[rule]", "budgets=[1024]",
                                 "policy.admit_threshold=0.9"]))  # fmt: skip
    assert low[2].overall["hits"] != high[2].overall["hits"]


def test_every_compare_job_equals_the_matching_simulate_run():
    for name, budget, report in compare_reports(["policies=[lru,memgpt]", "budgets=[256,4096]"]):
        _, sim = pipeline.run(run_settings([*SMALL, f"policy={name}", f"budget={budget}"]))
        assert report.overall == sim.overall and report.streams == sim.streams


def test_report_carries_provenance_and_one_trace_hash():
    done, report = pipeline.run(run_settings(SMALL))
    doc = report.to_dict()
    assert doc["schema_version"] == SCHEMA_VERSION
    assert doc["memlens_version"] and doc["memlens_version"] != "unknown"
    assert doc["git_commit"] is None or len(doc["git_commit"].split("+")[0]) == 40
    assert doc["trace"]["sha256"] == done.trace.sha256
    assert doc["policy_config"]["_target_"] == "memlens.policies.lru.LRU"
    json.dumps(doc, allow_nan=False)  # metrics.json is strict JSON


def test_every_reported_metric_is_registered_and_every_core_one_reported():
    _, report = pipeline.run(run_settings(["mlflow.enabled=false"]))
    check_keys(report.overall, "overall")
    check_keys(report.timing, "timing")
    core = [k for k, m in declared().items() if m.group in ("core", "oracle")]
    assert set(core) <= set(report.overall)
    assert set(of_kind("deterministic")) >= set(core)
    assert summary_columns()[0] == "hit_rate" and "events_per_s" in summary_columns()


def test_an_unregistered_metric_is_refused():
    with pytest.raises(KeyError, match="not declared"):
        assemble({}, [Section("x", overall={"my_new_metric": 1.0})])
    streams = {"s0": {"hit_rate": 0.5}, "s1": {"hit_rate": 0.4, "my_new_metric": 1.0}}
    with pytest.raises(KeyError, match=r"stream s1: metrics \['my_new_metric'\] are not declared"):
        assemble({}, [Section("x", streams=streams)])
    from memlens.analyze.report import _check_stream_keys

    _check_stream_keys(Section("x", streams={"s0": {"hit_rate": 0.5}}))  # declared: no error


def test_zero_wall_time_gives_no_rate_instead_of_infinity(monkeypatch):
    done = pipeline.replay(run_settings(SMALL), pipeline.load_trace(run_settings(SMALL)))
    done.result.wall_s = 0.0
    report = pipeline.analyze(done)
    assert report.timing["events_per_s"] is None
    json.dumps(report.to_dict(), allow_nan=False)


def test_same_settings_same_numbers_bit_for_bit():
    a = pipeline.run(run_settings([*SMALL, "policy=rule", "engine=reference"]))[1]
    b = pipeline.run(run_settings([*SMALL, "policy=rule", "engine=reference"]))[1]
    for key in of_kind("deterministic"):
        assert a.overall.get(key) == b.overall.get(key), key
    assert np.isfinite(a.overall["hit_rate"])


def test_interval_bounds_are_what_mlflow_logs(tmp_path):
    """Every metric with an interval over streams logs ``_ci_low``/``_ci_high`` to MLflow."""
    from memlens.runs.tracking import interval_metrics
    from memlens.trace.generate import generate_simple
    from memlens.trace.io import write_trace

    path = tmp_path / "six.jsonl"
    write_trace(path, generate_simple(seed=3, streams=6, events_per_stream=150))
    _, report = pipeline.run(run_settings([*SMALL, f"trace={path}", "budget=512"]))
    bounds = interval_metrics(report)
    hr = report.intervals["hit_rate"]
    assert bounds["hit_rate_ci_low"] == hr.low <= report.overall["hit_rate"] <= hr.high
    assert "p95_context_tokens_ci_low" not in bounds  # no interval: not decomposable


@pytest.mark.parametrize("extra", [[], ["retrieval.enabled=true"]])
def test_the_tables_read_back_as_the_columns_they_were_written_from(tmp_path, extra):
    """per_request.parquet and moves.parquet hold their columns' Arrow tables, types too,
    though their names columns go to the writer as dictionary codes (no Arrow schema kept)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from memlens.analyze.metrics import per_request_table
    from memlens.config.store import DATA_DIR
    from memlens.runs import writers
    from memlens.trace.packed import arrow_rows

    trace = DATA_DIR / "default" / "agent-small.jsonl.gz"
    s = run_settings([f"trace={trace}", *SMALL, "policy=rule", "budget=512", *extra])
    done = pipeline.replay(s, pipeline.load_trace(s))
    tables = {
        "per_request.parquet": per_request_table(done.trace, done.result, done.retrieval,
                                                 s.price_per_mtok, s.costs),
        "moves.parquet": writers.moves_table(done),
    }  # fmt: skip
    writers._write_per_request(tmp_path / "per_request.parquet", done)
    writers._write_moves(tmp_path / "moves.parquet", done)
    for name, columns in tables.items():
        want = pa.table({k: arrow_rows(v, 0, len(v)) for k, v in columns.items()})
        got = pq.read_table(tmp_path / name)
        assert got.schema.equals(want.schema) and got.equals(want), name
        assert pa.types.is_string(got.schema.field("stream" if "request" in name else "to").type)
