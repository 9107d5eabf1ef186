"""Ranking stability across derivations: Kendall's tau and flipped pairs, by hand and by count."""

from __future__ import annotations

import itertools
import types

import pytest
from hypothesis import given
from hypothesis import strategies as st

from memlens.analyze.stability import agreement, compare_rows, ranking_stability, stability_lines


def _rows(trace: str, budget: int, rates: dict[str, float]) -> list[dict]:
    return [
        {"trace": trace, "policy": p, "budget": budget, "hit_rate": v} for p, v in rates.items()
    ]


def test_same_ranking_holds():
    rows = _rows("a", 1024, {"lru": 0.5, "rule": 0.4, "window": 0.3})
    rows += _rows("b", 1024, {"lru": 0.9, "rule": 0.6, "window": 0.1})
    (b,) = ranking_stability(rows)
    assert b.holds and b.reference == "a" and b.agreements[0].tau == pytest.approx(1.0)


def test_a_flip_is_named_and_tau_counts_it():
    rows = _rows("a", 2048, {"lru": 0.5, "rule": 0.4, "window": 0.3})
    rows += _rows("b", 2048, {"lru": 0.4, "rule": 0.5, "window": 0.3})
    (b,) = ranking_stability(rows)
    assert not b.holds
    assert b.agreements[0].flips == [("lru", "rule")]
    assert b.agreements[0].tau == pytest.approx((2 - 1) / 3)  # 2 concordant, 1 discordant pair


def test_ties_and_tolerance_are_not_flips():
    a = agreement("b", {"x": 0.50, "y": 0.50, "z": 0.1}, {"x": 0.40, "y": 0.60, "z": 0.1})
    assert a.flips == []  # tied on the first trace: no order to flip
    a = agreement("b", {"x": 0.51, "y": 0.50}, {"x": 0.50, "y": 0.51}, tolerance=0.02)
    assert a.flips == []
    assert agreement("b", {"x": 0.2, "y": 0.2}, {"x": 0.1, "y": 0.3}).tau is None  # all tied


def test_budgets_are_separate_and_missing_values_skipped():
    rows = _rows("a", 1, {"p": 1.0, "q": 0.0}) + _rows("b", 1, {"p": 0.0, "q": 1.0})
    rows += _rows("a", 2, {"p": 1.0, "q": 0.0}) + _rows("b", 2, {"p": 1.0, "q": None})
    got = {b.budget: b for b in ranking_stability(rows)}
    assert not got[1].holds and got[2].holds and got[2].agreements[0].tau is None


_rates = st.dictionaries(st.sampled_from("abcdef"), st.integers(0, 5).map(lambda x: x / 5),
                         min_size=2)  # fmt: skip


@given(_rates, _rates)
def test_tau_and_flips_against_pair_counting(r1, r2):
    """A second implementation: count concordant and discordant pairs (tau-b with ties)."""
    a = agreement("t", r1, r2)
    names = [p for p in r1 if p in r2]
    conc = disc = t1 = t2 = 0
    flips = set()
    for p, q in itertools.combinations(names, 2):
        d1, d2 = r1[p] - r1[q], r2[p] - r2[q]
        conc += d1 * d2 > 0
        disc += d1 * d2 < 0
        t1 += d1 == 0 and d2 != 0
        t2 += d2 == 0 and d1 != 0
        if d1 * d2 < 0:
            flips.add(frozenset((p, q)))
    assert {frozenset(f) for f in a.flips} == flips
    denom = ((conc + disc + t1) * (conc + disc + t2)) ** 0.5
    if len(names) < 2 or denom == 0:
        assert a.tau is None
    else:
        assert a.tau == pytest.approx((conc - disc) / denom)


def test_lines_and_compare_rows():
    rows = _rows("a.jsonl", 1024, {"lru": 0.5, "rule": 0.4})
    rows += _rows("b.jsonl", 1024, {"lru": 0.3, "rule": 0.4})
    text = "\n".join(stability_lines(rows))
    assert "budget 1024: ranking holds: no" in text
    assert "b.jsonl: Kendall tau -1.000; flips: lru > rule becomes rule > lru" in text

    def row(path, policy):
        report = types.SimpleNamespace(trace={"path": path})
        return types.SimpleNamespace(
            values={"trace": "x", "policy": policy, "budget": 1}, report=report
        )

    got = compare_rows(
        [row("/d1/t.jsonl", "lru"), row("/d2/t.jsonl", "lru"), row("/d3/u.jsonl", "lru")]
    )
    assert [r["trace"] for r in got] == ["/d1/t.jsonl", "/d2/t.jsonl", "u.jsonl"]


