"""Typed settings of every MemLens command, registered in Hydra's ConfigStore.

The dataclasses here (and the blocks they nest, each defined next to the component it
configures) are the schema: Hydra and OmegaConf check types, defaults and unknown keys once,
when a command's config is composed.  :func:`resolve` then turns the composed config into
these objects, which runs every ``__post_init__`` range check, then refuses any non-finite
float or beyond-64-bit int left anywhere (policy parameters too), before any work starts.
Booleans are read strictly when the config is composed (``memlens._util.values``: ``true``
or ``false``, never ``no`` or ``1``).  Nothing downstream reads a raw ``DictConfig``.

Policies are typed the same way: each ``conf/policy/<name>.yaml`` names its class with
``_target_``, and :func:`policy_schema` derives the schema from that class's constructor
signature (parameter names, annotations and defaults), so a policy's parameters are declared
once, in Python, and a misspelt or mistyped ``policy.<param>=...`` is a composition error.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import inspect
import math
import types
import typing
from dataclasses import MISSING, dataclass, field, make_dataclass
from functools import cache
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

from memlens._util.values import check_numbers, number
from memlens.analyze.costs import CostsConfig
from memlens.analyze.eventlog import EventLogConfig
from memlens.analyze.stats import StatsConfig
from memlens.oracle.settings import OracleSettings
from memlens.retrieval.compression import CompressionConfig
from memlens.retrieval.config import RetrievalConfig
from memlens.retrieval.embeddings import EmbeddingsConfig
from memlens.retrieval.tiers import TiersConfig
from memlens.trace.limits import TraceLimits

ENGINES = ("auto", "fast", "reference")
DEFAULT_TRACE = "${memlens.data:default/agent-small.jsonl.gz}"
DEFAULT_BUDGETS = (512, 1024, 2048, 4096)


@dataclass
class MlflowConfig:
    enabled: bool = True
    tracking_uri: str = "sqlite:///mlflow.db"  # MLflow 3 refuses ./mlruns file stores
    experiment: str = "memlens"
    artifact_location: str | None = "mlartifacts"  # used when the experiment is first created
    required: bool = False  # true: exit 3 when tracking failed (the run's files are still written)

    def __post_init__(self) -> None:
        check_tracking_uri(self.tracking_uri)
        if self.enabled:
            check_tracking_file(self.tracking_uri)
        if not self.experiment.strip():
            raise ValueError("mlflow.experiment must be a non-empty experiment name")


#: The tracking-store schemes MLflow itself registers (``mlflow.tracking._tracking_service.
#: utils``): a local path (no scheme) or ``file:``, the databases it reaches through SQLAlchemy
#: (``postgresql+psycopg2://`` names a driver too), a tracking server, Databricks and Unity
#: Catalog.  Plugins add schemes through the ``mlflow.tracking_store`` entry point group.
MLFLOW_SCHEMES = ("", "file", "sqlite", "postgresql", "mysql", "mssql", "http", "https",
                  "databricks", "databricks-uc", "uc")  # fmt: skip


def check_tracking_uri(uri: str) -> None:
    """Refuse a tracking URI MLflow cannot use, by its scheme alone (nothing is contacted)."""
    from importlib.metadata import entry_points
    from urllib.parse import urlsplit

    if not uri.strip():
        raise ValueError("mlflow.tracking_uri is empty (mlflow.enabled=false turns MLflow off)")
    parts = urlsplit(uri)
    scheme = "" if len(parts.scheme) == 1 else parts.scheme.lower()  # C:\... is a path
    base = scheme.split("+", 1)[0]
    if base not in MLFLOW_SCHEMES:
        plugins = sorted(e.name for e in entry_points(group="mlflow.tracking_store"))
        if scheme not in plugins:
            known = ", ".join(f"{s}:" for s in [*MLFLOW_SCHEMES[1:], *plugins])
            raise ValueError(f"mlflow.tracking_uri={uri}: MLflow has no tracking store for "
                             f"scheme {scheme!r} (schemes: {known} or a local path)")  # fmt: skip
    if base in ("http", "https") and not parts.netloc:
        raise ValueError(f"mlflow.tracking_uri={uri}: a tracking server URI needs a host")


def check_tracking_file(uri: str) -> None:
    """A ``sqlite:///`` store must name a database file in an existing folder: MLflow would
    otherwise retry a directory (or a missing folder) for about two minutes before failing."""
    if not uri.startswith("sqlite:///"):
        return
    path = Path(uri.removeprefix("sqlite:///").split("?", 1)[0])
    if path.is_dir():
        raise ValueError(f"mlflow.tracking_uri={uri}: {path} is a folder, not a database file")
    if not path.absolute().parent.is_dir():
        raise ValueError(f"mlflow.tracking_uri={uri}: folder {path.absolute().parent} does not "
                         "exist")  # fmt: skip


@dataclass
class OutputConfig:
    moves: bool = True  # write moves.parquet (every tier move)


def check_budget(budget: int, key: str = "budget") -> None:
    if isinstance(budget, bool) or not isinstance(budget, int) or budget <= 0:
        raise ValueError(f"{key} must be a positive integer number of tokens, got {budget!r}")
    if budget >= 2**62:
        raise ValueError(f"{key} must be below 2**62 tokens, got {budget}")


#: The bootstrap holds a (resamples x streams) float64 count matrix: a million resamples of 100
#: streams is already 800 MB, so more is refused before the replay rather than failing after it.
MAX_BOOTSTRAP = 1_000_000


def check_stats(stats: StatsConfig) -> None:
    """What ``StatsConfig`` leaves open: a seed numpy accepts (``seed + 1`` seeds an unpaired
    comparison's second side) and a resample count that fits in memory."""
    number("stats.seed", stats.seed, low=0, below=2**63 - 1, integer=True)
    number("stats.bootstrap", stats.bootstrap, low=100, high=MAX_BOOTSTRAP, integer=True)


@dataclass
class CommonConfig:
    """Settings shared by ``simulate`` and ``compare``."""

    trace: str = DEFAULT_TRACE  # the trace to replay (default: the bundled generated trace)
    trace_cache: bool = True  # keep the parsed trace on disk, keyed by the file's bytes
    trace_limits: TraceLimits = field(default_factory=TraceLimits)  # blank lines, gzip ratio
    demand_fetch: bool = False  # bring missed needs back into working memory after a request
    seed: int = 0  # seeds every np.random.Generator a policy receives
    engine: str = "auto"  # auto | reference | fast (compiled kernel, for policies that have one)
    price_per_mtok: float = 3.0  # USD per million context tokens, for cost_usd
    progress: bool | None = None  # null: progress bar only on a terminal
    tiers: TiersConfig = field(default_factory=TiersConfig)
    retrieval: RetrievalConfig = field(default_factory=RetrievalConfig)
    embeddings: EmbeddingsConfig = field(default_factory=EmbeddingsConfig)
    compression: CompressionConfig = field(default_factory=CompressionConfig)
    oracle: OracleSettings = field(default_factory=OracleSettings)
    stats: StatsConfig = field(default_factory=StatsConfig)  # intervals: bootstrap over streams
    costs: CostsConfig = field(default_factory=CostsConfig)
    output: OutputConfig = field(default_factory=OutputConfig)
    events: EventLogConfig = field(default_factory=EventLogConfig)  # events.parquet, report.html
    mlflow: MlflowConfig = field(default_factory=MlflowConfig)
    # where the work runs: loky (processes on this machine) or ray (a Ray cluster at
    # ray_address: host:port, or auto = $RAY_ADDRESS / the local cluster, or with shards a Ray
    # started on 127.0.0.1 for the run; pip install memlens[ray])
    backend: str = "loky"
    ray_address: str = "auto"
    # split the trace by stream into this many shards, one task per shard and job, merged
    # exactly (memlens.runs.sharded): a trace larger than one machine; 0 = one process
    shards: int = 0

    def __post_init__(self) -> None:
        if not self.trace.strip():
            raise ValueError("trace must name a trace file, got an empty string")
        if self.backend not in ("loky", "ray"):
            raise ValueError(f"backend must be loky or ray, got {self.backend!r}")
        if self.backend == "ray" and importlib.util.find_spec("ray") is None:
            raise ValueError("backend=ray needs Ray, which is not installed: "
                             "pip install 'memlens[ray]'")  # fmt: skip
        number("shards", self.shards, low=0, high=65536, integer=True)
        number("seed", self.seed, low=0, integer=True)
        check_stats(self.stats)
        if self.engine not in ENGINES:
            raise ValueError(f"engine must be auto, fast or reference, got {self.engine!r}")
        if not (math.isfinite(self.price_per_mtok) and self.price_per_mtok >= 0):
            raise ValueError(
                f"price_per_mtok must be a finite non-negative number, got {self.price_per_mtok}"
            )


@dataclass
class RunConfig(CommonConfig):
    """``memlens simulate``: one trace, one policy, one budget."""

    policy: Any = None  # the policy node: conf/policy/<name>.yaml (``policy=NAME``)
    budget: int = 2048  # working-memory tokens, per stream

    def __post_init__(self) -> None:
        super().__post_init__()
        check_budget(self.budget)


TABLES = ("verdict", "full")  # compare's printed output (memlens.analyze.verdict)


@dataclass
class CompareConfig(CommonConfig):
    """``memlens compare``: every (trace, policy, budget), each replayed as ``simulate`` would."""

    traces: list[str] | None = None  # null: [trace]
    policies: list[str] | None = None  # null: every conf/policy/*.yaml
    budgets: list[int] = field(default_factory=lambda: list(DEFAULT_BUDGETS))
    # policy parameter overrides, in simulate's grammar ("policy.admit_threshold=0.9"), applied
    # to every listed policy; `memlens compare policy.x=v` is rewritten into this list
    policy_overrides: list[str] = field(default_factory=list)
    # a compared policy: every row also gets its paired difference to this policy (same trace,
    # same budget, same streams) with a bootstrap interval, and the table a `vs <reference>` column
    reference: str | None = None
    # what compare prints: verdict (per budget, the policies ranked by hit_rate with the paired
    # difference to `reference`, or to lru when it is compared; memlens.analyze.verdict) or full
    # (every summary metric of every job in one wide table); compare.csv/json are the same either way
    table: str = "verdict"
    # the sweep (memlens.runs.sweep): worker processes (-1: every core); a sweep replaying fewer
    # events than parallel_min_events in total runs serially (starting workers costs seconds);
    # resume: skip jobs an earlier run of the same sweep finished (memlens.runs.resume)
    n_jobs: int = -1
    parallel_min_events: int = 200_000
    resume: bool = True
    # several derivations of the same logs in `traces`: print whether the ranking of policies
    # holds across them (memlens.analyze.stability); off by default, since different datasets are
    # expected to rank policies differently
    stability: bool = False
    # stability=true: two policies closer than this on a trace are tied there (point
    # comparisons, and pairs without an interval); the verdicts use paired intervals
    stability_tolerance: float = 0.0

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.table not in TABLES:
            raise ValueError(f"table must be {' or '.join(TABLES)}, got {self.table!r}")
        if self.n_jobs != -1 and not (type(self.n_jobs) is int and 1 <= self.n_jobs <= 4096):
            raise ValueError(f"n_jobs must be -1 (every core) or a number of worker processes "
                             f"from 1 to 4096, got {self.n_jobs!r}")  # fmt: skip
        number("parallel_min_events", self.parallel_min_events, low=0, integer=True)
        if not self.budgets:
            raise ValueError("budgets must list at least one budget, got []")
        if self.stability and len(self.traces or []) < 2:
            raise ValueError("stability=true compares rankings across traces: list at least two "
                             "derivations of the same logs in traces=[...]")  # fmt: skip
        number("stability_tolerance", self.stability_tolerance, low=0)
        for b in self.budgets:
            check_budget(b, "budgets")
        for key in ("budgets", "policies"):
            no_repeats(key, getattr(self, key) or [])
        no_repeated_files("traces", self.traces or [])
        if self.policies is not None and not self.policies:
            raise ValueError("policies must list at least one policy (or be null for all)")
        if self.traces is not None and not self.traces:
            raise ValueError("traces must list at least one trace (or be null for [trace])")
        if self.policies:  # null: every registered policy (checked by memlens.cli.replay)
            check_reference(self.reference, self.policies)


def no_repeats(key: str, values: list) -> None:
    """A list setting naming the same thing twice would run (and report) it twice."""
    seen = set()
    for v in values:
        if v in seen:
            raise ValueError(f"{key} lists {v} twice")
        seen.add(v)


def no_repeated_files(key: str, paths: list[str]) -> None:
    """A list of files naming one file twice, however spelt (``a/t.jsonl`` and
    ``a/../a/t.jsonl``, a symlink and its target), would replay (and report) it twice."""
    import os

    seen: dict[str, str] = {}
    for p in paths:
        real = os.path.realpath(os.path.expanduser(str(p)))
        if real in seen:
            same = "" if seen[real] == p else f" (also as {seen[real]})"
            raise ValueError(f"{key} lists {p} twice{same}")
        seen[real] = p


def check_reference(reference: str | None, policies: list[str]) -> None:
    """``reference`` (when set) must be one of the compared policies."""
    if reference is not None and reference not in policies:
        raise ValueError(f"reference={reference} is not a compared policy "
                         f"(policies: {', '.join(policies)})")  # fmt: skip


@dataclass
class RecommendConfig(CompareConfig):
    """``memlens recommend``: compare's runs, then the cheapest setting that meets a target."""

    target: float = "???"  # OmegaConf's MISSING: must be set; the least acceptable ``metric``
    metric: str = "request_success"  # the quality metric (a registered rate, higher is better)
    cost: str | None = None  # what "cheapest" means; null: total_cost_usd (else cost_usd)
    # policies that are never candidates: the oracle reads the future (a bound, not deployable)
    exclude: list[str] = field(default_factory=lambda: ["oracle"])

    def __post_init__(self) -> None:
        super().__post_init__()
        if not (isinstance(self.target, (int, float)) and 0 <= self.target <= 1):
            raise ValueError(f"target must be a number in [0, 1], got {self.target!r}")


# ----------------------------------------------------------------------------- policies
_CONFIG_SCALARS = (int, float, bool, str)


def _config_type(annotation) -> bool:
    """Can OmegaConf type-check a value of this annotation?"""
    origin = typing.get_origin(annotation)
    if annotation in _CONFIG_SCALARS:
        return True
    if origin in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(annotation) if a is not type(None)]
        return len(args) == 1 and _config_type(args[0])
    if origin in (list, dict):
        return all(a in _CONFIG_SCALARS for a in typing.get_args(annotation))
    return False


