"""Grouped percentiles equal ``np.percentile`` of each group, bit for bit (issue 34)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from memlens.analyze.quantiles import grouped_percentile


def _groups(sizes: list[int], rng) -> list[np.ndarray]:
    perm = rng.permutation(sum(sizes))  # groups interleaved, as a stream's requests are
    bounds = np.concatenate([[0], np.cumsum(sizes)])
    return [np.sort(perm[bounds[k] : bounds[k + 1]]) for k in range(len(sizes))]


@given(st.lists(st.integers(0, 40), min_size=1, max_size=30), st.integers(0, 2**31),
       st.sampled_from([5.0, 50.0, 95.0, 99.0, 100.0, 0.0]), st.booleans())  # fmt: skip
def test_equals_numpy_for_every_group(sizes, seed, q, floats):
    rng = np.random.default_rng(seed)
    n = sum(sizes)
    values = rng.normal(1e3, 300, n) if floats else rng.integers(0, 5000, n).astype(np.int64)
    rows = _groups(sizes, rng)
    got = grouped_percentile(values, rows, q)
    want = [float(np.percentile(values[r], q)) if r.size else None for r in rows]
    assert got == want  # exact, not approximate


def test_hand_computed_case():
    # [1, 2, 3, 4]: virtual index 3 * 0.95 = 2.85, so 3 + 0.85 * (4 - 3) = 3.85; [7]: 7
    values = np.asarray([4, 7, 1, 3, 2], dtype=np.int64)
    got = grouped_percentile(values, [np.asarray([0, 2, 3, 4]), np.asarray([1]),
                                      np.asarray([], dtype=np.int64)], 95)  # fmt: skip
    assert got == [pytest.approx(3.85), 7.0, None]


def test_run_metrics_unchanged_by_the_grouped_percentiles(monkeypatch):
    # every overall metric and per-stream percentile equal to those of one np.percentile per stream
    import memlens.analyze.metrics as metrics
    from memlens.config.compose import make_policy
    from memlens.config.store import DATA_DIR
    from memlens.simulator import simulate
    from memlens.trace.io import load_trace

    trace = load_trace(str(DATA_DIR / "default" / "agent-small.jsonl.gz"))
    result = simulate(trace, make_policy("lru"), budget=1024, demand_fetch=False, seed=0)
    fast = metrics.compute_metrics(trace, result)
    monkeypatch.setattr(metrics, "grouped_percentile", lambda v, rows, q: [None] * len(rows))
    from memlens.analyze.costs import CostsConfig

    # the per-stream loop, which computes np.percentile where it is given None
    monkeypatch.setattr(metrics, "_streams_at_once", lambda t, r, h, refs, p95, price, rows:
                        metrics._stream_by_stream(t, r, h, refs, p95, price, None, CostsConfig(),
                                                  rows))  # fmt: skip
    slow = metrics.compute_metrics(trace, result)
    assert fast["overall"] == slow["overall"]
    keys = ("p95_context_tokens", "p95_context_tokens_total")  # (the rest: test_stream_columns)
    assert {s: [v[k] for k in keys] for s, v in fast["streams"].items()} == {
        s: [v[k] for k in keys] for s, v in slow["streams"].items()
    }
    assert any(v["p95_context_tokens"] is not None for v in fast["streams"].values())
