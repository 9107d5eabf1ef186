"""`memlens tune`: deterministic with a seed, a deployment objective, a ready policy config."""

from __future__ import annotations

import pytest
from omegaconf import OmegaConf

from memlens.config.compose import compose_config, policy_config
from memlens.config.schema import build_policy, policy_kwargs, policy_schema, resolve
from memlens.learn.tune import INFEASIBLE, Score, overrides_of, tune, tuned_yaml

SMALL = ["split=tiny", "budget=512", "n_trials=3", "seed=7", "mlflow.enabled=false"]


def settings(*extra: str):
    return resolve(compose_config("tune", [*SMALL, *extra]))


@pytest.fixture(scope="module")
def tuned() -> dict:
    return tune(settings())


@pytest.mark.slow  # kept out of the default run (6-minute budget); make test-all runs it
def test_the_same_seed_gives_the_same_trials_and_best_parameters(tuned):
    again = tune(settings())
    assert again["best_params"] == tuned["best_params"]
    assert again["trials"] == tuned["trials"]
    assert set(tuned["best_params"]) == set(settings().hparams_search.params)


def test_the_best_is_the_cheapest_feasible_trial_and_is_reported_on_both_sides(tuned):
    target = settings().target
    feasible = [t for t in tuned["trials"] if t["request_success"] >= target]
    if feasible:
        best = min(feasible, key=lambda t: t["total_cost_usd"])
    else:
        best = max(tuned["trials"], key=lambda t: t["request_success"])
    assert tuned["best_params"] == best["params"]
    assert set(tuned["scores"]) == {"tuned/train", "tuned/test", "defaults/train", "defaults/test"}
    assert tuned["scores"]["tuned/train"]["total_cost_usd"] == best["total_cost_usd"]


def test_infeasible_settings_rank_after_every_feasible_one_by_shortfall():
    cheap_bad, dear_ok = Score(0.49, 1.0, 4), Score(0.5, 1e6, 4)
    assert dear_ok.objective(0.5) == 1e6 < cheap_bad.objective(0.5)
    assert cheap_bad.objective(0.5) == pytest.approx(INFEASIBLE * 1.01)
    assert Score(0.1, 0.0, 4).objective(0.5) > Score(0.4, 9.0, 4).objective(0.5)


def test_the_written_config_builds_the_tuned_policy(tmp_path, tuned):
    s = settings()
    text = tuned_yaml(s, tuned["best_params"], "tuned in a test")
    node = OmegaConf.load(tmp_path.joinpath("rule_tuned.yaml").write_text(text) and
                          tmp_path / "rule_tuned.yaml")  # fmt: skip
    assert list(node.defaults) == ["rule_schema", "_self_"]
    del node["defaults"]
    typed = OmegaConf.to_object(OmegaConf.merge(OmegaConf.structured(
        policy_schema(type(build_policy(policy_config("rule"))))), node))  # fmt: skip
    expected = policy_config("rule", overrides_of(tuned["best_params"]))
    assert policy_kwargs(typed) == policy_kwargs(expected)
    assert typed.admit_threshold == tuned["best_params"]["admit_threshold"]


def test_a_bad_search_space_is_refused_when_settings_are_read():
    with pytest.raises(ValueError, match="hparams_search.params.admit_threshold"):
        settings("hparams_search.params.admit_threshold.low=2.0")
