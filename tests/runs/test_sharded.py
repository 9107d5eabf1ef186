"""A trace split by stream (``shards=N``), replayed a shard at a time and merged: the same run.

The expectation is independent of the merge: the single-process pipeline's own files
(``memlens.runs.pipeline.run`` + ``memlens.runs.writers.write_run``) on the same trace, compared
as parsed JSON and as Parquet rows and schemas.  These run the shards in this process
(``backend=loky``); ``test_sharded_ray.py`` runs them as Ray tasks.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest
from hypothesis import given
from hypothesis import strategies as st

from memlens.analyze.merge import percentile_of_counts
from memlens.config.compose import run_settings
from memlens.config.store import SettingsError
from memlens.runs.pipeline import forget_traces, run
from memlens.runs.sharded import ray_session, simulate_sharded
from memlens.runs.writers import write_run
from memlens.trace.generate import generate_simple
from memlens.trace.io import write_trace
from memlens.trace.lines import TraceError
from memlens.trace.shard import ShardSet, input_files, resolved_shard, shard_of, shard_trace

PARQUET = ("per_request.parquet", "events.parquet", "moves.parquet")


@pytest.fixture(scope="module")
def trace(tmp_path_factory) -> Path:
    """7 streams of 120 events, with pins and unpins that name no stream (broadcast lines)."""
    path = tmp_path_factory.mktemp("sharded") / "t.jsonl"
    write_trace(path, generate_simple(seed=5, streams=7, events_per_stream=120))
    return path


def settings_for(trace: Path | str, policy: str, shards: int, *extra: str):
    return run_settings([f"trace={trace}", f"policy={policy}", "budget=700", f"shards={shards}",
                         "mlflow.enabled=false", "output.moves=true", *extra])  # fmt: skip


def local_files(settings, folder: Path) -> Path:
    """The single-process run's files (the independent expectation)."""
    forget_traces()
    done, report = run(settings, record_values=settings.events.enabled)
    folder.mkdir()
    write_run(folder, done, report, "x: 1\n")
    return folder


def assert_same_run(local: Path, sharded: Path) -> None:
    a = json.loads((local / "metrics.json").read_text())
    b = json.loads((sharded / "metrics.json").read_text())
    for key in ("timing", "git_commit"):  # wall times differ between any two runs
        a.pop(key), b.pop(key)
    assert a == b
    for name in PARQUET:
        ta, tb = pq.read_table(local / name), pq.read_table(sharded / name)
        assert ta.schema == tb.schema, name
        assert ta.to_pylist() == tb.to_pylist(), name


def sharded_files(settings, folder: Path) -> Path:
    folder.mkdir()
    simulate_sharded(settings, folder, "x: 1\n")
    return folder


def test_sharded_run_equals_the_single_process_run(trace, tmp_path):
    """The default run's check of split and merge: 16 shards for 7 streams (so some hold
    none), every file compared; the oracle off to keep it short (the slow tests cover it)."""
    s = settings_for(trace, "lru", 16, "oracle.enabled=false")
    assert_same_run(local_files(s, tmp_path / "local"), sharded_files(s, tmp_path / "shard"))


@pytest.mark.slow  # five policies at three shard counts: about a minute
@pytest.mark.parametrize("policy", ["window", "lru", "rule", "learned", "oracle"])
def test_every_policy_at_several_shard_counts(trace, tmp_path, policy):
    local = local_files(settings_for(trace, policy, 1), tmp_path / "local")
    for n in (1, 2, 5, 16):
        assert_same_run(local, sharded_files(settings_for(trace, policy, n), tmp_path / f"s{n}"))


@pytest.mark.slow  # two sharded runs and a local one with the oracle: over 10 s
def test_a_stream_spread_over_several_files_is_the_concatenated_trace(trace, tmp_path):
    """Three files, each a third of the lines (so every stream spans all three) behind its own
    header, read as one trace from a directory and from a glob: the run of the one
    concatenated file."""
    body = trace.read_bytes().splitlines(keepends=True)
    header = b'{"event": "header", "version": 1}\n'  # each file has one; only the first counts
    parts = tmp_path / "parts"
    parts.mkdir()
    third = len(body) // 3
    for i, chunk in enumerate((body[:third], body[third : 2 * third], body[2 * third :])):
        (parts / f"p{i}.jsonl").write_bytes(header + b"".join(chunk))
    assert input_files(str(parts)) == input_files(str(parts / "p*.jsonl"))
    local = local_files(settings_for(trace, "rule", 1), tmp_path / "local")
    for spec in (str(parts), str(parts / "p*.jsonl")):
        s = settings_for(spec, "rule", 4)
        out = sharded_files(s, tmp_path / f"s{len(list(tmp_path.iterdir()))}")
        doc = json.loads((out / "metrics.json").read_text())
        assert doc["trace"]["events"] == len(body)
        doc["trace"] = json.loads((local / "metrics.json").read_text())["trace"]  # its path
        (out / "metrics.json").write_text(json.dumps(doc))
        assert_same_run(local, out)


