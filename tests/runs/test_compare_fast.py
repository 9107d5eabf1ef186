"""Compare's fast paths: the compiled tier replay, compare without tier bookkeeping, the oracle
really off, per-trace metric inputs computed once, and MLflow values in one batch per run."""

from __future__ import annotations

import json
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from helpers import memlens  # noqa: E402
from hypothesis import given
from hypothesis import strategies as st
from memlens.policies.lru import LRU
from memlens.policies.window import SlidingWindow

from memlens.analyze import metrics
from memlens.analyze.costs import CostsConfig
from memlens.cli import replay as commands
from memlens.config.compose import compose_config, run_settings
from memlens.config.schema import resolve
from memlens.config.store import SettingsError, registered_policies
from memlens.retrieval.tiers import replay_tiers, replay_tiers_reference
from memlens.runs import pipeline, tracking
from memlens.simulator import MOVE_NAMES, SimResult, simulate
from memlens.trace.generate import generate_simple
from memlens.trace.io import trace_from_events

LOG_FIELDS = ("event", "item", "src", "dst", "final_tier")
SMALL = ["mlflow.enabled=false", "oracle.enabled=false"]


def random_trace(seed: int, streams: int = 3, events: int = 150):
    return trace_from_events(list(generate_simple(seed=seed, streams=streams,
                                                  events_per_stream=events, pin_rate=0.03,
                                                  max_pins=2)))  # fmt: skip


def assert_same_log(trace, result, stc: int, ttl: float | None) -> None:
    want = replay_tiers_reference(trace, result, stc, ttl)
    got = replay_tiers(trace, result, stc, ttl)
    for field in LOG_FIELDS:
        a, b = getattr(want, field), getattr(got, field)
        assert a.dtype == b.dtype and np.array_equal(a, b), field
    assert want.counts() == got.counts()


# ------------------------------------------------------------ compiled tier replay
@pytest.mark.parametrize("seed", [0, 1, 2, 3])
@pytest.mark.parametrize("demand_fetch", [False, True])
def test_compiled_tiers_equal_the_python_loop_on_replays(seed, demand_fetch):
    """Move logs of real replays (admit, bypass, evict, fetch, pin), with and without a TTL,
    an STC of 0 tokens (everything to the LTS), a small one (cascades) and a large one."""
    trace = random_trace(seed)
    for policy in (LRU(), SlidingWindow()):
        result = simulate(trace, policy, 600, demand_fetch=demand_fetch, engine="reference")
        for stc in (0, 350, 10**6):
            for ttl in (None, 0.0, 30.0):
                assert_same_log(trace, result, stc, ttl)


def synthetic_result(trace, events, items, kinds) -> SimResult:
    """A move log that no simulator wrote: any kind for any item, in event order."""
    order = np.argsort(np.asarray(events, np.int64), kind="stable")
    z = np.zeros(0, np.int64)
    return SimResult(1, False, "synthetic", "reference", np.zeros(trace.n_references, np.uint8),
                     z, z, z, z, np.asarray(events, np.int64)[order],
                     np.asarray(items, np.int32)[order], np.asarray(kinds, np.int8)[order])  # fmt: skip


TRACE = random_trace(7, streams=2, events=60)


@given(moves=st.lists(st.tuples(st.integers(0, TRACE.n_events - 1),
                                st.integers(0, TRACE.n_items - 1),
                                st.integers(0, len(MOVE_NAMES) - 1)), max_size=120),
       stc=st.integers(0, 2000), ttl=st.one_of(st.none(), st.floats(0, 200)))  # fmt: skip
def test_compiled_tiers_equal_the_python_loop_on_random_move_logs(moves, stc, ttl):
    """Arbitrary move logs, even ones a replay never writes (an eviction of an item already in
    the STC, an admit of one): the kernel keeps the Python state machine's every quirk."""
    events, items, kinds = zip(*moves) if moves else ((), (), ())
    assert_same_log(TRACE, synthetic_result(TRACE, events, items, kinds), stc, ttl)


