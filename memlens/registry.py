"""The metric registry: every number MemLens reports is declared here once.

In the spirit of lm-evaluation-harness's registry, a metric is declared with its key, what it
means, whether higher is better, how to print it and whether it is deterministic (same config
and seed, same value, bit for bit) or a timing figure.  Metrics whose value is a function of one
group of requests (a whole run, or one stream) also carry that function, so the same definition
serves ``overall`` and every ``streams`` entry.

The registry drives everything that lists metrics: the ``compare`` table and its CSV/JSON
columns, what MLflow records, the experiments' tables and the determinism tests.  A report
that carries a key no metric declares is an error (``check_keys``), so a new metric cannot be
added in one place and forgotten in another.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

Kind = Literal["deterministic", "timing"]
Group = Literal["core", "retrieval", "oracle", "timing"]


@dataclass(frozen=True)
class Metric:
    key: str
    description: str
    higher_is_better: bool | None  # None: neither (a count, a size)
    fmt: str = ".4f"  # format spec for tables
    kind: Kind = "deterministic"
    group: Group = "core"  # core: always; retrieval: with retrieval on; oracle: oracle on
    summary: bool = False  # a column of the compare table
    compute: Callable | None = None  # f(RequestGroup) -> value, for per-group metrics

    def format(self, value) -> str:
        if value is None or (isinstance(value, float) and value != value):
            return "-"
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            return str(value)
        return format(value, self.fmt)


METRICS: dict[str, Metric] = {}


def declared() -> dict[str, Metric]:
    """Every declared metric (importing ``memlens.metrics``, where they are declared)."""
    import memlens.metrics  # noqa: F401

    return METRICS


def register(metric: Metric) -> Metric:
    if metric.key in METRICS:
        raise ValueError(f"metric {metric.key!r} is registered twice")
    METRICS[metric.key] = metric
    return metric


def metric(key: str, description: str, higher_is_better: bool | None, **kw):
    """Decorator: register ``f(group)`` as the computation of a per-group metric."""

    def wrap(fn: Callable) -> Callable:
        register(Metric(key, description, higher_is_better, compute=fn, **kw))
        return fn

    return wrap


def computed() -> list[Metric]:
    """Metrics with a per-group computation, in declaration order."""
    return [m for m in declared().values() if m.compute is not None]


def of_kind(kind: Kind) -> list[str]:
    return [k for k, m in declared().items() if m.kind == kind]


def summary_columns(retrieval: bool = False, oracle: bool = True) -> list[str]:
    """The compare table's metric columns (retrieval ones only when retrieval is on)."""
    groups = {"core", "timing"} | ({"retrieval"} if retrieval else set())
    groups |= {"oracle"} if oracle else set()
    return [k for k, m in declared().items() if m.summary and m.group in groups]


def report_columns() -> list[str]:
    """Every registered metric: the columns of compare.csv / compare.json."""
    return list(declared())


def check_keys(keys, where: str) -> None:
    unknown = sorted(set(keys) - set(declared()))
    if unknown:
        raise KeyError(f"{where}: metrics {unknown} are not declared in memlens.registry")
