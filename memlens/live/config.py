"""The live session's configuration: which policy, with which parameters, at which budget.

One resolved form, :class:`LiveConfig`, whatever it came from (a registered name plus
parameters, a tuned policy file from ``memlens tune``, a run's ``resolved_config.yaml``, or a
record's header), checked the way a run checks its policy: the class must be a registered
policy (``memlens.config.registry``: a file may not name any other class) and the parameters
are typed by the policy's schema (``memlens.config.schema.policy_schema``).  The same dict goes
into the record's header, so a replay of the record builds exactly this policy.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import orjson
from omegaconf import OmegaConf
from omegaconf.errors import OmegaConfBaseException

from memlens.config.registry import check_policy_target
from memlens.config.schema import policy_kwargs, policy_schema, resolve
from memlens.config.store import CONF_DIR, SettingsError, policy_targets
from memlens.live.retrieval import BLOCKS, settings_from
from memlens.policy import Policy
from memlens.simulator import _check_budget

#: Policies that cannot run live, and why.
OFFLINE = {"memlens.policies.oracle.Oracle": "the oracle reads the future (an offline bound)"}


@dataclass(frozen=True)
class LiveConfig:
    """A resolved live configuration (module docstring)."""

    policy: dict  # {"_target_": class, **constructor parameters}, JSON-able
    budget: int
    demand_fetch: bool = False
    seed: int = 0
    tokenizer: str | None = None
    retrieval: dict | None = None  # the retrieval, tiers, embeddings, compression blocks, or None

    def to_json(self) -> dict:
        out = {"policy": self.policy, "budget": self.budget, "demand_fetch": self.demand_fetch,
               "seed": self.seed, "tokenizer": self.tokenizer}  # fmt: skip
        if self.retrieval is not None:  # a session without retrieval keeps the older header
            out["retrieval"] = self.retrieval
        return out

    @classmethod
    def from_json(cls, data: dict, where: str) -> LiveConfig:
        """From a record's header (checked again: a record is a file)."""
        try:
            return make_config(policy_node(data["policy"], where), data["budget"],
                               data.get("demand_fetch", False), data.get("seed", 0),
                               data.get("tokenizer"), where, data.get("retrieval"))  # fmt: skip
        except (KeyError, TypeError) as exc:
            raise ValueError(f"{where}: header: live config lacks {exc}") from None

    @property
    def name(self) -> str:
        return self.policy["_target_"].rsplit(".", 1)[-1]

    def build(self) -> Policy:
        """A fresh policy instance (one per stream)."""
        from hydra.utils import get_class

        kwargs = {k: v for k, v in self.policy.items() if k != "_target_"}
        return get_class(self.policy["_target_"])(**kwargs)

    def retrieval_settings(self):
        """The typed retrieval blocks (``memlens.live.retrieval``), or None when it is off."""
        return settings_from(self.retrieval, "retrieval")


def registered_node(name, params: dict) -> dict:
    """The policy config of registered policy ``name`` with ``params`` set on it."""
    targets = policy_targets()
    if not isinstance(name, str) or name not in targets:
        raise ValueError(f"policy: unknown policy {name!r} (registered: {', '.join(targets)})")
    node = OmegaConf.to_container(OmegaConf.load(CONF_DIR / "policy" / f"{name}.yaml"))
    node.pop("defaults", None)
    node.update(params)
    return node


def policy_node(node, where: str) -> dict:
    """A policy config from a file: a mapping naming a registered class."""
    if not isinstance(node, dict):
        raise ValueError(f"{where}: policy: expected a mapping with _target_, got {node!r}")
    node = {k: v for k, v in node.items() if k != "defaults"}
    try:
        check_policy_target(node.get("_target_"), where)
    except SettingsError as exc:
        raise ValueError(str(exc)) from None
    return node


