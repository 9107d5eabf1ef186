"""What a config may build: every object a config names comes from a registry.

Why: a config is data.  A run folder's ``resolved_config.yaml`` (read back by the page's
what-if), an experiment or policy file on a Hydra search path, a tuned config, a split file:
any of them can come from a shared outputs folder or a download, and ``_target_:
subprocess.Popen`` with ``args: touch FILE`` in one of them must not start a process.  So the
classes a config may name are listed here, and everything else is refused with one line
before anything is imported or built:

* policies: the classes of ``conf/policy/*.yaml`` (``memlens.config.store.policy_targets``),
  themselves refused unless they live in ``memlens.policies``;
* Hydra launchers and sweepers: the plugins Hydra discovers in the installed packages (the
  basic ones, joblib, Ray); Hydra callbacks: Hydra's own (``hydra.experimental.callbacks``);
  logging handlers, formatters and filters: the standard library's ``logging`` classes;
* splits, embedders, archetypes: by name only (``split=``, ``embeddings.kind``,
  ``archetype:``), so a ``_target_`` anywhere but the policy node is refused outright.

What the command line itself says (``policy._target_=my.Policy``, typed by the person running
the command) and what Python code passes (``memlens.config.compose.make_policy(cfg)``) are the
user's own choice and are not second-guessed; what came from a file is.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from functools import cache

from omegaconf import DictConfig, OmegaConf

from memlens.config.store import SettingsError, policy_targets

#: Where a registered policy's class must live (CONTRIBUTING.md: "Adding a policy").
POLICY_PACKAGE = "memlens.policies."
#: Modules whose classes a Hydra logging config may name (``class:`` or ``():``).
LOGGING_MODULES = ("logging.", "logging.handlers.", "colorlog.")
#: Hydra's own callbacks (``hydra.callbacks.<name>._target_``).
CALLBACK_MODULE = "hydra.experimental.callbacks."


@cache
def registered_policy_targets() -> frozenset[str]:
    """The classes ``conf/policy/*.yaml`` name; a registry entry outside ``memlens.policies``
    is an error (a planted file in the registry must not widen it)."""
    targets = policy_targets()
    for name, target in sorted(targets.items()):
        if not target.startswith(POLICY_PACKAGE):
            raise SettingsError(f"conf/policy/{name}.yaml: _target_ {target} is not a class in "
                                f"{POLICY_PACKAGE[:-1]} (a registered policy lives there)")  # fmt: skip
    return frozenset(targets.values())


def check_policy_target(target, where: str) -> None:
    """``target`` is the class of a registered policy, else one :class:`SettingsError`."""
    if isinstance(target, str) and target in registered_policy_targets():
        return
    names = ", ".join(sorted(policy_targets()))
    raise SettingsError(f"{where}: policy _target_ {str(target)[:120]!r} is not a registered "
                        f"policy (a config file may name only these: {names})")  # fmt: skip


@cache
def _plugin_targets(kind: str) -> frozenset[str]:
    """The classes of Hydra's installed launcher or sweeper plugins."""
    from hydra.core.plugins import Plugins
    from hydra.plugins.launcher import Launcher
    from hydra.plugins.sweeper import Sweeper

    base = {"launcher": Launcher, "sweeper": Sweeper}[kind]
    return frozenset(f"{c.__module__}.{c.__qualname__}" for c in Plugins.instance().discover(base))


def _named_classes(node, key: str) -> Iterator[tuple[str, str]]:
    """(path, value) of every ``key`` entry anywhere in a plain container."""
    stack = [("", node)]
    while stack:
        path, value = stack.pop()
        if isinstance(value, dict):
            for k, v in value.items():
                here = f"{path}.{k}" if path else str(k)
                if k == key:
                    yield here, v
                stack.append((here, v))
        elif isinstance(value, list):
            stack.extend((f"{path}[{i}]", v) for i, v in enumerate(value))


def check_hydra_node(hydra: DictConfig, where: str) -> None:
    """The launcher, sweeper, callbacks and logging classes a composed ``hydra`` node names."""
    plain = OmegaConf.to_container(hydra, resolve=False)
    for kind in ("launcher", "sweeper"):
        target = (plain.get(kind) or {}).get("_target_")
        if target is not None and target not in _plugin_targets(kind):
            known = ", ".join(sorted(_plugin_targets(kind)))
            raise SettingsError(f"{where}: hydra.{kind} _target_ {str(target)[:120]!r} is not an "
                                f"installed Hydra {kind} (installed: {known})")  # fmt: skip
    for path, target in _named_classes(plain.get("callbacks") or {}, "_target_"):
        if not (isinstance(target, str) and target.startswith(CALLBACK_MODULE)):
            raise SettingsError(f"{where}: hydra.callbacks.{path} names {str(target)[:120]!r}, "
                                f"not one of Hydra's callbacks ({CALLBACK_MODULE}*)")  # fmt: skip
    for block in ("job_logging", "hydra_logging"):
        for key in ("class", "()"):
            for path, target in _named_classes(plain.get(block) or {}, key):
                if not (isinstance(target, str) and target.startswith(LOGGING_MODULES)):
                    raise SettingsError(f"{where}: hydra.{block}.{path} names "
                                        f"{str(target)[:120]!r}, not a logging class")  # fmt: skip


def _sets_target(overrides: Iterable[str]) -> bool:
    """Does a command-line override set ``policy._target_`` itself (the user's own choice)?"""
    return any(o.lstrip("+~").split("=", 1)[0] == "policy._target_" for o in overrides)


def check_config(cfg, where: str, overrides: Iterable[str] = ()) -> None:
    """A config builds nothing outside the registries: its policy node names a registered
    class (unless an override in ``overrides``, the command line, set it), any
    ``policy._target_=`` entry of ``policy_overrides`` came from ``overrides`` too, and no
    other node has a ``_target_`` (splits, embedders and the rest are chosen by name)."""
    overrides = list(overrides)
    plain = OmegaConf.to_container(cfg, resolve=False) if isinstance(cfg, DictConfig) else cfg
    if not isinstance(plain, dict):
        raise SettingsError(f"{where}: a config must be a mapping of settings")
    policy = plain.get("policy")
    if isinstance(policy, dict) and "_target_" in policy and not _sets_target(overrides):
        check_policy_target(policy["_target_"], where)
    typed = " ".join(o for o in overrides if o.lstrip("+~").startswith("policy_overrides="))
    for entry in plain.get("policy_overrides") or []:
        if _sets_target([str(entry)]) and str(entry) not in typed:
            raise SettingsError(f"{where}: policy_overrides sets policy._target_ ({entry}); only "
                                "the command line may name an unregistered policy class")  # fmt: skip
    rest = {k: v for k, v in plain.items() if k != "policy"}
    for path, _ in _named_classes(rest, "_target_"):
        raise SettingsError(f"{where}: {path}: only the policy is built from a config; "
                            "everything else is chosen by name (no _target_)")  # fmt: skip
