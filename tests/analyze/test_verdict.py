"""compare's default verdict: ranked per budget, paired to the reference, one honest sentence."""

from __future__ import annotations

from dataclasses import dataclass, field
from types import SimpleNamespace

import numpy as np

from memlens.analyze.stats import StatsConfig, interval
from memlens.analyze.verdict import WIDTH, verdict_lines

CFG = StatsConfig(bootstrap=500)


@dataclass
class FakeRow:
    """What the verdict reads of a compare row: ``values`` and ``report``."""

    values: dict
    report: SimpleNamespace = field(default=None)


def row(policy: str, budget: int, hits: list[int], requests: list[int], bound=None) -> FakeRow:
    """A row whose hit_rate is sum(hits)/sum(requests), per-stream parts as compare keeps them."""
    num, den = np.array(hits, float), np.array(requests, float)
    rate = num.sum() / den.sum()
    values = {"trace": "t.jsonl", "policy": policy, "budget": budget, "hit_rate": rate,
              "oracle_upper": bound, "regret": None if bound is None else bound - rate,
              "total_cost_usd": 1.5}  # fmt: skip
    report = SimpleNamespace(
        stream_names=[f"s{i}" for i in range(len(hits))],
        stream_parts={"hit_rate": (num, den)},
        intervals={"hit_rate": interval((num, den), CFG)},
    )
    return FakeRow(values, report)


REQ = [10] * 8


def test_a_policy_ahead_on_every_stream_is_named_significantly_best():
    # good beats lru by exactly 3 hits on every stream: every paired resample's difference is
    # 24/80 - ... = +0.3, so the interval is [0.3, 0.3] and excludes zero
    rows = [
        row("lru", 512, [5] * 8, REQ, bound=0.95),
        row("good", 512, [8] * 8, REQ, bound=0.95),
        row("oracle", 512, [9] * 8, REQ, bound=0.95),
        row("meh", 512, [6] * 8, REQ, 0.95),
    ]
    out = verdict_lines(rows, "hit_rate", "lru", CFG)
    table = [ln for ln in out if ln.startswith("  ") and ln.split()[0].isdigit()]
    assert [ln.split()[1] for ln in table] == ["good", "meh", "lru"]  # oracle is the bound
    assert "+0.300 [0.300, 0.300] *" in table[0]
    assert "(reference)" in table[2]
    assert "budget 512 tokens: oracle bound hit_rate <= 0.950" in out
    text = " ".join(" ".join(out).split())  # a wrapped sentence read as one
    assert "good is significantly best at 512: +0.200 [0.200, 0.200] hit_rate over the runner-up " \
           "meh" in text  # fmt: skip
    assert "+0.300 [0.300, 0.300] over lru" in text


def test_policies_that_tie_are_not_called_best():
    a = [5, 6, 7, 4, 5, 6, 7, 4]
    b = [6, 5, 4, 7, 6, 5, 4, 7]  # same total, streams differ: the interval straddles zero
    rows = [row("lru", 256, a, REQ), row("other", 256, b, REQ), row("worse", 256, [1] * 8, REQ)]
    text = " ".join(" ".join(verdict_lines(rows, "hit_rate", "lru", CFG)).split())
    assert "no single best at 256" in text
    assert "significantly best" not in text
    assert "not significantly ahead of other" in text  # lru leads on the name tie-break


def test_too_few_streams_make_no_claim():
    rows = [row("lru", 512, [1, 2], [10, 10]), row("good", 512, [9, 9], [10, 10])]
    out = verdict_lines(rows, "hit_rate", "lru", CFG)
    text = " ".join(" ".join(out).split())  # a wrapped sentence read as one
    assert "fewer than stats.min_streams=5" in text
    assert "too few streams to say whether it is significantly best" in text
    assert "significantly best at" not in text


def test_without_the_reference_there_is_no_vs_column():
    rows = [row("rule", 512, [5] * 8, REQ), row("window", 512, [4] * 8, REQ)]
    out = verdict_lines(rows, "hit_rate", None, CFG)
    header = next(ln for ln in out if ln.strip().startswith("#"))
    assert header.split() == ["#", "policy", "hit_rate", "regret", "cost", "$"]
    assert "over lru" not in " ".join(out)


def test_budgets_are_blocks_in_order_and_every_line_fits():
    long = "a_policy_with_a_rather_long_name_indeed"
    rows = [
        row(p, b, [k + b // 512] * 8, REQ, bound=0.99)
        for b in (2048, 512, 1024)
        for k, p in enumerate(["lru", long, "rule", "lfu"])
    ]
    out = verdict_lines(rows, "hit_rate", "lru", CFG)
    titles = [ln.split(":")[0] for ln in out if ln.startswith("budget ")]
    assert titles == ["budget 512 tokens", "budget 1024 tokens", "budget 2048 tokens"]
    assert max(map(len, out)) <= WIDTH