def make_config(node: dict, budget, demand_fetch=False, seed=0, tokenizer=None,
                where: str = "MemoryManager", retrieval: dict | None = None) -> LiveConfig:  # fmt: skip
    """Type the policy's parameters by its schema and check the rest; ``ValueError`` naming
    the field otherwise."""
    from hydra.utils import get_class

    target = node.get("_target_")
    if target in OFFLINE:
        raise ValueError(f"{where}: policy: {OFFLINE[target]}; it cannot run live")
    try:
        typed = resolve(OmegaConf.create(node), schema=policy_schema(get_class(target)))
    except OmegaConfBaseException as exc:
        key = getattr(exc, "full_key", None) or "?"
        raise ValueError(
            f"{where}: policy.{key}: {exc.msg if hasattr(exc, 'msg') else exc}"
        ) from None
    except ValueError as exc:
        raise ValueError(f"{where}: policy: {exc}") from None
    _, kwargs = policy_kwargs(typed)
    policy = orjson.loads(orjson.dumps({"_target_": target, **kwargs}))  # plain JSON values
    try:
        budget = _check_budget(budget)
    except ValueError as exc:
        raise ValueError(f"{where}: budget: {exc}") from None
    if not isinstance(demand_fetch, bool):
        raise ValueError(f"{where}: demand_fetch: must be true or false, got {demand_fetch!r}")
    if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
        raise ValueError(f"{where}: seed: must be a non-negative integer, got {seed!r}")
    if tokenizer is not None and not isinstance(tokenizer, str):
        raise ValueError(
            f"{where}: tokenizer: must be a string such as 'approx', got {tokenizer!r}"
        )
    typed = settings_from(retrieval, where)
    return LiveConfig(policy, budget, demand_fetch, seed, tokenizer,
                      None if typed is None else typed.to_json())  # fmt: skip


def retrieval_blocks(retrieval: dict | None, tiers: dict | None, embeddings: dict | None,
                     compression: dict | None) -> dict | None:  # fmt: skip
    """The manager's keyword arguments as settings blocks: ``retrieval`` given (even ``{}``)
    turns retrieval on unless it says ``enabled: false``."""
    if retrieval is None:
        if tiers or embeddings or compression:
            raise ValueError("tiers/embeddings/compression: only with retrieval= (the lower "
                             "tiers are read through retrieval)")  # fmt: skip
        return None
    if not isinstance(retrieval, dict):
        raise ValueError(f"retrieval: expected a mapping of settings, got {retrieval!r}")
    return {"retrieval": {"enabled": True, **retrieval}, "tiers": tiers or {},
            "embeddings": embeddings or {}, "compression": compression or {}}  # fmt: skip


def config_file(path: str | os.PathLike, budget=None, demand_fetch=None, seed=None,
                tokenizer=None) -> LiveConfig:  # fmt: skip
    """A tuned policy file (``memlens tune``: the policy node at the top) or a run's resolved
    config (``policy:``, ``budget:``, ...); the arguments given override the file's."""
    where = str(path)
    if not Path(path).is_file():
        raise ValueError(f"{where}: no such config file")
    try:
        raw = OmegaConf.to_container(OmegaConf.load(path))
    except Exception as exc:  # a malformed file, whatever the parser says
        raise ValueError(f"{where}: not a YAML config: {exc}") from None
    if not isinstance(raw, dict):
        raise ValueError(f"{where}: expected a mapping at the top")
    run = {} if "_target_" in raw else raw
    node = policy_node(raw if "_target_" in raw else raw.get("policy"), where)
    budget = run.get("budget") if budget is None else budget
    if budget is None:
        raise ValueError(f"{where}: budget: the file has none; pass budget=")
    if isinstance(budget, list):  # a compare config: budgets
        raise ValueError(f"{where}: budget: one budget is needed, got {budget}; pass budget=")
    blocks = {name: run[name] for name in BLOCKS if isinstance(run.get(name), dict)}
    return make_config(
        node,
        budget,
        run.get("demand_fetch", False) if demand_fetch is None else demand_fetch,
        run.get("seed", 0) if seed is None else seed,
        run.get("tokenizer") if tokenizer is None else tokenizer,
        where,
        blocks if blocks.get("retrieval", {}).get("enabled") else None,
    )
