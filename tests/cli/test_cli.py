"""The installed ``memlens`` command, run as a user would: from a temporary directory."""

from __future__ import annotations

import json
import subprocess
import sys

import pyarrow.parquet as pq
import pytest
from helpers import memlens

from memlens.analyze.registry import declared


def test_help_and_module_entry_point(tmp_path):
    out = memlens("--help", cwd=tmp_path).stdout
    assert "simulate" in out and "compare" in out
    proc = subprocess.run(
        [sys.executable, "-m", "memlens", "--help"], cwd=tmp_path, capture_output=True, text=True
    )
    assert proc.returncode == 0 and "simulate" in proc.stdout
    assert memlens("frobnicate", cwd=tmp_path, check=False).returncode == 2


@pytest.mark.slow  # kept out of the default run (6-minute budget); make test-all runs it
def test_simulate_writes_records_into_the_run_dir(tmp_path, small_trace):
    run_dir = tmp_path / "run"
    proc = memlens(
        "simulate",
        f"trace={small_trace}",
        "policy=lru",
        "budget=512",
        "mlflow.enabled=false",
        f"hydra.run.dir={run_dir}",
        cwd=tmp_path,
    )
    assert "hit_rate" in proc.stdout and "events/s" in proc.stdout
    metrics = json.loads((run_dir / "metrics.json").read_text())
    assert metrics["policy"] == "lru" and metrics["budget"] == 512
    assert 0.0 <= metrics["overall"]["hit_rate"] <= 1.0
    table = pq.read_table(run_dir / "per_request.parquet")
    assert table.num_rows == metrics["overall"]["requests"]
    assert sum(table.column("hits").to_pylist()) == metrics["overall"]["hits"]
    resolved = (run_dir / "resolved_config.yaml").read_text()
    assert "budget: 512" in resolved and str(small_trace) in resolved
    moves = pq.read_table(run_dir / "moves.parquet").to_pydict()
    assert moves["to"].count("stc") >= metrics["overall"]["evictions"]
    assert not (tmp_path / "mlflow.db").exists()  # recording was switched off


def test_same_config_and_seed_give_identical_metrics(tmp_path, small_trace):
    results = []
    for k in range(2):
        d = tmp_path / f"r{k}"
        memlens(
            "simulate",
            f"trace={small_trace}",
            "policy=window",
            "budget=700",
            "seed=5",
            "engine=reference",
            "mlflow.enabled=false",
            f"hydra.run.dir={d}",
            cwd=tmp_path,
        )
        results.append(json.loads((d / "metrics.json").read_text()))
        results[-1].pop("timing")
    assert results[0] == results[1]
    core = {k for k, m in declared().items() if m.group == "core"}
    assert core <= set(results[0]["overall"])


def test_bad_trace_exits_2_naming_file_line_and_field_and_writes_no_results(tmp_path):
    bad = tmp_path / "bad.jsonl"
    bad.write_text(
        '{"event": "write", "id": "m1", "tokens": 3, "type": "user_input", "stream": "s1"}\n'
        '{"event": "request", "id": "q", "needs": ["m7"], "stream": "s1"}\n'
    )
    run_dir = tmp_path / "run"
    proc = memlens(
        "simulate",
        f"trace={bad}",
        "mlflow.enabled=false",
        f"hydra.run.dir={run_dir}",
        cwd=tmp_path,
        check=False,
    )
    assert proc.returncode == 2
    assert f'{bad}:2: request needs "m7", which no earlier write in stream "s1" defines' in (
        proc.stderr
    )
    assert not (run_dir / "metrics.json").exists()
    assert not (run_dir / "per_request.parquet").exists()


@pytest.mark.slow  # >10 s: kept out of the default run (make test-all runs it)
def test_multirun_sweep(tmp_path, small_trace):
    sweep = tmp_path / "sweep"
    memlens(
        "simulate",
        "-m",
        f"trace={small_trace}",
        "policy=window,lru",
        "budget=256,1024",
        "mlflow.enabled=false",
        f"hydra.sweep.dir={sweep}",
        cwd=tmp_path,
    )
    found = sorted(sweep.glob("*/metrics.json"))
    assert len(found) == 4
    combos = {
        (json.loads(p.read_text())["policy"], json.loads(p.read_text())["budget"]) for p in found
    }
    assert combos == {("window", 256), ("window", 1024), ("lru", 256), ("lru", 1024)}


