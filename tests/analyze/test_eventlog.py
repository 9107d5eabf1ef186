"""The event log (memlens.analyze.eventlog): hand-computed rows, invariants against the replay, the
value probe leaves decisions alone, sampling, the off switch and bad settings."""

from __future__ import annotations

import math
import subprocess
import sys

import numpy as np
import pyarrow.parquet as pq
import pytest
from hypothesis import assume, given
from hypothesis import settings as hsettings

from memlens.analyze.eventlog import KINDS, build_event_log, event_table, sampled
from memlens.config.compose import compose_config
from memlens.config.schema import resolve
from memlens.runs.pipeline import run
from memlens.simulator import simulate
from memlens.testing import annotate, pin, rq, trace, traces, unpin, w
from memlens.trace.features import static_value
from memlens.trace.io import write_trace
from memlens.ui.sample import make_sample_runs, sample_events

_SETTINGS: dict[tuple, object] = {}


def _replay(tmp_path, events, *overrides):
    """Replay ``events`` (an in-memory trace) with simulate's settings; composed once each."""
    key = tuple(overrides)
    if key not in _SETTINGS:
        cfg = compose_config("simulate", ["mlflow.enabled=false", "progress=false", *overrides])
        _SETTINGS[key] = resolve(cfg)
    settings = _SETTINGS[key]
    done, _ = run(settings, trace(*events), record_values=settings.events.enabled)
    return done


def _rows(done) -> list[dict]:
    return event_table(done).to_pylist()


def test_hand_made_lru_rows(tmp_path):
    done = _replay(tmp_path, sample_events(), "policy=lru", "budget=2")
    got = [(r["event"], r["kind"], r["item_id"], r["tier_before"], r["tier_after"], r["reason"],
            r["cause_item"]) for r in _rows(done)]  # fmt: skip
    assert got == [
        (0, "write", "a", None, None, "write", None),
        (0, "admit", "a", "new", "wm", "admitted", None),
        (1, "write", "b", None, None, "write", None),
        (1, "admit", "b", "new", "wm", "admitted", None),
        (2, "hit", "b", "wm", "wm", "needed", None),
        (3, "write", "c", None, None, "write", None),
        (3, "admit", "c", "new", "wm", "admitted", None),
        (3, "evict", "a", "wm", "stc", "room_for_write", "c"),
        (4, "miss", "a", "stc", "stc", "needed", None),
    ]


def test_pins_declines_demotes_and_person_rows(tmp_path):
    # budget 3; short-term cache of 1 token: a second eviction pushes the first item to the LTS
    events = [w("a", 1, t=0.0), w("big", 9, t=1.0), w("b", 1, t=2.0), pin("a", t=3.0),
              w("c", 1, t=4.0), w("d", 1, t=5.0), unpin("a", t=6.0),
              annotate("b", value=0.7, note="n", t=7.0), rq("r", "a", "b", t=8.0)]  # fmt: skip
    done = _replay(tmp_path, events, "policy=lru", "budget=3", "tiers.short_term_tokens=1")
    rows = _rows(done)
    kinds = [r["kind"] for r in rows]
    assert kinds.count("decline") == 1
    big = next(r for r in rows if r["kind"] == "decline")
    assert big["item_id"] == "big" and big["reason"] == "larger_than_budget"
    assert big["tier_after"] == "lts"  # larger than the whole short-term cache
    assert [r["kind"] for r in rows if r["event"] in (3, 6, 7)] == ["pin", "unpin", "annotate"]
    assert next(r for r in rows if r["kind"] == "annotate")["value_after"] == 0.7
    # a pinned; c then d written into 3 tokens: b is evicted for d (a pinned, b older than c)
    ev = [(r["event"], r["item_id"], r["reason"], r["cause_item"]) for r in rows
          if r["kind"] == "evict"]  # fmt: skip
    assert ev == [(5, "b", "room_for_write", "d")]
    assert [r["item_id"] for r in rows if r["kind"] == "demote"] == []  # b fits the 1-token STC


def test_counts_agree_with_the_replay(tmp_path):
    done = _replay(tmp_path, sample_events() + [rq("r2", "a", "b", "c", stream="agent")],
                   "policy=lru", "budget=2", "demand_fetch=true")  # fmt: skip
    cols = build_event_log(done)
    kinds = np.asarray(KINDS)[cols["kind"]]
    tr, res = done.trace, done.result
    assert (kinds == "write").sum() == tr.n_items
    assert ((kinds == "admit") | (kinds == "decline")).sum() == tr.n_items
    assert (kinds == "evict").sum() == res.evictions.sum()
    assert (kinds == "hit").sum() == res.need_hit.sum()
    assert (kinds == "miss").sum() == len(res.need_hit) - res.need_hit.sum()
    assert (kinds == "promote").sum() == (res.move_kind == 3).sum()  # demand fetches
    assert np.all(np.diff(cols["event"]) >= 0)  # replay order


