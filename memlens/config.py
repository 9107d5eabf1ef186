"""Where configuration lives, and the few OmegaConf resolvers MemLens configs use.

``conf/`` sits at the repository top level and is installed as the package ``memlens.conf``,
so the ``memlens`` script finds it from any working directory, in an editable install or not.
"""

from __future__ import annotations

from pathlib import Path

from omegaconf import DictConfig, OmegaConf

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
    """Names of every policy declared in ``conf/policy/<name>.yaml``."""
    return sorted(p.stem for p in (CONF_DIR / "policy").glob("*.yaml"))


def policy_config(name: str) -> DictConfig:
    path = CONF_DIR / "policy" / f"{name}.yaml"
    if not path.exists():
        known = ", ".join(registered_policies())
        raise KeyError(f"unknown policy {name!r} (registered: {known})")
    return OmegaConf.load(path)


def make_policy(cfg: DictConfig):
    """Instantiate a policy from its config node (``_target_`` plus parameters)."""
    from hydra.utils import instantiate

    return instantiate(cfg, _convert_="all")


register_resolvers()