def test_compare_table_and_csv(tmp_path, small_trace):
    run_dir = tmp_path / "cmp"
    proc = memlens(
        "compare",
        f"trace={small_trace}",
        "policies=[window,lru]",
        "budgets=[128,4096]",
        "mlflow.enabled=false",
        f"hydra.run.dir={run_dir}",
        cwd=tmp_path,
    )
    lines = (run_dir / "compare.csv").read_text().splitlines()
    assert lines[0].startswith("trace,policy,budget,hit_rate")
    assert len(lines) == 1 + 4
    rows = json.loads((run_dir / "compare.json").read_text())
    by = {(r["policy"], r["budget"]): r["hit_rate"] for r in rows}
    assert by[("lru", 4096)] >= by[("lru", 128)]  # more budget never hurts LRU here
    assert "window" in proc.stdout and "budget 4096 tokens" in proc.stdout
    assert max(map(len, proc.stdout.splitlines())) <= 120  # the verdict fits a terminal


def test_compare_default_runs_with_nothing_but_the_install(tmp_path):
    proc = memlens(
        "compare",
        "policies=[lru]",
        "budgets=[1024]",
        "mlflow.enabled=false",
        "table=full",
        f"hydra.run.dir={tmp_path / 'c'}",
        cwd=tmp_path,
    )
    header = proc.stdout.splitlines()[0].split()
    assert header[:4] == ["trace", "policy", "budget", "hit_rate"] and "events_per_s" in header
    assert "agent-small.jsonl.gz" in proc.stdout


def test_compare_rejects_unknown_policies_before_running(tmp_path):
    proc = memlens(
        "compare",
        "policies=[lru,nonesuch]",
        "mlflow.enabled=false",
        f"hydra.run.dir={tmp_path / 'c'}",
        cwd=tmp_path,
        check=False,
    )
    assert proc.returncode == 2
    assert "error: unknown policy 'nonesuch' (registered:" in proc.stderr
    assert not (tmp_path / "c" / "compare.csv").exists()


@pytest.mark.parametrize(
    "override, message",
    [
        ("budget=-5", "budget must be a positive integer"),
        ("budget=1.5", "Error merging override budget=1.5"),
        ("policy=LRU", "unknown policy 'LRU' (registered:"),
        ("engine=turbo", "engine must be auto, fast or reference"),
        ("price_per_mtok=-1", "price_per_mtok must be a finite non-negative number"),
        ("policy.no_such_parameter=1", "Could not override 'policy.no_such_parameter'"),
        ("retrieval.k=-1", "retrieval.k must be >= 0"),
        ("oracle.method=psychic", "oracle.method must be one of"),
    ],
)
@pytest.mark.slow  # kept out of the default run (6-minute budget); make test-all runs it
def test_bad_settings_exit_2_with_one_clear_line(tmp_path, override, message):
    run_dir = tmp_path / "run"
    proc = memlens(
        "simulate",
        override,
        "mlflow.enabled=false",
        f"hydra.run.dir={run_dir}",
        cwd=tmp_path,
        check=False,
    )
    assert proc.returncode == 2, proc.stderr
    assert f"error: {message}" in proc.stderr
    assert "Traceback" not in proc.stderr
    assert not (run_dir / "metrics.json").exists()


@pytest.mark.slow  # >10 s: kept out of the default run (make test-all runs it)
def test_compare_and_simulate_agree_on_policy_overrides(tmp_path, small_trace):
    """``compare`` used to ignore ``policy.*`` overrides (0.1662 at any threshold)."""
    common = [f"trace={small_trace}", "mlflow.enabled=false", "oracle.enabled=false"]
    hit_rates = {}
    for threshold in (0.0, 0.9):
        over = f"policy.admit_threshold={threshold}"
        memlens("compare", *common, "policies=[rule]", "budgets=[512]", over,
                f"hydra.run.dir={tmp_path / f'c{threshold}'}", cwd=tmp_path)  # fmt: skip
        memlens("simulate", *common, "policy=rule", "budget=512", over,
                f"hydra.run.dir={tmp_path / f's{threshold}'}", cwd=tmp_path)  # fmt: skip
        (row,) = json.loads((tmp_path / f"c{threshold}" / "compare.json").read_text())
        sim = json.loads((tmp_path / f"s{threshold}" / "metrics.json").read_text())["overall"]
        assert row["hit_rate"] == sim["hit_rate"] and row["hits"] == sim["hits"]
        hit_rates[threshold] = row["hit_rate"]
    assert hit_rates[0.0] != hit_rates[0.9]


@pytest.mark.parametrize("budgets", ["budgets=512", "budgets=[]"])
def test_compare_bad_budgets_exit_2(tmp_path, budgets):
    proc = memlens("compare", budgets, "mlflow.enabled=false", cwd=tmp_path, check=False)
    assert proc.returncode == 2 and proc.stderr.startswith("error: ")
    assert len(proc.stderr.strip().splitlines()) == 1 and "Traceback" not in proc.stderr