def _tier_before_naive(done):
    """Second implementation: walk the tier log and note each need's tier at its request."""
    tr, tiers = done.trace, done.tiers
    where = {}
    out = []
    moves = list(zip(tiers.event.tolist(), tiers.item.tolist(), tiers.dst.tolist()))
    k = 0
    for r in range(tr.n_requests):
        e = int(tr.req_event[r])
        while k < len(moves) and moves[k][0] < e:
            where[moves[k][1]] = moves[k][2]
            k += 1
        for j in range(tr.needs_ptr[r], tr.needs_ptr[r + 1]):
            out.append(where.get(int(tr.needs[j]), -1))
    return out


@hsettings(max_examples=25)
@given(events=traces(max_events=40))
def test_miss_tiers_match_a_naive_walk(tmp_path_factory, events):
    assume(any(e["event"] == "request" for e in events))
    tmp = tmp_path_factory.mktemp("ev")
    done = _replay(tmp, events, "policy=lru", "budget=20", "demand_fetch=true",
                   "tiers.short_term_tokens=15")  # fmt: skip
    cols = build_event_log(done)
    need = np.isin(np.asarray(KINDS)[cols["kind"]], ["hit", "miss"])
    assert (cols["tier_before"][need] - 2).tolist() == _tier_before_naive(done)


@hsettings(max_examples=15)
@given(events=traces(max_events=40))
@pytest.mark.parametrize("policy", ["rule", "memorybank", "memoryos_heat"])
@pytest.mark.slow  # kept out of the default run (6-minute budget); make test-all runs it
def test_value_probe_changes_no_decision(tmp_path_factory, events, policy):
    assume(any(e["event"] == "request" for e in events))
    tmp = tmp_path_factory.mktemp("probe")
    on = _replay(tmp, events, f"policy={policy}", "budget=20")
    off = _replay(tmp, events, f"policy={policy}", "budget=20", "events.enabled=false")
    assert getattr(on.policy, "_memlens_value_probe", None) is not None
    assert getattr(off.policy, "_memlens_value_probe", None) is None
    for name in ("need_hit", "move_event", "move_item", "move_kind", "evictions"):
        assert np.array_equal(getattr(on.result, name), getattr(off.result, name)), name


def test_rule_values_and_eviction_order(tmp_path):
    """The rule scorer evicts the lowest value: an evicted item's value at that moment is at
    most every value the log shows for items kept in working memory then."""
    rng = np.random.default_rng(3)
    events = [w(f"m{k}", int(rng.integers(1, 5)), ["user_input", "llm_thought"][k % 2],
                t=float(k * 60)) for k in range(30)]  # fmt: skip
    events += [rq(f"r{k}", f"m{k}", t=float(1800 + k)) for k in range(0, 30, 3)]
    done = _replay(tmp_path, events, "policy=rule", "budget=12", "policy.admit_threshold=0")
    rows = _rows(done)
    ev = [r for r in rows if r["kind"] == "evict"]
    assert ev and all(r["value_before"] is not None and r["value_before"] > 0 for r in ev)
    pol = done.policy
    assert done.result.engine == "fast"  # the full log no longer takes the rule off its kernel
    bases = static_value(done.trace, pol.type_base, pol.boosts, pol.cost_threshold,
                         pol.cost_boost)  # fmt: skip
    for r in ev[:5]:  # value at eviction: B * 2^-(dt/half) floored, recomputed by hand
        i = r["item"]
        base = bases[i]
        ty = int(done.trace.item_type[i])
        admitted = next(x for x in rows if x["kind"] == "admit" and x["item"] == i)
        dt = done.trace.ev_t[r["event"]] - done.trace.ev_t[admitted["event"]]
        expect = max(pol.floor[ty], base * math.exp(-pol.lam[ty] * dt))
        assert r["value_before"] == pytest.approx(expect, rel=1e-12)
    resc = [r for r in rows if r["kind"] == "rescore"]
    assert len(resc) == 10 and all(r["value_after"] >= r["value_before"] for r in resc)


