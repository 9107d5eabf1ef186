"""Composing a config exactly as the CLI does: Hydra's compose, then strict booleans, then the
typed settings (``memlens.config.schema``).  The one way MemLens composes configs: the CLI's
pre-flight checks, every ``compare`` job, tests and notebooks all call this.
"""

from __future__ import annotations

import copy

from omegaconf import OmegaConf

from memlens.config.registry import check_config, check_hydra_node
from memlens.config.schema import build_policy, register_configs, resolve
from memlens.config.store import CONF_DIR, SettingsError, registered_policies


def compose_config(config_name: str, overrides: list[str] = ()):
    """Compose ``conf/<config_name>.yaml`` with Hydra overrides (inside a Hydra app or not).

    The one way MemLens composes configs: the CLI's pre-flight checks, every ``compare`` job,
    tests and notebooks all call this.
    """
    return compose_with_hydra(config_name, overrides)[0]


def copy_repositories_on_write() -> None:
    """Make Hydra copy its config repository for a composition only when the composition
    changes it (a ``hydra.searchpath``), not every time.

    Each Hydra composition wraps the loader's repository in a ``CachingConfigRepository``,
    whose constructor deep-copies it, the ConfigStore's every schema included, "to avoid
    mutating it with initialize_sources()": a fifth of a composition's time, paid by each of a
    compare's policies (issue 34).  Only ``initialize_sources`` (a search path in the primary
    config or on the command line) mutates it; every other use reads.  So the copy is made
    there, on the first call, and a composition without a search path reads the loader's own
    repository.  Installed once per process; ``tests/config/test_compose_copies.py`` holds
    every registered policy's composition, and a search path's, to Hydra's own."""
    from hydra._internal.config_repository import CachingConfigRepository

    if getattr(CachingConfigRepository, "_memlens_copy_on_write", False):
        return

    def __init__(self, delegate) -> None:
        self.delegate = delegate
        self.cache = {}
        self._memlens_own = False

    def initialize_sources(self, config_search_path) -> None:
        if not self._memlens_own:
            self.delegate = copy.deepcopy(self.delegate)
            self._memlens_own = True
        self.delegate.initialize_sources(config_search_path)

    CachingConfigRepository.__init__ = __init__
    CachingConfigRepository.initialize_sources = initialize_sources
    CachingConfigRepository._memlens_copy_on_write = True


def compose_with_hydra(config_name: str, overrides: list[str] = (), keep_full: bool = False):
    """(:func:`compose_config`'s config, ``{"hydra.run.dir": ..., "hydra.sweep.dir": ...,
    "hydra.output_subdir": ..., "hydra.mode": ...}`` resolved): the pre-flight checks read
    where the run folder will be from the second, and the run its mode.  ``keep_full``: the
    second also holds ``"full"``, a copy of Hydra's whole composition (its ``hydra`` node
    included), which the run then uses instead of composing again
    (``memlens.config.app.known_mode``)."""
    from hydra import initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    register_configs()
    copy_repositories_on_write()
    if GlobalHydra.instance().is_initialized():
        return _compose_strict(config_name, list(overrides), keep_full)
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        return _compose_strict(config_name, list(overrides), keep_full)


def _compose_strict(config_name: str, overrides: list[str], keep_full: bool = False):
    """Hydra's ``compose``, then the boolean settings read strictly, as they were written on
    the command line and in the chosen YAML files (``memlens._util.values``), and nothing named
    that the registries do not list (``memlens.config.registry``)."""
    from hydra import compose
    from omegaconf import open_dict

    from memlens._util.values import check_file_booleans, check_override_booleans

    cfg = compose(config_name=config_name, overrides=overrides, return_hydra_config=True)
    choices = OmegaConf.to_container(cfg.hydra.runtime.choices)
    where = _provenance(config_name, choices)
    check_hydra_node(cfg.hydra, where)
    hydra = {key: OmegaConf.select(cfg, key, default=None, throw_on_resolution_failure=False)
             for key in ("hydra.run.dir", "hydra.sweep.dir", "hydra.output_subdir",
                         "hydra.mode")}  # fmt: skip
    if keep_full:
        hydra["full"] = copy.deepcopy(cfg)
    with open_dict(cfg):
        del cfg["hydra"]
    check_config(cfg, where, overrides)
    check_override_booleans(cfg, overrides)
    check_file_booleans(cfg, choices, _repository(config_name, overrides))
    return cfg, hydra


_REPOSITORIES: dict[tuple, object] = {}


def _repository(config_name: str, overrides: list[str]):
    """The config repository as this composition saw it (``hydra.searchpath`` overrides
    included), for reading the chosen YAML files again.  Made once per search path and
    ``hydra.searchpath`` override in a process: making one deep-copies Hydra's whole config
    store (a third of a composition's time, once per compared policy; issue 34).  It caches
    the files it reads, as Hydra's own does within one composition."""
    from hydra.core.global_hydra import GlobalHydra

    loader = GlobalHydra.instance().config_loader()
    search = tuple((p.provider, p.path) for p in loader.get_search_path().get_path())
    key = (config_name, search, tuple(o for o in overrides if "hydra.searchpath" in o))
    if key not in _REPOSITORIES:
        if len(_REPOSITORIES) >= 16:
            _REPOSITORIES.clear()
        _REPOSITORIES[key] = loader._parse_overrides_and_create_caching_repo(config_name,
                                                                             overrides)[1]  # fmt: skip
    return _REPOSITORIES[key]


def _provenance(config_name: str, choices: dict) -> str:
    """Where a composed config's policy came from, for an error line: the config and the
    files chosen for its ``policy`` and ``experiment`` groups."""
    parts = [f"{group}={choices[group]}" for group in ("policy", "experiment")
             if choices.get(group)]  # fmt: skip
    return " ".join(parts) if parts else f"conf/{config_name}.yaml"


def run_settings(overrides: list[str] = ()):
    """Typed ``RunConfig`` exactly as ``memlens simulate <overrides>`` resolves it."""
    return resolve(compose_config("simulate", overrides))


def check_policy_name(name: str) -> None:
    """Raise ``SettingsError`` naming the registered policies when ``name`` is not one."""
    if name not in registered_policies():
        known = ", ".join(registered_policies())
        raise SettingsError(f"unknown policy {name!r} (registered: {known})")


def policy_config(name: str, overrides: list[str] = ()):
    """The typed policy config exactly as ``memlens simulate policy=NAME <overrides>`` has it."""
    return policy_composition(name, overrides)[1]


def policy_composition(name: str, overrides: list[str] = ()):
    """(the composed ``policy`` node, as Hydra left it, and :func:`policy_config`'s typed
    config): ``memlens.config.memo`` reads the node for interpolations."""
    check_policy_name(name)
    cfg = compose_config("simulate", [f"policy={name}", *overrides])
    return cfg.policy, resolve(cfg).policy


def make_policy(cfg_or_name, overrides: list[str] = ()):
    """A policy instance from a registered name or a (typed or raw) policy config."""
    if isinstance(cfg_or_name, str):
        cfg_or_name = policy_config(cfg_or_name, overrides)
    return build_policy(cfg_or_name)
