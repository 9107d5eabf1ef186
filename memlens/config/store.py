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
    """Policy name -> the class its yaml file names with ``_target_``.

    Read once per state of the files: a compare asks for it a dozen times (every job's check
    and composition), and loading eleven YAML files with OmegaConf costs 0.2 s each time
    (issue 34).  The memo is keyed by every file's name, size and modification time, so an
    edited or added policy file is read again."""
    files = sorted((CONF_DIR / "policy").glob("*.yaml"))
    key = tuple((f.name, st.st_size, st.st_mtime_ns) for f in files for st in [f.stat()])
    if _TARGETS.get("key") != key:
        out = {}
        for f in files:
            out[f.stem] = str(OmegaConf.load(f)["_target_"])
        _TARGETS.update(key=key, targets=out)
    return dict(_TARGETS["targets"])


_TARGETS: dict = {}


class SettingsError(ValueError):
    """A setting that cannot run; reported as one ``error:`` line with exit code 2."""


register_resolvers()
