"""A compare whose workers replay the trace (oracle off) checks it in the main process from its
cache entry's header alone (memlens.runs.pipeline.trace_facts): the same hash and sizes as the
parsed trace, no array read; a damaged entry is still found and rebuilt, by the workers, and
the compare's rows are those of a clean run."""

from __future__ import annotations

import json

import numpy as np
import pytest
from helpers import memlens

from memlens.checker import random_events
from memlens.config.compose import run_settings
from memlens.runs import pipeline
from memlens.trace.cache import CachedFacts, cached_facts, entry_path, load_trace_cached
from memlens.trace.io import write_trace


@pytest.fixture
def trace_file(tmp_path):
    path = tmp_path / "t.jsonl.gz"
    write_trace(path, random_events(np.random.default_rng(7), n_events=400))
    return path


def test_the_facts_of_an_entry_are_those_of_the_parsed_trace(tmp_path, trace_file):
    cache = tmp_path / "cache"
    assert cached_facts(trace_file, cache) is None  # no entry yet
    trace = load_trace_cached(trace_file, directory=cache)
    facts = cached_facts(trace_file, cache)
    assert facts == CachedFacts(trace.sha256, trace.n_events, trace.n_requests)
    entry_path(trace_file, cache).write_bytes(b"garbage")
    assert cached_facts(trace_file, cache) is None


def test_the_main_process_reads_no_array_of_a_cached_trace(tmp_path, trace_file, monkeypatch):
    monkeypatch.setenv("MEMLENS_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(pipeline, "_TRACES", {})
    settings = run_settings([f"trace={trace_file}"])
    parsed = pipeline.trace_facts(settings)  # no entry: parsed (and the entry written)
    assert parsed is pipeline.load_trace(settings)
    monkeypatch.setattr(pipeline, "_TRACES", {})

    def refuse(*args, **kwargs):
        raise AssertionError("the arrays were read")

    monkeypatch.setattr(pipeline, "load_trace_cached", refuse)
    facts = pipeline.trace_facts(settings)
    assert facts == CachedFacts(parsed.sha256, parsed.n_events, parsed.n_requests)


def test_a_cached_trace_without_requests_is_refused_as_a_parsed_one(tmp_path, trace_file,
                                                                    monkeypatch):  # fmt: skip
    monkeypatch.setattr(pipeline, "_TRACES", {})
    monkeypatch.setattr(pipeline, "cached_facts", lambda path: CachedFacts("x", 5, 0))
    with pytest.raises(pipeline.TraceError, match="no requests in the trace"):
        pipeline.trace_facts(run_settings([f"trace={trace_file}"]))


@pytest.mark.slow  # two compares with two workers each: 20 s
def test_a_compare_over_a_damaged_entry_gives_the_rows_of_a_clean_one(tmp_path, trace_file,
                                                                      monkeypatch):  # fmt: skip
    from test_cache_safety import middle_of_largest_member

    from memlens._util.kernelcache import kernel_cache_dir

    monkeypatch.setenv("MEMLENS_KERNEL_CACHE", str(kernel_cache_dir()))  # compiled already
    monkeypatch.setenv("MEMLENS_CACHE", str(tmp_path / "cache"))
    args = [f"trace={trace_file}", "policies=[lru,rule]", "budgets=[256]", "n_jobs=2",
            "parallel_min_events=0", "oracle.enabled=false", "resume=false",
            "mlflow.enabled=false"]  # fmt: skip
    memlens("compare", *args, f"hydra.run.dir={tmp_path / 'clean'}", cwd=tmp_path)
    entry = entry_path(trace_file, tmp_path / "cache" / "traces")
    blob = entry.read_bytes()
    at = middle_of_largest_member(blob)
    entry.write_bytes(blob[:at] + bytes([blob[at] ^ 0x55]) + blob[at + 1 :])
    proc = memlens("compare", *args, f"hydra.run.dir={tmp_path / 'damaged'}", cwd=tmp_path)
    assert "discarded corrupt cache entry" in proc.stderr

    def rows(run: str) -> list:
        out = json.loads((tmp_path / run / "compare.json").read_text())
        return [{k: v for k, v in r.items() if k not in ("timing", "wall_s", "events_per_s")
                 and not k.endswith("_s")} for r in out]  # fmt: skip

    assert rows("damaged") == rows("clean")