def test_rescore_sampling_is_deterministic(tmp_path):
    events = [w(f"m{k}", 1, t=float(k)) for k in range(40)]
    events += [rq(f"r{k}", *[f"m{j}" for j in range(k, 40, 7)], t=100.0 + k) for k in range(20)]
    counts = {}
    for rate in (0.0, 0.5, 1.0):
        done = _replay(tmp_path, events, "policy=rule", "budget=30",
                       f"events.rescore_sample={rate}")  # fmt: skip
        counts[rate] = sum(r["kind"] == "rescore" for r in _rows(done))
    assert counts[0.0] == 0 and 0 < counts[0.5] < counts[1.0]
    again = _replay(tmp_path, events, "policy=rule", "budget=30", "events.rescore_sample=0.5")
    assert sum(r["kind"] == "rescore" for r in _rows(again)) == counts[0.5]
    keep = sum(sampled(i, e, 0.5) for i in range(200) for e in range(200))
    assert 0.45 < keep / 40000 < 0.55


def test_same_settings_same_bytes(tmp_path):
    a, b = make_sample_runs(tmp_path / "one"), make_sample_runs(tmp_path / "two")
    for name in ("lru", "rule"):
        ta = pq.read_table(a[name] / "events.parquet")
        assert ta.equals(pq.read_table(b[name] / "events.parquet"))
        html = (b[name] / "report.html").read_text().replace(str(b[name].parent), "ROOT")
        assert (a[name] / "report.html").read_text().replace(str(a[name].parent), "ROOT") == html


def test_off_switch_writes_neither_file(tmp_path):
    from memlens.ui.sample import write_run_folder

    path = tmp_path / "t.jsonl"
    write_trace(path, sample_events())
    folder = write_run_folder(tmp_path / "off", path, ["policy=lru", "budget=2",
                                                       "events.enabled=false"])  # fmt: skip
    names = {p.name for p in folder.iterdir()}
    assert "metrics.json" in names and not names & {"events.parquet", "report.html"}


def test_fast_engine_log_equals_reference(tmp_path):
    events = sample_events() + [w(f"x{k}", 1, stream="agent") for k in range(5)]
    fast = build_event_log(_replay(tmp_path, events, "policy=lru", "budget=3", "engine=fast"))
    ref = build_event_log(_replay(tmp_path, events, "policy=lru", "budget=3", "engine=reference"))
    for k in fast:
        assert np.array_equal(fast[k], ref[k], equal_nan=True), k


@pytest.mark.parametrize("bad", ["events.rescore_sample=1.5", "events.rescore_sample=-0.1",
                                 "events.enabled=maybe"])  # fmt: skip
@pytest.mark.slow  # kept out of the default run (6-minute budget); make test-all runs it
def test_bad_event_settings_exit_2(tmp_path, bad):
    path = tmp_path / "t.jsonl"
    write_trace(path, sample_events())
    proc = subprocess.run([sys.executable, "-m", "memlens", "simulate", f"trace={path}", bad,
                           "mlflow.enabled=false", f"hydra.run.dir={tmp_path / 'out'}"],
                          capture_output=True, text=True)  # fmt: skip
    assert proc.returncode == 2
    assert proc.stderr.startswith("error:") and "events." in proc.stderr
    assert not (tmp_path / "out").exists()


def test_simulator_result_unchanged_by_probe_direct():
    """simulate() itself knows nothing of the probe: same result object fields either way."""
    from memlens.policies.rule import RuleScorer

    from memlens.analyze.eventlog import RuleValueProbe

    tr = trace(*sample_events()[1:])
    plain = simulate(tr, RuleScorer(), budget=2)
    pol = RuleScorer()
    probe = RuleValueProbe(pol, pol.value)  # the probe that wraps the methods (subclasses)
    probed = simulate(tr, pol, budget=2)
    assert np.array_equal(plain.need_hit, probed.need_hit)
    assert len(probe.rows) > 0


def test_derived_from_is_kept_on_write_rows(tmp_path):
    events = [w("a", 1), w("b", 1, meta={"derived_from": "a"}),
              w("c", 1, meta={"derived_from": ["a", "b"], "other": 1}), w("d", 1, meta={"x": 2}),
              rq("r", "c")]  # fmt: skip
    rows = _rows(_replay(tmp_path, events, "policy=lru", "budget=8"))
    got = {r["item_id"]: r["derived_from"] for r in rows if r["kind"] == "write"}
    assert got == {"a": None, "b": ["a"], "c": ["a", "b"], "d": None}
    assert all(r["derived_from"] is None for r in rows if r["kind"] != "write")


def test_compare_jobs_record_no_values():
    """Only a run that writes its log (simulate) pays for the probe; compare's jobs do not."""
    settings = resolve(compose_config("simulate", ["policy=rule", "budget=2",
                                                   "mlflow.enabled=false"]))  # fmt: skip
    tr = trace(*sample_events()[1:])
    done, _ = run(settings, tr)  # the default: record_values=False
    assert getattr(done.policy, "_memlens_value_probe", None) is None
    done, _ = run(settings, tr, record_values=True)
    assert getattr(done.policy, "_memlens_value_probe", None) is not None


