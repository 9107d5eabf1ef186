"""Where configuration lives, and the few OmegaConf resolvers MemLens configs use.

``conf/`` sits at the repository top level and is installed as the package ``memlens.conf``,
so the ``memlens`` script finds it from any working directory, in an editable install or not.
"""

from __future__ import annotations

from pathlib import Path

from omegaconf import OmegaConf

import memlens.conf
import memlens.datasets

CONF_DIR = Path(list(memlens.conf.__path__)[0]).resolve()
DATA_DIR = Path(list(memlens.datasets.__path__)[0]).resolve()


def data_path(relative: str) -> str:
    """Absolute path of a file shipped in ``datasets/`` (``${memlens.data:default/x.jsonl.gz}``)."""
    path = DATA_DIR / relative
    return str(path)


def register_resolvers() -> None:
    if not OmegaConf.has_resolver("memlens.data"):
        OmegaConf.register_new_resolver("memlens.data", data_path)


def registered_policies() -> list[str]:
    """Names of every policy declared in ``conf/policy/<name>.yaml``: the policy registry."""
    return sorted(p.stem for p in (CONF_DIR / "policy").glob("*.yaml"))


def policy_targets() -> dict[str, str]:
    """Policy name -> the class its yaml file names with ``_target_``."""
    out = {}
    for name in registered_policies():
        node = OmegaConf.load(CONF_DIR / "policy" / f"{name}.yaml")
        out[name] = str(node["_target_"])
    return out


class SettingsError(ValueError):
    """A setting that cannot run; reported as one ``error:`` line with exit code 2."""


def compose_config(config_name: str, overrides: list[str] = ()):
    """Compose ``conf/<config_name>.yaml`` with Hydra overrides (inside a Hydra app or not).

    The one way MemLens composes configs: the CLI's pre-flight checks, every ``compare`` job,
    tests and notebooks all call this.
    """
    from hydra import initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    from memlens.settings import register_configs

    register_configs()
    if GlobalHydra.instance().is_initialized():
        return _compose_strict(config_name, list(overrides))
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        return _compose_strict(config_name, list(overrides))


def _compose_strict(config_name: str, overrides: list[str]):
    """Hydra's ``compose``, then the boolean settings read strictly, as they were written on
    the command line and in the chosen YAML files (``memlens.setting_values``)."""
    from hydra import compose
    from hydra.core.global_hydra import GlobalHydra
    from omegaconf import open_dict

    from memlens.setting_values import check_file_booleans, check_override_booleans

    cfg = compose(config_name=config_name, overrides=overrides, return_hydra_config=True)
    choices = OmegaConf.to_container(cfg.hydra.runtime.choices)
    with open_dict(cfg):
        del cfg["hydra"]
    check_override_booleans(cfg, overrides)
    # the repository as this composition saw it (hydra.searchpath overrides included)
    loader = GlobalHydra.instance().config_loader()
    _, repository = loader._parse_overrides_and_create_caching_repo(config_name, overrides)
    check_file_booleans(cfg, choices, repository)
    return cfg


def run_settings(overrides: list[str] = ()):
    """Typed ``RunConfig`` exactly as ``memlens simulate <overrides>`` resolves it."""
    from memlens.settings import resolve

    return resolve(compose_config("simulate", overrides))


def policy_config(name: str, overrides: list[str] = ()):
    """The typed policy config exactly as ``memlens simulate policy=NAME <overrides>`` has it."""
    if name not in registered_policies():
        known = ", ".join(registered_policies())
        raise SettingsError(f"unknown policy {name!r} (registered: {known})")
    return run_settings([f"policy={name}", *overrides]).policy


def make_policy(cfg_or_name, overrides: list[str] = ()):
    """A policy instance from a registered name or a (typed or raw) policy config."""
    from memlens.settings import build_policy

    if isinstance(cfg_or_name, str):
        cfg_or_name = policy_config(cfg_or_name, overrides)
    return build_policy(cfg_or_name)


register_resolvers()
