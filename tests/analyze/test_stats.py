"""Intervals over streams (memlens.analyze.stats): coverage, pairing, determinism, the few-streams note,
agreement with scipy, and the per-stream parts every decomposable metric declares."""

from __future__ import annotations

import json

import numpy as np
import pytest
from helpers import random_events, trace
from scipy import stats as sps

from memlens.analyze.registry import combine, declared, decomposable
from memlens.analyze.stats import (
    StatsConfig,
    _counts_by_stream,
    difference,
    interval,
    resample_counts,
)
from memlens.analyze.table import interval_cell
from memlens.config.compose import run_settings
from memlens.runs import pipeline

SMALL = ["oracle.enabled=false", "mlflow.enabled=false"]


def synthetic(rng: np.random.Generator, n: int = 40, mean: float = 0.6):
    """Streams that differ a lot (each its own rate, Beta around ``mean``, and its own length):
    the ratio's population value is ``mean``."""
    den = rng.integers(5, 80, size=n).astype(float)
    p = rng.beta(6 * mean, 6 * (1 - mean), size=n)
    return rng.binomial(den.astype(int), p).astype(float), den


@pytest.mark.parametrize("method", ["percentile", "bca"])
def test_interval_covers_the_known_mean_about_95_percent_of_the_time(method):
    covered = 0
    for rep in range(200):
        num, den = synthetic(np.random.default_rng(1000 + rep))
        iv = interval((num, den), StatsConfig(seed=rep, method=method))
        covered += iv.low <= 0.6 <= iv.high
    assert 0.90 <= covered / 200 <= 0.985, covered


def test_a_total_is_bootstrapped_as_a_sum_over_streams():
    num = np.arange(1.0, 11.0)
    iv = interval((num, None), StatsConfig())
    assert iv.estimate == 55.0 and iv.low < 55.0 < iv.high


def test_identical_policies_differ_by_exactly_zero_with_a_zero_width_interval():
    parts = synthetic(np.random.default_rng(0))
    for method in ("percentile", "bca"):
        d = difference(parts, (parts[0].copy(), parts[1].copy()), StatsConfig(method=method))
        assert (d.estimate, d.low, d.high) == (0.0, 0.0, 0.0)
        assert not d.excludes_zero


def test_identical_runs_through_the_pipeline_differ_by_exactly_zero():
    events = random_events(np.random.default_rng(5), n_events=600, n_streams=6)
    t = trace(*events)
    settings = run_settings([*SMALL, "policy=lru", "budget=300"])
    a = pipeline.run(settings, t)[1]
    b = pipeline.run(settings, t)[1]
    assert len(a.stream_names) == 6
    for key, parts in a.stream_parts.items():
        d = difference(parts, b.stream_parts[key], StatsConfig())
        assert d.estimate in (0.0, None) and (d.low, d.high) in ((0.0, 0.0), (None, None)), key


def test_fewer_than_min_streams_gives_a_note_not_an_interval():
    num, den = synthetic(np.random.default_rng(0), n=4)
    iv = interval((num, den), StatsConfig())
    assert iv.low is None and iv.high is None and iv.note == "n<5"
    assert iv.estimate == pytest.approx(num.sum() / den.sum())
    assert iv.to_dict() == {"estimate": iv.estimate, "note": "n<5", "n_streams": 4}
    assert interval_cell("hit_rate", iv) == f"{iv.estimate:.3f} [n<5]"
    assert difference((num, den), (num, den), StatsConfig()).low is None
    assert interval((num, den), StatsConfig(min_streams=3)).low is not None


def test_same_seed_same_interval_bit_for_bit():
    parts = synthetic(np.random.default_rng(3))
    for method in ("percentile", "bca"):
        first = interval(parts, StatsConfig(seed=7, method=method))
        _counts_by_stream.cache_clear()
        again = interval(parts, StatsConfig(seed=7, method=method))
        assert (first.low, first.high) == (again.low, again.high)
        other = interval(parts, StatsConfig(seed=8, method=method))
        assert (first.low, first.high) != (other.low, other.high)