@cache
def policy_schema(cls: type) -> type:
    """A dataclass of ``cls``'s constructor parameters: the typed config of that policy.

    Parameters whose annotation OmegaConf cannot check (programmatic ones such as the
    oracle's precomputed plans) are left out, so they cannot be set from a config.
    """
    hints = typing.get_type_hints(cls.__init__)
    target = f"{cls.__module__}.{cls.__qualname__}"
    specs: list[tuple] = [("_target_", str, field(default=target))]
    for name, param in inspect.signature(cls.__init__).parameters.items():
        if name == "self" or param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
            continue
        annotation = hints.get(name)
        if not _config_type(annotation):
            if param.default is param.empty:
                raise TypeError(f"{target}: parameter {name!r} needs a config-typed annotation")
            continue
        default = MISSING if param.default is param.empty else param.default
        if isinstance(default, (list, dict)):
            specs.append((name, annotation, field(default_factory=lambda d=default: d.copy())))
        else:
            specs.append((name, annotation, field(default=default)))
    return make_dataclass(f"{cls.__name__}Config", specs)


def schema_name(policy: str) -> str:
    return f"{policy}_schema"


_REGISTERED: list[bool] = []


def register_configs() -> None:
    """Put every schema in Hydra's ConfigStore, once per process (called before composing).

    Once: the pre-run check, every compare job's composition and Hydra's own app call it, and
    each registration imports every policy class and rebuilds its schema (issue 34: seconds
    on a warm ``simulate``).  The ConfigStore is process-wide and nothing removes entries."""
    if _REGISTERED:
        return
    _register()
    _REGISTERED.append(True)


