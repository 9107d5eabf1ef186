"""Composed policy configs kept on disk between processes.

``compare`` (and ``recommend``, ``tune``) composes every compared policy's config before any
job runs (``memlens.config.compose.policy_config``: Hydra's whole composition of ``simulate
policy=<name>``, the strict checks, the typed settings), about 0.1 s each, and twice that
while the sweep's workers start beside it.  On the shape of real logs (thousands of short
conversations) those ten compositions were a fifth of a compare (issue 34).

A composition is a function of the config files Hydra can read (every file of every ``file://``
folder on its search path, ``conf/`` included), MemLens's code (a policy's schema is made from
its class's signature: ``memlens._util.sources``), Hydra's and OmegaConf's versions, the
policy's name and the overrides.  Its typed result is kept as JSON under a digest of all of
them (``<cache root>/configs``) and read back through the policy's schema, the same typed
object.  Nothing is kept for a composition that may read something else: an interpolation
(``${...}``: an environment variable, the clock) in an override or in the policy's node, a
``hydra.*`` override, or a config file that names a search path (the folder it adds is not in
the digest).  A failed composition keeps nothing (its error is raised again next time).  An
entry is JSON: reading it runs no code; an unreadable one is composed again and replaced.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from omegaconf import OmegaConf

from memlens._util.atomic import write_text
from memlens._util.cachedir import cache_dir
from memlens._util.sources import package_digest

KIND = "configs"
FORMAT = 1  # of an entry: {"format", "policy", "config"}


def kept_policy_config(name: str, overrides: list[str]):
    """``memlens.config.compose.policy_config(name, overrides)``, read from its entry when
    one was kept for the same inputs, else composed (and kept, when it may be)."""
    from memlens.config.compose import policy_config

    key = _key(name, overrides)
    if key is None:
        return policy_config(name, overrides)
    path = cache_dir(KIND) / f"{key}.json"
    typed = _read(path, name)
    if typed is not None:
        return typed
    typed, plain = _composed(name, overrides)
    if plain is not None:
        _write(path, name, plain)
    return typed


def _key(name: str, overrides: list[str]) -> str | None:
    """The digest of every input of the composition; None when it may read more than that:
    an interpolation or a ``hydra.*`` setting in the overrides, or a ``searchpath`` in a
    config file (a folder it adds would not be in the digest)."""
    import hydra
    import omegaconf
    from hydra.core.global_hydra import GlobalHydra

    from memlens.config.store import CONF_DIR

    if any("${" in o or "hydra." in o for o in overrides):
        return None
    digest = hashlib.sha256(f"memlens-config-v{FORMAT}\0{hydra.__version__}\0".encode())
    digest.update(f"{omegaconf.__version__}\0".encode())
    digest.update(package_digest("memlens-config-code\n").encode())
    digest.update(json.dumps([name, list(overrides)]).encode())
    folders = [CONF_DIR]  # outside Hydra's app, compose_with_hydra reads conf/ alone
    if GlobalHydra.instance().is_initialized():
        where = GlobalHydra.instance().config_loader().get_search_path().get_path()
        digest.update(json.dumps([(e.provider, e.path) for e in where]).encode())
        folders = [Path(e.path[len("file://") :]) for e in where
                   if e.path and e.path.startswith("file://")]  # fmt: skip
    for folder in folders:
        if not _add_folder(digest, folder):
            return None
    return digest.hexdigest()


def _add_folder(digest, folder: Path) -> bool:
    """Every file under ``folder`` (path and bytes, in order) into ``digest``; False when one
    names a search path."""
    if not folder.is_dir():
        digest.update(b"(none)")
        return True
    for path in sorted(
        p for p in folder.rglob("*") if p.is_file() and "__pycache__" not in p.parts
    ):
        data = path.read_bytes()
        if b"searchpath" in data:
            return False
        digest.update(f"{path.relative_to(folder)}\0".encode() + data + b"\0")
    return True


def _composed(name: str, overrides: list[str]):
    """(the typed config, its plain values), as ``policy_config`` makes it; the values are
    None when the policy's node holds an interpolation (which may read another value later)."""
    from memlens.config.compose import policy_composition

    node, typed = policy_composition(name, overrides)
    raw = json.dumps(OmegaConf.to_container(node, resolve=False))
    plain = None if "${" in raw else OmegaConf.to_container(node, resolve=True)
    return typed, plain


def _read(path: Path, name: str):
    """The typed config of the entry at ``path``, or None (no entry, or one not readable as
    this policy's config: it is then composed again and replaced)."""
    try:
        entry = json.loads(path.read_text())
        if entry.get("format") != FORMAT or entry.get("policy") != name:
            return None
        return _typed(name, entry["config"])
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None


def _typed(name: str, plain: dict):
    """The plain values as the typed config composing gives: merged onto the policy's
    schema (the class the ConfigStore holds), converted and checked as ``resolve`` does."""
    from hydra.core.config_store import ConfigStore

    from memlens.config.schema import register_configs, resolve, schema_name

    register_configs()
    node = ConfigStore.instance().load(f"policy/{schema_name(name)}.yaml").node
    return resolve(OmegaConf.create(plain), schema=OmegaConf.get_type(node))


def _write(path: Path, name: str, plain: dict) -> None:
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        text = json.dumps({"format": FORMAT, "policy": name, "config": plain}, sort_keys=True)
        write_text(path, text + "\n")
    except OSError:  # a read-only or full cache: the next process composes again
        pass