@pytest.mark.parametrize(("n", "bootstrap", "seed"), [(1, 100, 0), (7, 100, 3), (300, 250, 9)])
def test_resample_counts_are_the_draws_counted(n, bootstrap, seed):
    """Each replicate's counts are how often each stream index was drawn, from the documented
    draw (``default_rng([seed, n]).integers``), counted here one draw at a time."""
    idx = np.random.default_rng([seed, n]).integers(0, n, size=(bootstrap, n))
    expected = np.zeros((bootstrap, n))
    for b, row in enumerate(idx):
        for i in row:
            expected[b, i] += 1
    counts = resample_counts(n, bootstrap, seed)
    assert counts.shape == (bootstrap, n)
    assert counts.dtype == np.uint8 and not counts.flags.writeable  # small integers, exact
    assert np.array_equal(counts, expected)
    assert (counts.sum(axis=1) == n).all()


def test_counts_widen_when_a_stream_is_drawn_256_times_and_sum_as_floats_do():
    """A replicate drawing one stream 300 times (possible from 256 streams on) is counted
    exactly (uint32); every matrix gives the replicate sums of its float64 copy, bit for bit."""
    from memlens.analyze.stats import counted
    from memlens.kernels.bootstrap import replicate_sums

    rng = np.random.default_rng(2)
    draws = rng.integers(0, 300, size=(200, 300))
    draws[150] = 7  # one replicate: stream 7, 300 times
    counts = counted(draws, 300)
    assert counts.dtype == np.uint32 and counts[7, 150] == 300 and counts[:, 150].sum() == 300
    for b in (0, 149, 199):
        assert np.array_equal(counts[:, b], np.bincount(draws[b], minlength=300))
    columns = rng.normal(size=(300, 3)) * 10.0 ** rng.integers(-8, 8, size=(300, 3))
    small = counted(draws[:150], 300)
    assert small.dtype == np.uint8
    for matrix in (counts, small):
        as_float = np.ascontiguousarray(matrix, dtype=np.float64)
        got, want = replicate_sums(matrix, columns), replicate_sums(as_float, columns)
        assert np.array_equal(got.view(np.int64), want.view(np.int64))  # bit for bit


def test_paired_interval_is_narrower_when_policies_move_together():
    rng = np.random.default_rng(11)
    num, den = synthetic(rng, n=30)
    better = np.minimum(num + rng.binomial(3, 0.5, size=num.size), den)  # same streams, a bit up
    cfg = StatsConfig()
    paired = difference((better, den), (num, den), cfg, paired=True)
    unpaired = difference((better, den), (num, den), cfg, paired=False)
    assert paired.estimate == unpaired.estimate > 0
    assert paired.high - paired.low < 0.5 * (unpaired.high - unpaired.low)
    assert paired.excludes_zero and not unpaired.excludes_zero


@pytest.mark.parametrize("method", ["percentile", "BCa"])
def test_agrees_with_scipy_bootstrap(method):
    """The vectorised resampler gives scipy.stats.bootstrap's interval (Monte Carlo error)."""
    num, den = synthetic(np.random.default_rng(2), n=60)
    ours = interval((num, den), StatsConfig(method=method.lower(), bootstrap=4000))
    ref = sps.bootstrap((num, den), lambda a, b, axis=-1: a.sum(axis) / b.sum(axis),
                        paired=True, vectorized=True, n_resamples=4000, method=method,
                        random_state=np.random.default_rng(0)).confidence_interval  # fmt: skip
    width = ref.high - ref.low
    assert abs(ours.low - ref.low) < 0.1 * width and abs(ours.high - ref.high) < 0.1 * width


@pytest.mark.parametrize(
    "bad",
    [{"bootstrap": 10}, {"ci": 1.0}, {"ci": 0}, {"method": "normal"}, {"min_streams": 1}],
)
def test_stats_settings_are_validated(bad):
    with pytest.raises(ValueError, match="stats."):
        StatsConfig(**bad)


