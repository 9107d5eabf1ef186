"""``shards=N backend=ray``: shard tasks on a Ray started on 127.0.0.1 for the run.

Without ``ray_address`` (and without ``$RAY_ADDRESS``) the run starts its own Ray on
127.0.0.1 with a small object store and stops it at the end; these tests use that.  The
expectation is the single-process run of the same trace (``memlens simulate`` / ``compare``
without shards).
"""

from __future__ import annotations

import json
import os
import signal
import threading
import time
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from helpers import memlens

from memlens.analyze.registry import of_kind
from memlens.trace.generate import generate_simple
from memlens.trace.io import write_trace

pytest.importorskip("ray")
psutil = pytest.importorskip("psutil")


@pytest.fixture(scope="module")
def trace(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("ray_shards") / "t.jsonl"
    write_trace(path, generate_simple(seed=9, streams=6, events_per_stream=400))
    return path


def _no_timing(doc: dict) -> dict:
    doc = {k: v for k, v in doc.items() if k not in ("timing", "git_commit")}
    return doc


@pytest.mark.slow  # starts Ray twice and three memlens processes: about two minutes
def test_simulate_and_compare_on_ray_equal_the_single_process_run(trace, tmp_path):
    run = ("policy=oracle", "budget=900", "mlflow.enabled=false")
    memlens("simulate", f"trace={trace}", *run, f"hydra.run.dir={tmp_path / 'one'}", cwd=tmp_path)
    memlens("simulate", f"trace={trace}", *run, "shards=4", "backend=ray",
            f"hydra.run.dir={tmp_path / 'ray'}", cwd=tmp_path)  # fmt: skip
    one, ray = tmp_path / "one", tmp_path / "ray"
    assert _no_timing(json.loads((one / "metrics.json").read_text())) == _no_timing(
        json.loads((ray / "metrics.json").read_text()))  # fmt: skip
    for name in ("per_request.parquet", "events.parquet"):
        assert pq.read_table(one / name).to_pylist() == pq.read_table(ray / name).to_pylist()
    sweep = ("policies=[lru,window,rule]", "budgets=[600,1200]", "reference=lru",
             "mlflow.enabled=false", "resume=false")  # fmt: skip
    memlens("compare", f"trace={trace}", *sweep, f"hydra.run.dir={tmp_path / 'c1'}", cwd=tmp_path)
    memlens("compare", f"trace={trace}", *sweep, "shards=7", "backend=ray",
            f"hydra.run.dir={tmp_path / 'c2'}", cwd=tmp_path)  # fmt: skip
    timing = set(of_kind("timing"))
    rows = [[{k: v for k, v in row.items() if k not in timing}
             for row in json.loads((tmp_path / c / "compare.json").read_text())]
            for c in ("c1", "c2")]  # fmt: skip
    assert rows[0] == rows[1] and len(rows[0]) == 6


def _killer(seen: list, stop: threading.Event) -> None:
    """SIGKILL the first Ray worker seen running a shard's replay (once)."""
    while not stop.is_set() and not seen:
        for proc in psutil.process_iter(["pid", "cmdline"]):
            if "ray::replay_shard" in " ".join(proc.info["cmdline"] or []):
                os.kill(proc.info["pid"], signal.SIGKILL)
                seen.append(proc.info["pid"])
                return
        time.sleep(0.02)


@pytest.mark.slow  # a Ray run with a worker killed and retried: about a minute
def test_a_killed_worker_is_retried_and_the_result_is_the_same(trace, tmp_path):
    from memlens.config.compose import run_settings
    from memlens.runs.pipeline import run
    from memlens.runs.sharded import simulate_sharded

    s = run_settings([f"trace={trace}", "policy=lru", "budget=900", "shards=3", "backend=ray",
                      "mlflow.enabled=false"])  # fmt: skip
    _, local = run(s)
    killed, stop = [], threading.Event()
    thread = threading.Thread(target=_killer, args=(killed, stop), daemon=True)
    thread.start()
    out = tmp_path / "out"
    out.mkdir()
    try:
        report = simulate_sharded(s, out, "")
    finally:
        stop.set()
        thread.join()
    assert killed, "no worker was seen running a shard's replay"
    assert _no_timing(report.to_dict()) == _no_timing(local.to_dict())


@pytest.mark.slow  # two Ray runs over a 480,000-event trace: a few minutes
def test_a_workers_memory_is_bounded_by_its_shard(tmp_path):
    """The same trace in 1 and in 6 shards: what a task adds to its worker's memory at its
    peak (parse, replay, its Parquet parts) shrinks with its shard, and the driver, which never
    parses the trace, stays below the worker that held all of it.  A task also grows by a
    part that does not depend on its shard (about 110 MB here: the kernels and tables it
    loads), so the trace is large enough for the shard's own part to dominate (at 240,000
    events the ratio was 0.54)."""
    from memlens.config.compose import run_settings
    from memlens.runs.sharded import simulate_sharded

    path = tmp_path / "big.jsonl"
    write_trace(path, generate_simple(seed=4, streams=12, events_per_stream=40_000))
    grown = {}
    for n in (1, 6):
        s = run_settings([f"trace={path}", "policy=lru", "budget=2048", f"shards={n}",
                          "backend=ray", "mlflow.enabled=false", "oracle.enabled=false"])  # fmt: skip
        out, stats = tmp_path / f"out{n}", {}
        out.mkdir()
        simulate_sharded(s, out, "", stats)
        tasks = stats["prepare_memory"] + stats["replay_memory"]
        grown[n] = max(m["rss_peak_kib"] - m["rss_start_kib"] for m in tasks)
    assert grown[6] < 0.5 * grown[1], grown