def _register() -> None:
    from hydra.core.config_store import ConfigStore
    from hydra.utils import get_class

    from memlens.config.store import policy_targets

    cs = ConfigStore.instance()
    cs.store(name="run_schema", node=RunConfig)
    cs.store(name="compare_schema", node=CompareConfig)
    cs.store(name="recommend_schema", node=RecommendConfig)
    for name, target in policy_targets().items():
        cs.store(group="policy", name=schema_name(name), node=policy_schema(get_class(target)))


# ---------------------------------------------------------------------------- resolving
def resolve(cfg: DictConfig, schema: type | None = None):
    """The composed config as typed objects (every ``__post_init__`` check runs here).

    ``schema``: merge onto it first (for configs that did not come through the ConfigStore).
    """
    if schema is not None:
        cfg = OmegaConf.merge(OmegaConf.structured(schema), cfg)
    obj = OmegaConf.to_object(cfg)
    reject_unknown(obj)
    check_numbers(obj)  # every float finite, every int within 64 bits (policy parameters too)
    return obj


def reject_unknown(obj, prefix: str = "") -> None:
    """Refuse keys a schema does not declare (``+key=value`` adds them past Hydra's check)."""
    if not dataclasses.is_dataclass(obj):
        return
    declared = {f.name for f in dataclasses.fields(obj)}
    extra = sorted(set(vars(obj)) - declared)
    if extra:
        where = f"{prefix}{extra[0]}"
        raise ValueError(f"unknown setting {where} ({type(obj).__name__} declares: "
                         f"{', '.join(sorted(declared - {'_target_'}))})")  # fmt: skip
    for name in declared:
        reject_unknown(getattr(obj, name), f"{prefix}{name}.")


def policy_kwargs(policy_cfg) -> tuple[str, dict]:
    """(target, constructor keyword arguments) of a resolved policy config."""
    if isinstance(policy_cfg, DictConfig):
        data = OmegaConf.to_container(policy_cfg, resolve=True)
    elif isinstance(policy_cfg, dict):
        data = dict(policy_cfg)
    else:
        data = {k: getattr(policy_cfg, k) for k in policy_cfg.__dataclass_fields__}
    target = data.pop("_target_")
    return target, data


def build_policy(policy_cfg):
    """Instantiate a policy from its (typed) config."""
    from hydra.utils import get_class

    target, kwargs = policy_kwargs(policy_cfg)
    return get_class(target)(**kwargs)