def test_simulate_reports_tiers_from_the_compiled_replay():
    settings = run_settings([*SMALL, "policy=lru", "budget=512", "tiers.short_term_tokens=300"])
    done, report = pipeline.run(settings)
    want = replay_tiers_reference(done.trace, done.result, 300)
    assert report.sections["tiers"]["moves"] == want.counts()
    finals = np.bincount(want.final_tier + 1, minlength=4)
    assert report.sections["tiers"]["items_at_end"] == {
        "wm": int(finals[1]), "stc": int(finals[2]), "lts": int(finals[3])}  # fmt: skip


# ---------------------------------------------------- compare: no tier bookkeeping
def test_compare_jobs_skip_tiers_and_keep_every_number(monkeypatch):
    """A compare row is simulate's report minus the tiers section: the same numbers."""
    settings = run_settings([*SMALL, "policy=rule", "budget=1024"])
    _, full = pipeline.run(settings)
    calls = []
    monkeypatch.setattr(pipeline, "replay_tiers", lambda *a, **k: calls.append(a))
    _, row = pipeline.run(settings, analyzers=pipeline.ROW_ANALYZERS)
    assert calls == [] and "tiers" not in row.sections and "tiers" in full.sections
    assert row.overall == full.overall and row.streams == full.streams
    assert row.intervals == full.intervals and row.warnings == full.warnings


@pytest.mark.parametrize("extra", [["oracle.enabled=true"], ["retrieval.enabled=true"]])
def test_compare_jobs_leave_out_the_rows_per_stream_and_keep_every_number(extra):
    """A compare job's report (``JOB_ANALYZERS``) is the row analyzers' without a row per
    stream (metrics and oracle bounds): the same overall figures, parts and intervals."""
    settings = run_settings([*SMALL, "policy=rule", "budget=1024", *extra])
    _, full = pipeline.run(settings, analyzers=pipeline.ROW_ANALYZERS)
    _, job = pipeline.run(settings, analyzers=pipeline.JOB_ANALYZERS)
    assert job.streams == {} and len(full.streams) == len(full.stream_names) > 1
    assert job.stream_names == full.stream_names == list(full.streams)
    assert job.overall == full.overall and job.intervals == full.intervals
    assert job.stream_parts.keys() == full.stream_parts.keys()
    for key, (num, den) in job.stream_parts.items():
        want_num, want_den = full.stream_parts[key]
        assert np.array_equal(num, want_num) and (den is None) == (want_den is None)
        assert den is None or np.array_equal(den, want_den)
    oracle = dict(full.sections["oracle"])
    assert oracle.pop("streams", {}) != {} or "oracle.enabled=true" not in extra
    assert job.sections["oracle"] == oracle and job.sections.keys() == full.sections.keys()


# --------------------------------------------------------- oracle.enabled=false
def compare_settings(*overrides: str):
    return resolve(compose_config("compare", [*SMALL, *overrides]))


def test_a_disabled_oracle_leaves_the_oracle_policy_out_of_the_default_list():
    names = commands.compared_policies(compare_settings())
    assert "oracle" in registered_policies() and "oracle" not in names
    assert names == [n for n in registered_policies() if n != "oracle"]
    assert "oracle" in commands.oracle_note(compare_settings())
    on = compare_settings("oracle.enabled=true")
    assert commands.compared_policies(on) == registered_policies()
    assert commands.oracle_note(on) is None
    assert commands.oracle_note(compare_settings("policies=[lru]")) is None


@pytest.mark.parametrize("override", ["policies=[lru,oracle]", "reference=oracle"])
def test_naming_the_oracle_policy_with_the_oracle_off_is_an_error(override):
    with pytest.raises(SettingsError, match="oracle.enabled=false turns the oracle off"):
        commands.compared_policies(compare_settings(override))


def test_recommend_with_the_oracle_off_and_nothing_excluded_drops_it_quietly():
    cfg = compose_config("recommend", [*SMALL, "target=0.5", "exclude=[]"])
    assert "oracle" not in commands.candidates(resolve(cfg)).policies