def test_every_decomposable_metric_recombines_to_its_overall_and_stream_values():
    """parts(stream) summed over streams gives the run's value; one stream's parts its own."""
    events = random_events(np.random.default_rng(8), n_events=500, n_streams=5)
    report = pipeline.run(run_settings([*SMALL, "policy=lru", "budget=200"]), trace(*events))[1]
    assert {m.key for m in decomposable()} == set(report.stream_parts)
    assert "p95_context_tokens" not in report.stream_parts  # a percentile: no parts
    for key, (num, den) in report.stream_parts.items():
        assert num.size == len(report.stream_names) == 5
        assert combine(num, den) == pytest.approx(report.overall[key], rel=1e-9, abs=1e-12), key
        for s, name in enumerate(report.stream_names):
            one = combine(num[s : s + 1], None if den is None else den[s : s + 1])
            assert one == pytest.approx(report.streams[name][key], rel=1e-9, abs=1e-12), key


def test_metrics_json_has_intervals_and_the_raw_parts():
    """A 4-stream trace: every decomposable metric gets the note."""
    events = random_events(np.random.default_rng(9), n_events=400, n_streams=4)
    report = pipeline.run(run_settings([*SMALL, "policy=lru", "budget=200"]), trace(*events))[1]
    doc = json.loads(json.dumps(report.to_dict(), allow_nan=False))
    assert set(doc["intervals"]) == set(report.stream_parts)
    assert doc["intervals"]["hit_rate"]["note"] == "n<5"
    assert doc["stream_parts"]["streams"] == list(report.streams)
    hits = doc["stream_parts"]["metrics"]["hit_rate"]
    assert sum(hits["num"]) / sum(hits["den"]) == pytest.approx(doc["overall"]["hit_rate"])
    assert all(declared()[k].parts is not None for k in doc["intervals"])


def test_bundled_default_trace_gets_real_intervals():
    """The bundled default trace has over 200 streams: intervals, no note, value inside."""
    doc = pipeline.run(run_settings(SMALL))[1].to_dict()
    hit = doc["intervals"]["hit_rate"]
    assert "note" not in hit
    assert hit["estimate"] == pytest.approx(doc["overall"]["hit_rate"])
    assert hit["low"] < hit["estimate"] < hit["high"]
    assert hit["n_streams"] == len(doc["streams"])


def test_interval_cells():
    from memlens.analyze.stats import Interval

    iv = Interval(0.021, 0.004, 0.038, "percentile", 0.95, 10)
    assert interval_cell("hit_rate", iv, signed=True) == "+0.021 [0.004, 0.038] *"
    assert interval_cell("hit_rate", iv) == "0.021 [0.004, 0.038]"
    span = Interval(-0.01, -0.02, 0.005, "percentile", 0.95, 10)
    assert interval_cell("hit_rate", span, signed=True) == "-0.010 [-0.020, 0.005]"
    count = Interval(733.0, 711.0, 754.0, "percentile", 0.95, 6)
    assert interval_cell("evictions", count) == "733 [711, 754]"


def test_a_metric_has_the_same_interval_alone_or_with_others():
    """One pass over the counts for every metric (memlens.kernels.bootstrap) gives each metric
    the interval it gets alone, bit for bit, and the replicates a plain product gives, to
    rounding; paired differences likewise."""
    from memlens.analyze.stats import _replicates, differences, intervals

    rng = np.random.default_rng(21)
    parts = {f"m{k}": synthetic(rng, n=40) for k in range(5)}
    parts["total"] = (rng.integers(0, 9, size=40).astype(float), None)
    parts["short"] = synthetic(rng, n=3)  # fewer than min_streams: a note
    ref = {k: (np.asarray(v[0]) + 1.0, v[1]) for k, v in parts.items()}
    cfg = StatsConfig(bootstrap=300, seed=4)
    together = intervals(parts, cfg)
    for key, p in parts.items():
        assert together[key] == interval(p, cfg), key
    diffs = differences(parts, ref, cfg)
    for key, p in parts.items():
        assert diffs[key] == difference(p, ref[key], cfg), key
    counts = resample_counts(40, 300, 4)
    num, den = parts["m0"]
    np.testing.assert_allclose(_replicates(counts, (num, den)), (counts @ num) / (counts @ den),
                               rtol=1e-12)  # fmt: skip
    np.testing.assert_allclose(_replicates(counts, parts["total"]), counts @ parts["total"][0],
                               rtol=1e-12)  # fmt: skip
    # each replicate's sum is taken in stream order, one product at a time (counted here)
    expected = np.zeros(300)
    for b in range(300):
        for i in range(40):
            expected[b] += counts[b, i] * num[i]
    from memlens.kernels.bootstrap import replicate_sums

    sums = replicate_sums(np.ascontiguousarray(counts.T), np.column_stack([num, den]))
    assert np.array_equal(sums[:, 0], expected)