def test_every_event_lands_in_exactly_one_shard(trace):
    shards = shard_trace(str(trace), 4)
    kept = []
    for k in range(4):
        resolved_shard(shards, k)
        kept.append(shards.sidecar(k, "events"))
    every = np.sort(np.concatenate(kept))
    assert every.tolist() == list(range(shards.n_events))
    streams = [name for info in shards.meta["shards"] for name, _ in info["streams"]]
    assert sorted(streams) == sorted(f"s{i}" for i in range(7))
    for k, info in enumerate(shards.meta["shards"]):
        assert all(shard_of(name, 4) == k for name, _ in info["streams"])


def test_the_shard_of_a_stream_does_not_depend_on_the_process():
    """Not Python's ``hash()`` (salted per process): the same shard under any hash seed."""
    code = (
        "from memlens.trace.shard import shard_of; print([shard_of(f's{i}', 7) for i in range(50)])"
    )
    seen = {subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                           env={"PYTHONHASHSEED": seed, "PATH": "/usr/bin"}, check=True).stdout
            for seed in ("1", "2")}  # fmt: skip
    assert len(seen) == 1
    assert json.loads(seen.pop()) == [shard_of(f"s{i}", 7) for i in range(50)]


def _bad_trace(tmp_path: Path, line: int, text: str, name: str = "bad.jsonl") -> Path:
    good = tmp_path / "good.jsonl"
    write_trace(good, generate_simple(seed=2, streams=4, events_per_stream=30))
    rows = good.read_text().splitlines()
    rows[line - 1] = text
    path = tmp_path / name
    path.write_text("\n".join(rows) + "\n")
    return path


def test_a_malformed_line_is_named_while_splitting(tmp_path):
    path = _bad_trace(tmp_path, 9, '{"event": "write", "id": ')
    with pytest.raises(TraceError) as err:
        shard_trace(str(path), 3)
    assert (err.value.path, err.value.line) == (str(path), 9)


def test_a_bad_field_is_named_by_the_input_line_before_any_replay(tmp_path, monkeypatch):
    """Found only when the shard is parsed: the error names the input's file and line, not
    the shard's, and no shard was replayed."""
    import memlens.runs.sharded as sharded

    path = _bad_trace(tmp_path, 40, '{"event": "write", "id": "zz", "stream": "s2", '
                                    '"type": "user_input", "tokens": -3}')  # fmt: skip
    replayed = []
    monkeypatch.setattr(sharded, "replay_shard", lambda task: replayed.append(task))
    out = tmp_path / "out"
    out.mkdir()
    with pytest.raises(TraceError) as err:
        simulate_sharded(settings_for(path, "lru", 3), out, "")
    assert (err.value.path, err.value.line, err.value.field) == (str(path), 40, "tokens")
    assert replayed == []


def test_a_duplicate_id_in_another_shard_is_found(tmp_path):
    """``s0-m0`` written again in a stream of another shard: a per-shard parse cannot see it."""
    other = next(f"x{i}" for i in range(100) if shard_of(f"x{i}", 3) != shard_of("s0", 3))
    path = _bad_trace(tmp_path, 30, json.dumps({"event": "write", "id": "s0-m0", "stream": other,
                                                "type": "user_input", "tokens": 5}))  # fmt: skip
    with pytest.raises(TraceError) as err:
        shard_trace(str(path), 3)
    assert (err.value.line, err.value.field) == (30, "id")
    assert "duplicate id" in err.value.message


def test_a_pin_of_an_unknown_item_is_named(tmp_path):
    path = _bad_trace(tmp_path, 50, '{"event": "pin", "target": "nowhere"}')
    out = tmp_path / "out"
    out.mkdir()
    with pytest.raises(TraceError) as err:
        simulate_sharded(settings_for(path, "lru", 3), out, "")
    assert (err.value.line, err.value.field) == (50, "target")
    assert '"nowhere"' in err.value.message


@given(st.lists(st.integers(0, 50), min_size=1, max_size=60), st.floats(0, 100))
def test_percentile_of_counts_is_numpys_percentile(values, q):
    x = np.asarray(values, dtype=np.int64)
    distinct, counts = np.unique(x, return_counts=True)
    assert percentile_of_counts(distinct, counts, q) == float(np.percentile(x, q))


