"""Every stream's metrics at once (``by_stream``) equal the per-stream groups' (issue 34).

The expectation is the per-stream loop (``memlens.analyze.metrics._stream_by_stream``): one
``RequestGroup`` per stream through each metric's ``compute`` and ``parts``, the definition
the vectorised columns stand in for.  Counts and ratios of counts are equal exactly; float
sums (miss costs, latencies, values) are running sums instead of pairwise ones, so they agree
to a relative 1e-12.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from memlens.datasets.archetypes import generate

import memlens.analyze.metrics as metrics
from memlens.analyze.costs import CostsConfig
from memlens.config.compose import make_policy
from memlens.config.store import DATA_DIR
from memlens.simulator import simulate
from memlens.trace.io import load_trace, write_trace


def _close(a, b) -> bool:
    if a is None or b is None or isinstance(a, (int, str)) or isinstance(b, (int, str)):
        return a == b and type(a) is type(b)
    return math.isclose(a, b, rel_tol=1e-12, abs_tol=1e-15)


def _both(trace, policy, budget):
    result = simulate(trace, make_policy(policy), budget=budget, demand_fetch=False, seed=0)
    costs = CostsConfig()
    hits = metrics.request_hits(trace, result)
    refs = metrics.needed_references(trace, result, 3.0, costs)
    p95 = metrics.grouped_percentile(result.context_tokens, metrics.stream_index(trace).requests,
                                     95)  # fmt: skip
    fast = metrics._streams_at_once(trace, result, hits, refs, p95, 3.0)
    slow = metrics._stream_by_stream(trace, result, hits, refs, p95, 3.0, None, costs)
    return fast, slow


@pytest.fixture(scope="module")
def traces(tmp_path_factory):
    path = tmp_path_factory.mktemp("columns") / "agent.jsonl"
    write_trace(path, generate("agent", streams=30, events_per_stream=50, seed=3),
                header={"generator": "agent"})  # fmt: skip
    return {"agent-small": load_trace(str(DATA_DIR / "default" / "agent-small.jsonl.gz")),
            "generated": load_trace(str(path))}  # fmt: skip


@pytest.mark.parametrize("name", ["agent-small", "generated"])
@pytest.mark.parametrize("policy,budget", [("lru", 256), ("rule", 1024), ("window", 4096)])
def test_every_stream_equals_its_own_group(traces, name, policy, budget):
    (fast_streams, fast_parts), (slow_streams, slow_parts) = _both(traces[name], policy, budget)
    assert list(fast_streams) == list(slow_streams)
    for stream, want in slow_streams.items():
        got = fast_streams[stream]
        assert list(got) == list(want), stream
        bad = {k: (got[k], want[k]) for k in want if not _close(got[k], want[k])}
        assert not bad, (stream, bad)
    assert list(fast_parts) == list(slow_parts)
    for key, (num, den) in slow_parts.items():
        np.testing.assert_allclose(fast_parts[key][0], num, rtol=1e-12, atol=1e-15)
        assert (fast_parts[key][1] is None) == (den is None), key
        if den is not None:
            np.testing.assert_allclose(fast_parts[key][1], den, rtol=1e-12, atol=1e-15)


def test_the_loop_is_what_a_run_with_retrieval_takes(traces, monkeypatch):
    """With retrieval off every core metric has columns, so a run takes them; the loop stays
    the path for a metric declared without ``by_stream``."""
    trace = traces["generated"]
    result = simulate(trace, make_policy("lru"), budget=512, demand_fetch=False, seed=0)
    calls = []
    real = metrics._stream_by_stream
    monkeypatch.setattr(metrics, "_stream_by_stream", lambda *a: calls.append(1) or real(*a))
    metrics.compute_metrics(trace, result)
    assert calls == []
    hit_rate = metrics.declared()["hit_rate"]
    import dataclasses

    monkeypatch.setitem(metrics.declared(), "hit_rate",
                        dataclasses.replace(hit_rate, by_stream=None))  # fmt: skip
    metrics.compute_metrics(trace, result)
    assert calls == [1]