def test_compare_json_names_the_streams_of_its_parts_and_the_verdict_has_intervals(tmp_path):
    """Without rows per stream, a compare job's report still names the streams its parts are
    in (compare.json's stream_parts, the verdict's count of streams)."""
    from memlens.config.store import DATA_DIR
    from memlens.trace.io import load_trace

    trace = DATA_DIR / "default" / "agent-small.jsonl.gz"
    run = tmp_path / "run"
    proc = memlens("compare", f"trace={trace}", *SMALL, "policies=[lru,window]",
                   "budgets=[512]", "n_jobs=1", f"hydra.run.dir={run}", cwd=tmp_path)  # fmt: skip
    names = list(load_trace(str(trace)).stream_names)
    rows = json.loads((run / "compare.json").read_text())
    assert len(names) >= 5 and [r["stream_parts"]["streams"] for r in rows] == [names, names]
    assert "n<5" not in proc.stdout and "too few streams" not in proc.stdout


@pytest.mark.slow  # every registered policy through the CLI: ~20 s on a busy machine
def test_compare_cli_notes_the_left_out_oracle_and_solves_nothing(tmp_path, small_trace):  # noqa: F811
    run = tmp_path / "run"
    proc = memlens("compare", f"trace={small_trace}", *SMALL, "budgets=[512]", "n_jobs=1",
                   f"hydra.run.dir={run}", cwd=tmp_path)  # fmt: skip
    assert "note: oracle.enabled=false: left out oracle" in proc.stderr
    rows = json.loads((run / "compare.json").read_text())
    assert {r["policy"] for r in rows} == set(registered_policies()) - {"oracle"}
    assert all(r["oracle_upper"] is None and r.get("oracle_solve_s") is None for r in rows)


def test_compare_cli_refuses_the_oracle_policy_with_the_oracle_off(tmp_path, small_trace):  # noqa: F811
    bad = memlens("compare", f"trace={small_trace}", *SMALL, "policies=[oracle]",
                  f"hydra.run.dir={tmp_path / 'bad'}", cwd=tmp_path, check=False)  # fmt: skip
    assert bad.returncode == 2 and bad.stderr.startswith("error: policies lists oracle")
    assert len(bad.stderr.strip().splitlines()) == 1


# ------------------------------------------------ per-trace metric inputs, once
def test_metric_inputs_are_computed_once_per_trace_and_settings(monkeypatch):
    settings = run_settings([*SMALL, "policy=lru", "budget=700"])
    trace = pipeline.load_trace(settings)
    trace.__dict__.pop(metrics._PER_TRACE_KEY, None)
    result = pipeline.replay(settings, trace).result
    calls = []
    real = metrics.annotated_values
    monkeypatch.setattr(metrics, "annotated_values", lambda t: calls.append(1) or real(t))
    first = metrics.compute_metrics(trace, result, 3.0, costs=settings.costs)
    again = metrics.compute_metrics(trace, result, 3.0, costs=settings.costs)
    assert len(calls) == 1 and first["overall"] == again["overall"]
    other = replace(settings.costs, miss_penalty_usd={"tool_result": 0.5})
    dearer = metrics.compute_metrics(trace, result, 3.0, costs=CostsConfig(**vars(other)))
    assert len(calls) == 2  # other costs: other prices
    assert dearer["overall"]["miss_cost_usd"] > first["overall"]["miss_cost_usd"]
    usd, _, _ = metrics.reference_prices(trace, 3.0, settings.costs)
    with pytest.raises(ValueError):
        usd[0] = 1.0  # shared between replays: read-only


def test_stream_index_selects_what_the_masks_select():
    trace = random_trace(5, streams=4)
    index = metrics.stream_index(trace)
    for s in range(trace.n_streams):
        assert np.array_equal(index.requests[s], np.flatnonzero(trace.req_stream == s))
        ref_mask = (trace.req_stream == s)[trace.need_request]
        assert np.array_equal(index.references[s], np.flatnonzero(ref_mask))
        assert index.events[s] == int((trace.ev_stream == s).sum())


# ------------------------------------------------------------ MLflow batches
@pytest.mark.parametrize(("n_params", "n_metrics", "calls"),
                         [(0, 0, 0), (12, 60, 1), (100, 900, 1), (101, 10, 2), (150, 1900, 3)])  # fmt: skip