def test_without_ray_backend_ray_is_one_clear_error(monkeypatch):
    monkeypatch.setitem(sys.modules, "ray", None)  # ``import ray`` raises ImportError
    with pytest.raises(SettingsError, match=r"pip install 'memlens\[ray\]'"):
        with ray_session("auto"):
            pass
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name == "ray" else real(name, *a))  # fmt: skip
    with pytest.raises(ValueError, match=r"backend=ray needs Ray.*memlens\[ray\]"):
        run_settings(["backend=ray", "shards=2"])


def test_a_metric_without_a_merge_rule_is_refused(monkeypatch, trace):
    from memlens.analyze.registry import METRICS, Metric

    monkeypatch.setitem(METRICS, "median_tokens", Metric("median_tokens", "x", None,
                                                         compute=lambda g: 0))  # fmt: skip
    with pytest.raises(SettingsError, match="median_tokens"):
        simulate_sharded(settings_for(trace, "lru", 2), Path("/nonexistent"), "")


def test_the_shards_are_made_once(trace):
    first = shard_trace(str(trace), 5)
    stamp = (first.folder / "meta.json").stat().st_mtime_ns
    again = shard_trace(str(trace), 5)
    assert isinstance(again, ShardSet) and again.folder == first.folder
    assert (again.folder / "meta.json").stat().st_mtime_ns == stamp


def test_a_policy_reading_every_stream_at_once_is_refused(trace, tmp_path):
    """generative_agents' TF-IDF weights come from the whole trace: a shard would differ."""
    with pytest.raises(SettingsError, match="generative_agents"):
        simulate_sharded(settings_for(trace, "generative_agents", 2), tmp_path, "")


def test_above_the_row_cap_no_report_html_and_a_note(trace, tmp_path, monkeypatch, capsys):
    import memlens.runs.sharded as sharded

    monkeypatch.setattr(sharded, "REPORT_MAX_ROWS", 10)
    out = sharded_files(settings_for(trace, "lru", 2, "oracle.enabled=false"), tmp_path / "o")
    assert not (out / "report.html").exists() and (out / "events.parquet").is_file()
    assert "no report.html" in capsys.readouterr().err


def test_where_a_job_runs_is_not_part_of_its_resume_key(trace):
    from memlens.runs.resume import job_key

    keys = {job_key(settings_for(trace, "lru", n, f"backend={b}"), "sha")
            for n, b in ((0, "loky"), (4, "loky"), (8, "ray"))}  # fmt: skip
    assert len(keys) == 1
    assert job_key(settings_for(trace, "lru", 0, "budget=701"), "sha") not in keys


@pytest.mark.slow  # a compare sweep twice (six jobs each, the oracle on): about 10 s
def test_a_sharded_compare_sweep_gives_the_sweeps_reports(trace):
    """``memlens.runs.sharded.execute_sharded`` against the sweep's own ``execute``, job by job
    (reports with their intervals), in this process."""
    from memlens.cli.replay import compare_jobs
    from memlens.config.compose import compose_config
    from memlens.config.schema import resolve
    from memlens.runs.sharded import execute_sharded
    from memlens.runs.sweep import execute, plan
    from memlens.trace.shard import shard_trace as split

    def sweep(shards: int):
        s = resolve(compose_config("compare", [f"trace={trace}", "policies=[lru,rule,oracle]",
                                               "budgets=[500,900]", "mlflow.enabled=false",
                                               "n_jobs=1", f"shards={shards}"]))  # fmt: skip
        specs = plan(s, list(compare_jobs(s)), {str(trace): split(str(trace), 5).sha256})
        done = execute_sharded(s, specs, resumable=False) if shards else execute(
            s, specs, resumable=False)  # fmt: skip
        return [{k: v for k, v in o.report.to_dict().items() if k not in ("timing", "git_commit")}
                for o in done.outcomes]  # fmt: skip

    forget_traces()
    one, sharded = sweep(0), sweep(5)
    assert len(one) == 6 and one == sharded


@pytest.mark.slow  # writes and splits traces of 60,000 and 240,000 events: about 30 s
def test_the_split_holds_no_more_for_a_longer_trace(tmp_path):
    """Python memory at the split's peak (tracemalloc) for the same 40 streams, four times
    the events: the columns are on disk, so the peak grows by far less than four times."""
    import tracemalloc

    peaks = []
    for per_stream in (1_500, 6_000):
        path = tmp_path / f"t{per_stream}.jsonl"
        write_trace(path, generate_simple(seed=1, streams=40, events_per_stream=per_stream))
        tracemalloc.start()
        shard_trace(str(path), 4)
        peaks.append(tracemalloc.get_traced_memory()[1])
        tracemalloc.stop()
    assert peaks[1] < 1.5 * peaks[0], peaks
