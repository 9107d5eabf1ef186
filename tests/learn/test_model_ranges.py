"""The bundled model warns, once per process, when a trace's decision features leave the
ranges it was trained on (LightGBM's feature_infos in the model text), and says how to train
on one's own logs; a trace inside the ranges, or another model, stays quiet."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from memlens.scorer import ranges
from memlens.scorer.decision_features import FEATURE_NAMES
from memlens.scorer.model import DEFAULT_MODEL
from memlens.scorer.ranges import RangeTracker, training_ranges, warn_bundled_outside


def test_training_ranges_are_read_from_feature_infos():
    text = "tree\nfeature_infos=[0:3] none [-1.5:2e3]\ntree_sizes=1\n"
    assert training_ranges(text) == {0: (0.0, 3.0), 2: (-1.5, 2000.0)}
    assert training_ranges("tree\n") == {}


def test_the_bundled_model_has_a_range_for_log_tokens():
    got = training_ranges(DEFAULT_MODEL.read_text())
    k = FEATURE_NAMES.index("log_tokens")
    assert k in got and got[k][0] < got[k][1]


def test_the_tracker_names_the_features_outside_and_skips_nan():
    seen = RangeTracker(3)
    seen.add(np.array([[0.0, np.nan, 1.0], [2.0, 5.0, np.inf]]))
    assert (seen.lo.tolist(), seen.hi.tolist()) == ([0.0, 5.0, 1.0], [2.0, 5.0, 1.0])
    assert seen.outside({0: (0.0, 2.0), 1: (0.0, 4.0), 2: (1.0, 1.0)}) == [FEATURE_NAMES[1]]
    assert seen.outside({1: (0.0, 4.9)}) == []  # 0.1 past a range of 4.9: within the margin
    assert seen.outside({1: (0.0, 4.7)}) == [FEATURE_NAMES[1]]  # 0.3 past: beyond 5%


def test_adding_only_some_columns_equals_adding_the_whole_block_again():
    """A second budget changes only its columns: taking in those gives the ranges that taking
    in the whole block again would (what the learned scorer's raw_blocks relies on)."""
    rng = np.random.default_rng(5)
    X = rng.normal(size=(200, 4))
    X[3, 1] = np.nan
    whole, part = RangeTracker(4), RangeTracker(4)
    whole.add(X), part.add(X)
    X[:, [0, 2]] *= 3.0
    whole.add(X)
    part.add(X, [0, 2])
    assert np.array_equal(whole.lo, part.lo) and np.array_equal(whole.hi, part.hi)
    assert part.hi[0] == np.nanmax(X[:, 0])


def test_the_warning_comes_once(monkeypatch, capsys):
    monkeypatch.setattr(ranges, "_warned", [])
    assert warn_bundled_outside(["log_tokens"], "my.jsonl")
    assert not warn_bundled_outside(["log_tokens"], "other.jsonl")
    err = capsys.readouterr().err
    assert err.count("warning:") == 1 and "log_tokens" in err and "memlens train split=" in err
    assert not warn_bundled_outside([], "x")


@pytest.mark.slow  # replays the bundled model on a generated trace (~5 s with numba warm)
def test_huge_items_make_the_bundled_model_warn(monkeypatch, capsys):
    from memlens.policies.learned import LearnedScorer

    from memlens.simulator import simulate
    from memlens.testing import rq, w
    from memlens.trace.io import trace_from_events

    monkeypatch.setattr(ranges, "_warned", [])
    events = [w(f"x{k}", 100_000, stream="s", t=float(k)) for k in range(3)]
    events.append(rq("r", "x0", stream="s", t=3.0))
    trace = trace_from_events(events, source="huge.jsonl")  # "<...>" sources (warm-up) are quiet
    simulate(trace, LearnedScorer(model="default"), 200_000, progress=False)
    err = capsys.readouterr().err
    assert err.count("warning: the bundled learned model") == 1 and "log_tokens" in err


@given(rows=st.lists(st.lists(st.sampled_from([0.0, -1.5, 2.0, 7.25, np.nan, np.inf, -np.inf]),
                              min_size=3, max_size=3), min_size=1, max_size=12),
       split=st.integers(0, 12))  # fmt: skip
def test_the_tracker_keeps_the_min_and_max_of_the_finite_values(rows, split):
    """Against the definition: per column, the least and greatest finite value taken in over
    every block (+inf / -inf while a column has none)."""
    X = np.array(rows)
    seen = RangeTracker(3)
    seen.add(X[:split]), seen.add(X[split:])
    for k in range(3):
        finite = [v for v in X[:, k].tolist() if np.isfinite(v)]
        assert seen.lo[k] == (min(finite) if finite else np.inf)
        assert seen.hi[k] == (max(finite) if finite else -np.inf)
