"""The experiment commands' parts: Pareto front, tables, figures, ablation variants, scaling."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "experiments"))

import ablation  # noqa: E402
import budget_curves  # noqa: E402
import common  # noqa: E402
import paired_runs  # noqa: E402
import pareto  # noqa: E402
import scaling  # noqa: E402


def p(policy, cost, success, budget=1):
    return {"trace": "t", "policy": policy, "budget": budget, "cost_usd": cost,
            "request_success": success}  # fmt: skip


def test_the_pareto_front_keeps_exactly_the_undominated_points():
    points = [p("a", 1.0, 0.2), p("b", 2.0, 0.1), p("c", 2.0, 0.5), p("d", 3.0, 0.5),
              p("e", 4.0, 0.9), p("f", 0.5, 0.05), p("g", 1.0, 0.1)]  # fmt: skip
    got = [x["policy"] for x in pareto.front(points)]
    assert got == ["f", "a", "c", "e"]  # b, g dominated by a; d ties c's success at more cost
    # a second, brute-force definition agrees
    undominated = [x["policy"] for x in points if not any(
        y["cost_usd"] <= x["cost_usd"] and y["request_success"] >= x["request_success"]
        and (y["cost_usd"], y["request_success"]) != (x["cost_usd"], x["request_success"])
        for y in points)]  # fmt: skip
    assert sorted(got) == sorted(undominated)


def test_tables_come_as_markdown_and_latex_stamped_with_the_commit(tmp_path):
    paths = common.write_tables("t", "A title", [("s1", ["policy", "m", "512"],
                                                  [["lru_x", "hit", "0.5 [0.4, 0.6]"]])], tmp_path)  # fmt: skip
    md, tex = (x.read_text() for x in paths)
    assert "| lru_x | hit | 0.5 [0.4, 0.6] |" in md and "at commit " in md
    assert r"lru\_x & hit & 0.5 {[}0.4, 0.6{]} \\" in tex and r"\begin{tabular}{llr}" in tex
    assert common.commit() in md


def records():
    out = []
    for policy, base in (("lru", 0.2), ("rule", 0.3), ("oracle", 0.6)):
        for k, budget in enumerate((256, 512, 1024)):
            hit = base + 0.1 * k
            out.append({"trace": "x.jsonl.gz", "policy": policy, "budget": budget,
                        "hit_rate": hit, "hit_rate_low": hit - 0.02, "hit_rate_high": hit + 0.02,
                        "regret": 0.6 + 0.1 * k - hit, "oracle_upper": 0.6 + 0.1 * k,
                        "oracle_lower": 0.55 + 0.1 * k, "streams": 8})  # fmt: skip
    return out


def test_figure_1_draws_and_tabulates_every_policy_with_the_oracle_band(tmp_path):
    paths = common.save_figure(budget_curves.draw(records()), "f1", tmp_path)
    assert [x.suffix for x in paths] == [".png", ".pdf"] and all(x.stat().st_size for x in paths)
    ((heading, header, rows),) = budget_curves.tables(records())
    assert header == ["policy", "metric", "256", "512", "1024"]
    assert rows[0] == ["lru", "hit rate", "0.200 [0.180, 0.220]", "0.300 [0.280, 0.320]",
                       "0.400 [0.380, 0.420]"]  # fmt: skip
    assert rows[-1] == ["oracle band", "lower..upper", "0.550..0.600", "0.650..0.700",
                        "0.750..0.800"]  # fmt: skip


@pytest.mark.slow  # kept out of the default run (6-minute budget); make test-all runs it
def test_every_ablation_variant_changes_only_its_dimension():
    full = ablation.policy("full")
    assert ablation.policy("cost").cost_boost == 0 and full.cost_boost > 0
    assert ablation.policy("use").use_boost == 0 and full.use_boost > 0
    assert set(ablation.policy("type").type_base.values()) == {ablation._MEAN_BASE}
    assert not any(ablation.policy("content").boosts.get(b) for b in ablation.BOOSTS)
    assert isinstance(ablation.policy("pins"), ablation.RuleWithoutPersonWord)
    assert ablation.policy("decay").cost_boost == full.cost_boost


def test_the_pins_variant_ignores_annotate_values_only(tmp_path):
    from memlens.config.compose import make_policy
    from memlens.simulator import simulate
    from memlens.trace.io import trace_from_events

    def write(t, item, kind):
        return {"event": "write", "id": item, "stream": "s", "t": t, "type": kind, "tokens": 60,
                "text": item}  # fmt: skip

    events = [write(0, "a", "llm_thought"), write(1, "b", "user_input"),
              {"event": "annotate", "target": "a", "value": 1.0, "stream": "s", "t": 2},
              write(3, "c", "user_input"),
              {"event": "request", "id": "q", "needs": ["a"], "stream": "s", "t": 4}]  # fmt: skip
    trace = trace_from_events(events)
    heard = simulate(trace, make_policy("rule", ["policy.admit_threshold=0"]), 130)
    deaf = simulate(trace, ablation.RuleWithoutPersonWord(admit_threshold=0.0), 130)
    # the annotated thought outranks the user inputs only when the annotation is heard
    assert heard.need_hit.tolist() == [True] and deaf.need_hit.tolist() == [False]
    # the "pins" ablation replays the trace without a person's events: the same verdict
    path = tmp_path / "t.jsonl"
    path.write_text("".join(json.dumps(e) + "\n" for e in events))
    bare = ablation.without_person(path)
    assert bare.n_events == trace.n_events - 1 and bare.n_streams == trace.n_streams
    again = simulate(bare, make_policy("rule", ["policy.admit_threshold=0"]), 130)
    assert again.need_hit.tolist() == [False]


@pytest.mark.slow  # >10 s: kept out of the default run (make test-all runs it)
def test_scaling_measures_throughput_and_oracle_time_on_a_small_trace():
    (row,) = scaling.measure([2_000], repeat=1, oracle_max=10**7)
    assert row["events"] == 2_000 and row["references"] > 0
    assert all(row[f"{n}_{e}_events_per_s"] > 0 for n, e in scaling.ENGINES)
    assert row["oracle_solve_s"] > 0
    ((_, header, body),) = scaling.tables([row])
    assert len(header) == len(body[0]) == 6


@pytest.mark.parametrize("module", [budget_curves, pareto, ablation, scaling])
def test_every_experiment_names_its_outputs_in_its_docstring(module):
    assert "results/" in module.__doc__ and "python experiments/" in module.__doc__
    assert np is not None


def compare_json(path: Path, policy_hits: dict[str, list[int]]) -> Path:
    """A compare.json with one row per policy at budget 512: hits per stream, 10 needs each."""
    rows = [{"trace": "t", "policy": name, "budget": 512,
             "stream_parts": {"metrics": {"hit_rate": {"num": hits, "den": [10] * len(hits)}}}}
            for name, hits in policy_hits.items()]  # fmt: skip
    path.write_text(json.dumps(rows))
    return path


def test_paired_runs_give_b_minus_a_of_one_policy_with_its_paired_interval(tmp_path):
    """Hand-computed: six streams, 1 hit in 10 in run A and 2 in run B on every one: B - A is
    +0.1, and every paired resample is +0.1 too (the interval is the point, without 0)."""
    a = compare_json(tmp_path / "a.json", {"ga": [1] * 6, "lru": [5] * 6})
    b = compare_json(tmp_path / "b.json", {"ga": [2] * 6, "lru": [0] * 6})
    rows = paired_runs.table(a, b, "ga", "hit_rate")
    assert rows[2] == "| t | 512 | +0.100 [0.100, 0.100] * |"
    # swapped runs, the opposite sign; another policy, its own rows
    assert paired_runs.table(b, a, "ga", "hit_rate")[2] == "| t | 512 | -0.100 [-0.100, -0.100] * |"
    assert paired_runs.table(a, b, "lru", "hit_rate")[2].startswith("| t | 512 | -0.500 ")
    with pytest.raises(SystemExit, match="no \\(trace, budget\\) of policy 'x'"):
        paired_runs.table(a, b, "x", "hit_rate")
