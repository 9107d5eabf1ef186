"""Hydra's config repository copied only when a composition changes it
(memlens.config.compose.copy_repositories_on_write): every registered policy composes as with
Hydra's copy-per-composition, a search path still works, and leaves nothing behind."""

from __future__ import annotations

import copy

import pytest
from hydra import initialize_config_dir
from hydra._internal.config_repository import CachingConfigRepository
from omegaconf import OmegaConf

from memlens.config.compose import compose_config, copy_repositories_on_write
from memlens.config.store import CONF_DIR, registered_policies


def _hydras_own(monkeypatch) -> None:
    """Hydra's constructor as it is: the repository deep-copied for every composition."""

    def __init__(self, delegate):
        self.delegate = copy.deepcopy(delegate)
        self.cache = {}

    def initialize_sources(self, config_search_path):
        self.delegate.initialize_sources(config_search_path)

    monkeypatch.setattr(CachingConfigRepository, "__init__", __init__)
    monkeypatch.setattr(CachingConfigRepository, "initialize_sources", initialize_sources)


def _yaml(overrides: list[str]) -> str:
    return OmegaConf.to_yaml(compose_config("simulate", overrides))


def test_every_policy_composes_as_with_hydras_copies(monkeypatch):
    copy_repositories_on_write()
    ours = {n: _yaml([f"policy={n}", "budget=777"]) for n in registered_policies()}
    _hydras_own(monkeypatch)
    theirs = {n: _yaml([f"policy={n}", "budget=777"]) for n in registered_policies()}
    assert ours == theirs
    assert "budget: 777" in ours["lru"]


def test_a_search_path_is_used_and_leaves_nothing_behind(tmp_path):
    copy_repositories_on_write()
    folder = tmp_path / "sp" / "policy"
    folder.mkdir(parents=True)
    (folder / "my_lru.yaml").write_text("defaults:\n  - lru\n  - _self_\n")
    search = f"hydra.searchpath=[file://{tmp_path / 'sp'}]"
    # one Hydra for both compositions, as inside a command (its loader's repository shared)
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        with_path = compose_config("simulate", [search, "policy=my_lru"])
        lru = compose_config("simulate", ["policy=lru"])
        assert with_path.policy._target_ == lru.policy._target_
        with pytest.raises(Exception, match="my_lru"):  # the next composition has no such path
            compose_config("simulate", ["policy=my_lru"])
