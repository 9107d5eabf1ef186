"""The recommendation (memlens.analyze.recommend) on hand-made rows, and `memlens compare reference=` /
`memlens recommend` end to end on a small generated trace."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from helpers import memlens  # noqa: E402

from memlens.analyze.recommend import Choice, pareto_front, ranked, recommend
from memlens.analyze.stats import StatsConfig

N = 8  # streams of the hand-made rows
CHOICE = Choice("request_success", 0.6, "total_cost_usd")


def row(policy: str, budget: int, quality: list[int], cost: list[float], ctx: float) -> dict:
    """A compare.json row: ``quality`` successes out of 10 requests per stream, ``cost`` USD per
    stream (a total), ``ctx`` the context cost."""
    num, den = np.asarray(quality, float), np.full(len(quality), 10.0)
    return {
        "trace": "t.jsonl.gz", "policy": policy, "budget": budget,
        "request_success": num.sum() / den.sum(), "total_cost_usd": float(sum(cost)),
        "cost_usd": ctx,
        "stream_parts": {"streams": [f"s{i}" for i in range(len(quality))], "metrics": {
            "request_success": {"num": num.tolist(), "den": den.tolist()},
            "total_cost_usd": {"num": list(cost), "den": None}}},
    }  # fmt: skip


ROWS = [
    row("a", 512, [3] * N, [1.0] * N, 1.0),  # cheap, poor
    row("b", 1024, [6, 7, 6, 7, 6, 7, 6, 7], [1.5] * N, 2.0),  # 0.65: cheapest qualifying
    row("c", 1024, [6, 7, 6, 7, 6, 7, 7, 6], [1.7, 1.4] * (N // 2), 2.5),  # ~b, dominated
    row("d", 2048, [9] * N, [2.5] * N, 4.0),  # best, dearest
    row("e", 2048, [5] * N, [3.0] * N, 4.5),  # dominated by d
]


def test_cheapest_qualifying_setting_is_recommended():
    good, rest = ranked(ROWS, CHOICE)
    assert [r["policy"] for r in good] == ["b", "c", "d"]
    assert [r["policy"] for r in rest] == ["e", "a"]
    (rec,) = recommend(ROWS, CHOICE, StatsConfig())["traces"]
    assert (rec["recommended"]["policy"], rec["recommended"]["budget"]) == ("b", 1024)
    assert rec["alternative"]["policy"] == "c"
    assert rec["alternative"]["why"] == "next-cheapest qualifying"
    assert rec["qualifying"] == 3


def test_pareto_front_of_context_cost_vs_quality():
    front = pareto_front(ROWS, "request_success")
    assert [r["policy"] for r in front] == ["a", "b", "d"]  # c and e are dominated
    (rec,) = recommend(ROWS, CHOICE, StatsConfig())["traces"]
    assert [f["policy"] for f in rec["pareto_front"]] == ["a", "b", "d"]


def test_settings_on_the_very_same_point_are_one_front_entry():
    twin = {**ROWS[1], "policy": "b2"}
    (rec,) = recommend([*ROWS, twin], CHOICE, StatsConfig())["traces"]
    assert [(f["policy"], f["same"]) for f in rec["pareto_front"]] == [
        ("a", []), ("b", ["b2@1024"]), ("d", [])]  # fmt: skip


def test_the_oracle_is_not_a_candidate():
    from memlens.cli.replay import candidates
    from memlens.config.compose import compose_config
    from memlens.config.schema import resolve

    settings = candidates(resolve(compose_config("recommend", ["target=0.5"])))
    assert "oracle" not in settings.policies and "lru" in settings.policies
    kept = candidates(resolve(compose_config("recommend", ["target=0.5", "exclude=[]"])))
    assert "oracle" in kept.policies


def test_says_when_two_choices_cannot_be_told_apart():
    (rec,) = recommend(ROWS, CHOICE, StatsConfig())["traces"]
    diff = rec["difference"]
    assert not diff["told_apart"]  # c - b: 0 success, +0.4 USD, both within noise
    assert diff["quality"]["low"] <= 0 <= diff["quality"]["high"]
    assert any("cannot be told apart at 95%" in line for line in rec["statement"])
    # without c, the alternative is d: better and dearer on every stream: told apart
    (rec,) = recommend([r for r in ROWS if r["policy"] != "c"], CHOICE, StatsConfig())["traces"]
    assert rec["alternative"]["policy"] == "d" and rec["difference"]["told_apart"]
    assert any(" can be told apart" in line for line in rec["statement"])


def test_target_met_only_by_the_point_estimate_is_said():
    rows = [row("x", 512, [2, 10, 3, 9, 4, 10, 2, 10], [1.0] * N, 1.0), ROWS[3]]  # x: 0.625
    (rec,) = recommend(rows, CHOICE, StatsConfig())["traces"]
    assert rec["recommended"]["policy"] == "x"
    assert rec["clears_target_at_ci"]["policy"] == "d"
    assert any("point estimate only" in line and "d@2048" in line for line in rec["statement"])


def test_no_setting_reaches_the_target():
    (rec,) = recommend(ROWS, Choice("request_success", 0.95, "total_cost_usd"),
                       StatsConfig())["traces"]  # fmt: skip
    assert rec["recommended"] is None and rec["qualifying"] == 0
    assert rec["alternative"]["policy"] == "d"  # the closest to the target
    assert rec["statement"][0].startswith("no setting reaches request_success >= 0.95")


def test_fewer_streams_than_min_streams_says_nothing_can_be_told_apart():
    (rec,) = recommend(ROWS, CHOICE, StatsConfig(min_streams=10))["traces"]
    assert rec["recommended"]["policy"] == "b" and rec["difference"]["told_apart"] is False
    assert rec["recommended"]["request_success"]["note"] == "n<10"
    assert any("nothing can be told apart" in line for line in rec["statement"])


# ----------------------------------------------------------------------- command line
@pytest.fixture(scope="module")
def six_streams(tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("six")
    memlens("data", "generate", "archetype=simple", "seed=3", "streams=6",
            "events_per_stream=200", f"out={d / 't.jsonl.gz'}", cwd=d)  # fmt: skip
    return d / "t.jsonl.gz"


FAST = ["oracle.enabled=false", "mlflow.enabled=false", "policies=[lru,window,rule]",
        "budgets=[512,1024]"]  # fmt: skip


@pytest.mark.slow  # a whole compare run: 5 s
def test_compare_reference_end_to_end(tmp_path, six_streams):
    out = tmp_path / "cmp"
    proc = memlens("compare", f"trace={six_streams}", "reference=lru", *FAST,
                   f"hydra.run.dir={out}", cwd=tmp_path)  # fmt: skip
    lines = proc.stdout.splitlines()
    assert lines[0].endswith("paired differences to lru")  # the verdict's first line
    table_header = next(ln for ln in lines if ln.split()[:2] == ["#", "policy"])
    assert "vs lru" in table_header and "(reference)" in proc.stdout
    assert "] *" in proc.stdout or "[" in proc.stdout  # interval cells
    rows = json.loads((out / "compare.json").read_text())
    assert len(rows) == 6
    for r in rows:
        assert r["stream_parts"]["streams"] and len(r["stream_parts"]["streams"]) == 6
        assert {"low", "high"} <= set(r["intervals"]["hit_rate"])
        vs = r["vs_reference"]["metrics"]["hit_rate"]
        if r["policy"] == "lru":
            assert (vs["estimate"], vs["low"], vs["high"]) == (0.0, 0.0, 0.0)
        hits = r["stream_parts"]["metrics"]["hit_rate"]
        assert sum(hits["num"]) / sum(hits["den"]) == pytest.approx(r["hit_rate"])
    header_csv = (out / "compare.csv").read_text().splitlines()[0].split(",")
    assert {"hit_rate_low", "hit_rate_vs_ref", "hit_rate_vs_ref_high"} <= set(header_csv)


@pytest.mark.slow  # kept out of the default run (6-minute budget); make test-all runs it
def test_recommend_end_to_end(tmp_path, six_streams):
    out = tmp_path / "rec"
    proc = memlens("recommend", f"trace={six_streams}", "target=0.2", *FAST,
                   f"hydra.run.dir={out}", cwd=tmp_path)  # fmt: skip
    doc = json.loads((out / "recommend.json").read_text())
    (rec,) = doc["traces"]
    assert doc["metric"] == "request_success" and doc["target"] == 0.2
    assert rec["recommended"]["request_success"]["estimate"] >= 0.2
    assert "recommended:" in proc.stdout and "pareto" in proc.stdout
    assert (out / "compare.json").exists()


def test_a_reference_that_is_not_compared_exits_2_before_anything_runs(tmp_path):
    proc = memlens("compare", "reference=lfu", "policies=[lru,window]",
                   f"hydra.run.dir={tmp_path / 'x'}", cwd=tmp_path, check=False)  # fmt: skip
    assert proc.returncode == 2 and not (tmp_path / "x").exists()
    assert proc.stderr.strip() == (
        "error: reference=lfu is not a compared policy (policies: lru, window)"
    )


@pytest.mark.parametrize(
    ("command", "args", "message"),
    [
        ("compare", ["reference=nonesuch"], "not a compared policy"),
        ("recommend", ["target=1.5"], "target must be a number in [0, 1]"),
        ("recommend", ["target=0.5", "metric=nope"], "unknown metric 'nope'"),
        ("recommend", ["target=0.5", "metric=evictions"], "must be higher-is-better"),
        ("recommend", ["target=0.5", "cost=hit_rate"], "must be lower-is-better"),
        ("recommend", ["target=0.5", "policies=[oracle]"], "no policy left"),
        ("recommend", [], "missing mandatory value: target"),
        ("compare", ["stats.ci=1.5"], "stats.ci must be between 0 and 1"),
        ("simulate", ["stats.method=normal"], "stats.method must be percentile or bca"),
    ],
)
@pytest.mark.slow  # kept out of the default run (6-minute budget); make test-all runs it
def test_bad_settings_exit_2_with_one_line(capsys, command, args, message):
    """The pre-validation `memlens <command>` runs before Hydra starts (in process)."""
    from memlens.cli import replay as commands
    from memlens.config import app

    check = getattr(commands, f"check_{command}")
    with pytest.raises(SystemExit) as exit_:
        app.validate(command, args, check)
    assert exit_.value.code == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error:") and message in lines[0], lines


# --------------------------------------------------------- several derivations at once
def test_across_derivations_only_what_meets_the_target_under_all():
    """Under derivation A the cheapest qualifying setting is b (0.65); under B, b and c fall to
    0.55 and only d qualifies: across both, d is recommended, and the statement says that A
    alone would have picked b."""
    from memlens.analyze.recommend import recommend_across

    rows_a = [{**r, "trace": "A"} for r in ROWS]
    worse = {p: row(p, 1024, [5, 6] * (N // 2), [1.5] * N, 2.0) for p in ("b", "c")}
    rows_b = [{**worse.get(r["policy"], r), "trace": "B"} for r in ROWS]
    doc = recommend_across(rows_a + rows_b, CHOICE, StatsConfig())
    assert doc["recommended"]["policy"] == "d" and doc["recommended"]["budget"] == 2048
    assert doc["recommended"]["min_quality"] == pytest.approx(0.9)
    assert "under all 2 derivations: recommended d@2048" in doc["statement"]
    assert "a single derivation alone would pick b@1024 (A)" in doc["statement"]


def test_across_derivations_none_meets_the_target():
    from memlens.analyze.recommend import recommend_across

    rows = [{**r, "trace": "A"} for r in ROWS if r["policy"] != "d"]
    rows += [{**r, "trace": "B"} for r in ROWS if r["policy"] in ("a", "e")]
    doc = recommend_across(rows, CHOICE, StatsConfig())
    assert doc["recommended"] is None
    assert doc["statement"].startswith("under all 2 derivations: no setting reaches")
    assert "e@2048 misses under A, B" in doc["statement"]
