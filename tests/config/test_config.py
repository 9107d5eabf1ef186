"""Config tests with Hydra's compose API (as in lightning-hydra-template)."""

from __future__ import annotations

from pathlib import Path

import pytest
from omegaconf import OmegaConf

from memlens.config.compose import compose_config, make_policy
from memlens.config.store import CONF_DIR, registered_policies
from memlens.policy import Policy


def composed(name: str, overrides: list[str] | None = None):
    return compose_config(name, overrides or [])


@pytest.mark.parametrize("name", ["simulate", "compare"])
def test_primary_configs_compose_and_resolve(name):
    cfg = composed(name)
    resolved = OmegaConf.to_container(cfg, resolve=True)
    assert Path(resolved["trace"]).exists(), "the bundled default trace must ship"
    assert resolved["mlflow"]["tracking_uri"].startswith("sqlite:///")
    assert resolved["demand_fetch"] is False


@pytest.mark.parametrize("policy", registered_policies())
@pytest.mark.slow  # kept out of the default run (6-minute budget); make test-all runs it
def test_every_policy_composes_and_instantiates(policy):
    cfg = composed("simulate", [f"policy={policy}", "budget=777"])
    assert cfg.budget == 777
    obj = make_policy(cfg.policy)
    assert isinstance(obj, Policy)


def test_experiment_files_are_global_packages():
    for path in (CONF_DIR / "experiment").glob("*.yaml"):
        assert path.read_text().startswith("# @package _global_"), path
        cfg = composed("compare", [f"experiment={path.stem}"])
        resolved = OmegaConf.to_container(cfg, resolve=True)
        for trace in resolved.get("traces") or [resolved["trace"]]:
            assert Path(trace).exists(), f"{path.name} names a trace that does not ship: {trace}"


def test_unknown_override_is_an_error():
    from hydra.errors import ConfigCompositionException

    with pytest.raises(ConfigCompositionException):
        composed("simulate", ["policy=does_not_exist"])


@pytest.mark.parametrize("policy", ["rule", "generative_agents"])
def test_yaml_type_base_and_boosts_are_the_code_defaults(policy):
    """The values are declared in yaml for the reader; the code's defaults are the source."""
    import inspect

    from memlens.config.compose import policy_config
    from memlens.trace.features import DEFAULT_TYPE_BASE, content_boost

    cfg = policy_config(policy)
    assert cfg.type_base == DEFAULT_TYPE_BASE
    defaults = {k: p.default for k, p in inspect.signature(content_boost).parameters.items()
                if p.default is not inspect.Parameter.empty}  # fmt: skip
    assert cfg.boosts == defaults