def test_values_go_in_as_few_batches_as_mlflows_limits_allow(n_params, n_metrics, calls):
    params, values = list(range(n_params)), list(range(n_metrics))
    got = list(tracking.batches(params, values))
    assert len(got) == calls
    assert [x for p, _ in got for x in p] == params and [x for _, m in got for x in m] == values
    for p, m in got:
        assert len(p) <= 100 and len(m) <= 1000 and len(p) + len(m) <= 1000


def test_a_run_logs_its_params_and_metrics_in_one_call():
    class Client:
        def __init__(self):
            self.calls = []

        def log_batch(self, run_id, metrics=(), params=(), tags=()):
            self.calls.append((run_id, len(metrics), len(params)))

    client = Client()
    run = tracking.Tracked(tracking.MlflowConfig(), client, "r1")
    tracking._log(run, {"a": 1, "b": {"c": None}}, {"hit_rate": 0.5, "evictions": 3.0}, [], None)
    assert client.calls == [("r1", 2, 2)]


# ------------------------------------------------ the benchmark and the figure
def bench_modules():
    root = Path(__file__).resolve().parents[2]
    for sub in ("experiments", "benchmarks"):
        if str(root / sub) not in sys.path:
            sys.path.insert(0, str(root / sub))
    import bench_compare
    import compare_scaling

    return bench_compare, compare_scaling


ROWS = [{"events": e, "oracle": o, "overrides": "", "wall_s": w, "peak_rss_mb": m, "jobs": 40,
         "load_avg_1m": 1.0} for e, o, w, m in [(10**4, "off", 20.0, 300.0),
                                                 (10**5, "off", 60.0, 500.0),
                                                 (10**4, "on", 30.0, 320.0)]]  # fmt: skip


def test_benchmark_rows_merge_by_size_oracle_and_overrides():
    bench, _ = bench_modules()
    again = {**ROWS[0], "wall_s": 10.0}
    other = {**ROWS[0], "overrides": "n_jobs=1"}
    rows = bench.merged(ROWS, [again, other])
    assert len(rows) == 4 and again in rows and other in rows and ROWS[0] not in rows
    assert [r["events"] for r in rows] == sorted(r["events"] for r in rows)
    table = bench.markdown(rows, "python benchmarks/bench_compare.py")
    assert table.count("\n| 10,000 |") == 3 and "| 100,000 | off | - | 40 | 60.0 | 1.50 |" in table


def test_the_scaling_figure_draws_both_oracle_modes():
    _, exp = bench_modules()
    fig = exp.draw(ROWS)
    left, right = fig.axes
    assert [len(ax.lines) for ax in (left, right)] == [2, 2]
    assert left.get_xscale() == right.get_yscale() == "log"
    ((_, header, body),) = exp.tables(ROWS)
    assert len(body) == 3 and all(len(r) == len(header) for r in body)
    assert body[0][:2] == ["10,000", "off"] and body[0][4] == "0.50"


def test_simulate_refuses_the_oracle_policy_with_the_oracle_off():
    cfg = compose_config("simulate", [*SMALL, "policy=oracle"])
    with pytest.raises(SettingsError, match="policy=oracle replays the oracle's plan"):
        commands.check_simulate(cfg)


def test_a_new_sqlite_store_is_in_write_ahead_log_mode(tmp_path):
    import sqlite3

    from memlens.runs import mlflow_store

    db = tmp_path / "m.db"
    cfg = tracking.MlflowConfig(tracking_uri=f"sqlite:///{db}", experiment="wal",
                                artifact_location=str(tmp_path / "a"))  # fmt: skip
    with tracking.mlflow_run(cfg, run_name="r") as run:
        tracking.log_run(run, {"p": 1}, {"hit_rate": 0.5})
    con = sqlite3.connect(db)
    assert con.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    con.close()
    assert mlflow_store.use_wal(db)  # idempotent
    assert not mlflow_store.use_wal(tmp_path)  # not a database: left alone, no exception