def _probe_rows(tr, probe_class, budget: int, **params) -> bytes:
    """The records of ``probe_class`` attached to a rule scorer over one replay of ``tr``."""
    from memlens.policies.rule import RuleScorer

    pol = RuleScorer(**params)
    probe = probe_class(pol, pol.value)
    simulate(tr, pol, budget=budget)
    return bytes(probe.rows)


@hsettings(max_examples=25)
@given(events=traces(max_events=50))
@pytest.mark.parametrize("budget", [3, 20])
def test_rule_probe_records_what_the_generic_probe_records(events, budget):
    """The rule scorer's probe inlines ``RuleScorer.value``: its records (event, item, what,
    value before, value after) equal, bit for bit, those of the generic probe, which asks
    ``RuleScorer.value`` itself; with admission thresholds on and off, annotations and pins
    included (``traces`` draws them)."""
    from memlens.analyze.eventlog import RuleValueProbe, ValueProbe

    tr = trace(*events)
    for params in ({}, {"admit_threshold": 0.0, "admit_fetched": False}):
        fast = _probe_rows(tr, RuleValueProbe, budget, **params)
        slow = _probe_rows(tr, ValueProbe, budget, **params)
        assert fast == slow


def test_probe_records_unpack_to_columns():
    """The packed records read back as the columns the log is built from."""
    from memlens.policies.rule import RuleScorer

    from memlens.analyze.eventlog import P_EVICT, P_INSERT, RECORD, ValueProbe

    probe = ValueProbe(RuleScorer(), lambda i, t: 0.0)
    rec, pack = probe.rows.extend, RECORD.pack
    rec(pack(7, 3, P_INSERT, 0.25, 0.25))
    rec(pack(2**40, 2**20, P_EVICT, math.nan, -1.5))
    c = probe.columns()
    assert c["event"].tolist() == [7, 2**40] and c["item"].tolist() == [3, 2**20]
    assert c["what"].tolist() == [P_INSERT, P_EVICT] and c["before"][0] == 0.25
    assert math.isnan(c["before"][1]) and c["after"].tolist()[1] == -1.5
    rec(pack(8, 4, P_INSERT, 1.0, 1.0))  # the columns are copies: the record can grow after
    assert probe.columns()["event"].tolist() == [7, 2**40, 8]


def test_rule_probe_is_chosen_for_rule_scorer_subclasses_only():
    from memlens.policies.memorybank import MemoryBank
    from memlens.policies.rule import RuleScorer

    from memlens.analyze.eventlog import RuleValueProbe, ValueProbe, attach_probe
    from memlens.config.schema import CommonConfig

    class Ablated(RuleScorer):
        pass

    class Bank(MemoryBank):
        pass

    assert type(attach_probe(Ablated(), CommonConfig().events)) is RuleValueProbe
    assert type(attach_probe(Bank(), CommonConfig().events)) is ValueProbe
    # and on a fixed trace the two agree on a non-empty record
    tr = trace(*sample_events()[1:])
    fast = _probe_rows(tr, RuleValueProbe, 2)
    assert len(fast) > 0 and fast == _probe_rows(tr, ValueProbe, 2)


def test_row_groups_made_in_slices_are_the_table_made_whole(tmp_path, monkeypatch):
    """``write_event_log`` makes each row group's table on a thread pool from a slice of the
    log: with groups of 7 rows (so a small trace has many, the last one short), the file reads
    back as the table made in one go, and its row groups have 7 rows each."""
    from memlens.analyze import eventlog

    events = [w("a", 2), w("b", 3, meta={"derived_from": "a"}), rq("r1", "a"), w("c", 4),
              rq("r2", "b", "c"), w("d", 2, meta={"derived_from": ["a", "c"]}), rq("r3", "a"),
              w("e", 5), rq("r4", "d", "e"), rq("r5", "b")]  # fmt: skip
    done = _replay(tmp_path, events, "policy=rule", "budget=8", "policy.admit_threshold=0")
    whole = event_table(done)
    monkeypatch.setattr(eventlog, "EVENT_ROW_GROUP", 7)
    path = eventlog.write_event_log(tmp_path / "events.parquet", done)
    meta = pq.ParquetFile(path).metadata
    assert meta.num_row_groups == -(-whole.num_rows // 7) > 1
    assert [meta.row_group(k).num_rows for k in range(meta.num_row_groups - 1)] == [7] * (
        meta.num_row_groups - 1
    )
    assert pq.read_table(path).to_pylist() == whole.to_pylist()