@pytest.mark.slow  # four memlens processes (~60 s on the shared machine)
def test_compare_over_several_traces_reports_stability(tmp_path):
    """``memlens compare traces=[a,b]`` prints whether the ranking holds, per budget."""
    import os
    import shutil
    import subprocess
    import sys
    from pathlib import Path

    exe = shutil.which("memlens") or str(Path(sys.executable).parent / "memlens")
    env = {**os.environ, "PYTHONWARNINGS": "ignore"}

    def run(*args):
        proc = subprocess.run([exe, *args], cwd=tmp_path, capture_output=True, text=True, env=env)
        assert proc.returncode == 0, proc.stderr
        return proc.stdout

    for seed in (1, 2):
        run("data", "generate", "archetype=simple", f"seed={seed}", "streams=2",
            "events_per_stream=200", f"out={tmp_path / f't{seed}.jsonl'}")  # fmt: skip
    out = run("compare", f"traces=[{tmp_path / 't1.jsonl'},{tmp_path / 't2.jsonl'}]",
              "stability=true", "policies=[lru,lfu]", "budgets=[256,1024]", "mlflow.enabled=false",
              "oracle.enabled=false", f"hydra.run.dir={tmp_path / 'run'}")  # fmt: skip
    assert "ranking stability across traces (hit_rate; each trace vs t1.jsonl)" in out
    assert "budget 256: ranking holds:" in out and "budget 1024: ranking holds:" in out
    assert "t2.jsonl: Kendall tau" in out
    single = run("compare", f"traces=[{tmp_path / 't1.jsonl'}]", "policies=[lru]", "budgets=[256]",
                 "mlflow.enabled=false", f"hydra.run.dir={tmp_path / 'run1'}")  # fmt: skip
    assert "ranking stability" not in single


def test_stability_needs_two_traces_and_is_refused_before_work(tmp_path):
    """``stability=true`` with one trace is a settings error: exit 2, one line, no run folder."""
    import subprocess
    import sys

    proc = subprocess.run(
        [sys.executable, "-m", "memlens", "compare", "stability=true", "policies=[lru]",
         "budgets=[256]", "mlflow.enabled=false", f"hydra.run.dir={tmp_path / 'run'}"],
        capture_output=True, text=True, cwd=tmp_path,
    )  # fmt: skip
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines()[-1].startswith("error: stability=true")
    assert not (tmp_path / "run").exists()


# ------------------------------------------------------------------ interval verdicts
def _parts_rows(trace, budget, per_policy):
    """Rows with per-stream (hits, requests) parts: every stream has 10 requests."""
    import numpy as np

    return [{"trace": trace, "policy": p, "budget": budget,
             "parts": (np.array(h, float), np.full(len(h), 10.0))}
            for p, h in per_policy.items()]  # fmt: skip


def test_verdicts_by_hand():
    """A difference the same on every stream holds; one that is +8 on half the streams and
    -8 on the others includes 0 (unresolved); opposite clear signs flip."""
    from memlens.analyze.stability import pair_verdicts
    from memlens.analyze.stats import StatsConfig

    cfg = StatsConfig()
    up, down = [9] * 6, [1] * 6
    mixed_a, mixed_b = [9, 1, 9, 1, 9, 1], [1, 9, 1, 9, 1, 9]
    rows = _parts_rows("a", 1, {"x": up, "y": down, "z": mixed_a, "w": mixed_b})
    rows += _parts_rows("b", 1, {"x": up, "y": down, "z": mixed_b, "w": mixed_a})
    rows += _parts_rows("a", 2, {"x": up, "y": down})
    rows += _parts_rows("b", 2, {"x": down, "y": up})
    got = {(v.budget, v.first, v.second): v for v in pair_verdicts(rows, "hit_rate", cfg)}
    assert got[(1, "x", "y")].verdict == "holds"
    assert got[(1, "x", "y")].intervals["a"].estimate == pytest.approx(0.8)
    assert got[(1, "z", "w")].verdict == "unresolved"  # the mixed streams: includes 0
    assert got[(2, "x", "y")].verdict == "flips"


def test_without_intervals_the_tolerance_decides():
    """Two streams (fewer than stats.min_streams): the point estimate counts only when it is
    more than the tolerance from 0."""
    from memlens.analyze.stability import pair_verdicts
    from memlens.analyze.stats import StatsConfig

    rows = _parts_rows("a", 1, {"x": [5, 5], "y": [4, 5]})  # +0.05
    rows += _parts_rows("b", 1, {"x": [4, 5], "y": [5, 5]})  # -0.05
    cfg = StatsConfig()
    assert pair_verdicts(rows, "m", cfg)[0].verdict == "flips"
    assert pair_verdicts(rows, "m", cfg, tolerance=0.1)[0].verdict == "unresolved"
    rows2 = _parts_rows("a", 1, {"x": [9, 9], "y": [1, 1]}) + _parts_rows(
        "b", 1, {"x": [8, 8], "y": [1, 1]})  # fmt: skip
    assert pair_verdicts(rows2, "m", cfg, tolerance=0.1)[0].verdict == "holds"


def test_verdict_lines_count_each_word():
    from memlens.analyze.stability import pair_verdicts, verdict_lines
    from memlens.analyze.stats import StatsConfig

    cfg = StatsConfig()
    rows = _parts_rows("a", 7, {"x": [9] * 6, "y": [1] * 6})
    rows += _parts_rows("b", 7, {"x": [9] * 6, "y": [1] * 6})
    text = "\n".join(verdict_lines(pair_verdicts(rows, "hit_rate", cfg), "hit_rate", cfg))
    assert "budget 7: 1 holds, 0 flips, 0 unresolved" in text
    assert "x vs y: holds (a: +0.800 [0.800, 0.800] *; b: +0.800 [0.800, 0.800] *)" in text
