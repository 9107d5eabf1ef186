"""The oracle against the policies: none beats oracle_upper, policy=oracle scores oracle_lower,
and the bounds reach metrics.json (cached on disk, withheld for out-of-class policies)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest
from memlens.policies.lru import LRU

from memlens.config.compose import make_policy, run_settings
from memlens.config.store import registered_policies
from memlens.oracle import OracleSettings, clear_memo, solve
from memlens.runs.pipeline import run
from memlens.simulator import simulate
from memlens.trace.generate import generate_simple
from memlens.trace.io import trace_from_events

NOCACHE = OracleSettings(cache=False)
BUDGETS = (200, 700, 2500)


@pytest.fixture(scope="module")
def traces():
    """Two small multi-stream generated traces with pins (pin rate raised so pins matter)."""
    out = []
    for seed in (3, 4):
        events = generate_simple(seed=seed, streams=2, events_per_stream=250, pin_rate=0.05)
        out.append(trace_from_events(list(events), source=f"<gen{seed}>"))
    return out


def _hits(trace, policy, budget, demand_fetch, engine="auto") -> int:
    return int(simulate(trace, policy, budget, demand_fetch, engine=engine).need_hit.sum())


# demand_fetch=true: slow (the 6-minute default run); make test-all runs both
@pytest.mark.parametrize("demand_fetch", [False, pytest.param(True, marks=pytest.mark.slow)])
@pytest.mark.parametrize("name", registered_policies())
def test_no_registered_policy_beats_oracle_upper(traces, name, demand_fetch):
    for t in traces:
        for budget in BUDGETS:
            policy = make_policy(name)
            if policy.outside_oracle_class:
                pytest.skip(f"{name} declares itself outside the oracle's class")
            bound = solve(t, budget, demand_fetch, NOCACHE)
            hits = _hits(t, policy, budget, demand_fetch)
            assert hits <= bound.upper, (t.source, budget)
            assert bound.lower <= bound.upper


@pytest.mark.parametrize("demand_fetch", [False, True])
@pytest.mark.slow  # kept out of the default run (6-minute budget); make test-all runs it
def test_policy_oracle_scores_exactly_oracle_lower(traces, demand_fetch):
    for t in traces:
        for budget in BUDGETS:
            bound = solve(t, budget, demand_fetch, NOCACHE)
            oracle = make_policy("oracle")
            oracle.use_oracle_settings(NOCACHE)
            res = simulate(t, oracle, budget, demand_fetch)
            assert int(res.need_hit.sum()) == bound.lower
            per_stream = np.bincount(
                t.req_stream[t.need_request], weights=res.need_hit, minlength=t.n_streams
            )
            assert per_stream.astype(int).tolist() == [s.lower for s in bound.streams]
            # and it is at least as good as the online baseline
            assert bound.lower >= _hits(t, LRU(), budget, demand_fetch)


def replay(tmp_path: Path, trace, policy, budget: int, *overrides: str) -> dict:
    """metrics.json of ``memlens simulate policy=POLICY budget=BUDGET`` on an in-memory trace."""
    cache = f"oracle.cache_dir={tmp_path / 'oracle'}"
    settings = run_settings(["mlflow.enabled=false", cache, f"budget={budget}", *overrides])
    if isinstance(policy, str):
        settings = dataclasses.replace(settings, policy=run_settings([f"policy={policy}"]).policy)
    else:
        settings = dataclasses.replace(settings, policy=policy)
    return run(settings, trace)[1].to_dict()


@pytest.mark.slow  # kept out of the default run (6-minute budget); make test-all runs it
def test_metrics_carry_bounds_regret_and_disk_cache(traces, tmp_path):
    clear_memo()
    t = traces[0]
    lru = replay(tmp_path, t, "lru", 700)
    sec = lru["oracle"]
    assert sec["applies"] and sec["upper_method"] in ("lp", "milp", "lp+milp")
    assert lru["timing"]["oracle_cached"] is False
    refs = lru["overall"]["references"]
    assert sec["upper_hits"] / refs == pytest.approx(lru["overall"]["oracle_upper"])
    assert lru["overall"]["regret"] == pytest.approx(
        lru["overall"]["oracle_upper"] - lru["overall"]["hit_rate"]
    )
    assert sum(s["references"] for s in sec["streams"].values()) == refs
    files = list((tmp_path / "oracle").iterdir())
    assert len(files) == 1 and files[0].suffix == ".npz"  # no temporary file left behind
    # policy=oracle in a run: reads the cached plan, scores oracle_lower, regret = the gap
    orc = replay(tmp_path, t, "oracle", 700)
    assert orc["timing"]["oracle_cached"] is True
    assert orc["overall"]["hits"] == sec["lower_hits"]
    assert orc["overall"]["regret"] == pytest.approx(sec["gap"])
    # another budget is another cache entry; a fresh process reads the file, same numbers
    replay(tmp_path, t, "lru", 2500)
    assert len(list((tmp_path / "oracle").iterdir())) == 2
    clear_memo()
    again = solve(t, 700, False, OracleSettings(cache_dir=str(tmp_path / "oracle")))
    assert again.from_cache
    assert (again.upper, again.lower) == (sec["upper_hits"], sec["lower_hits"])


def test_disabled_oracle_reports_nothing(traces, tmp_path):
    m = replay(tmp_path, traces[0], "lru", 700, "oracle.enabled=false")
    assert m["oracle"] == {"enabled": False}
    assert m["overall"]["regret"] is None


def test_out_of_class_policy_gets_no_regret(traces, tmp_path):
    m = replay(tmp_path, traces[0], {"_target_": f"{__name__}.Promoter"}, 700)
    assert m["oracle"]["applies"] is False and "does not apply" in m["oracle"]["note"]
    assert m["overall"]["regret"] is None and m["overall"]["oracle_upper"] is None
    assert m["oracle"]["oracle_upper"] is not None  # the bound itself is still shown


class Promoter(LRU):
    """An LRU that claims to promote retrieved items (so the bound must not be applied)."""

    name = "promoter"
    outside_oracle_class = True


@pytest.mark.parametrize(
    "bad, key",
    [({"method": "magic"}, "oracle.method"), ({"milp_node_limit": -1}, "oracle.milp_node_limit")],
)
def test_bad_oracle_setting_is_an_error_naming_it(bad, key):
    # an unknown key (oracle.lp_max_refs=5) is rejected when the config is composed (Hydra)
    with pytest.raises(ValueError, match=key.replace(".", r"\.")):
        OracleSettings(**bad)