def test_zero_values_passed_over_leave_every_sum_as_the_full_loops():
    """Streams whose value is zero (either sign) are skipped by the compiled sums; every
    replicate is still the full loop's, bit for bit, beside NaNs, infinities and tiny values."""
    from memlens.kernels.bootstrap import replicate_sums

    rng = np.random.default_rng(4)
    counts = resample_counts(50, 40, 1)
    columns = rng.normal(size=(50, 4)) * 10.0 ** rng.integers(-300, 300, size=(50, 4))
    columns[rng.random(columns.shape) < 0.4] = 0.0
    columns[rng.random(columns.shape) < 0.1] = -0.0
    columns[3, 1], columns[7, 2], columns[9, 3] = np.nan, np.inf, -np.inf
    columns[:, 0] = -0.0  # a column of negative zeros sums to +0.0, as the full loop's does
    expected = np.zeros((40, 4))
    with np.errstate(over="ignore", invalid="ignore"):
        for b in range(40):
            for j in range(4):
                for i in range(50):
                    expected[b, j] += float(counts[b, i]) * columns[i, j]
    got = replicate_sums(np.ascontiguousarray(counts.T), columns)
    nan = np.isnan(expected)  # (inf - inf, NaN * count: their payloads may differ)
    assert np.array_equal(np.isnan(got), nan)
    assert np.array_equal(got[~nan].view(np.int64), expected[~nan].view(np.int64))
    assert not np.signbit(got[:, 0]).any()


def test_shared_parts_are_summed_once_and_change_nothing():
    """Metrics sharing a denominator, and a verdict's differences sharing the reference's and
    the leader's parts, are summed once per distinct column (memlens.analyze.stats
    ``_distinct_columns``): every interval is the one each gets alone, bit for bit, and its
    replicates are the plain products' differences, to rounding."""
    from memlens.analyze.stats import _distinct_columns, intervals, paired_differences

    rng = np.random.default_rng(5)
    den = rng.integers(5, 80, size=50).astype(float)
    runs = [(rng.binomial(den.astype(int), rng.uniform(0.2, 0.9)).astype(float), den)
            for _ in range(4)]  # fmt: skip
    cfg = StatsConfig(bootstrap=400, seed=9)
    pairs = [(r, runs[0]) for r in runs[1:]] + [(runs[1], r) for r in runs[2:]]
    together = paired_differences(pairs, cfg)
    assert together == [difference(a, b, cfg) for a, b in pairs]
    counts = resample_counts(50, 400, 9)
    for (a, b), iv in zip(pairs, together, strict=True):
        reps = (counts @ a[0]) / (counts @ a[1]) - (counts @ b[0]) / (counts @ b[1])
        low, high = np.quantile(reps, [0.025, 0.975])
        assert iv.low == pytest.approx(low, rel=1e-9) and iv.high == pytest.approx(high, rel=1e-9)
    shared = {f"m{k}": r for k, r in enumerate(runs)}
    assert intervals(shared, cfg) == {k: interval(p, cfg) for k, p in shared.items()}
    columns, slot = _distinct_columns([c for r in runs for c in r])
    assert len(columns) == 5 and slot == [0, 1, 2, 1, 3, 1, 4, 1]
