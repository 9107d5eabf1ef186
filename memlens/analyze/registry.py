"""The metric registry: every number MemLens reports is declared here once.

In the spirit of lm-evaluation-harness's registry, a metric is declared with its key, what it
means, whether higher is better, how to print it and whether it is deterministic (same config
and seed, same value, bit for bit) or a timing figure.  Metrics whose value is a function of one
group of requests (a whole run, or one stream) also carry that function, so the same definition
serves ``overall`` and every ``streams`` entry.  A metric that decomposes into additive
per-stream parts declares ``parts(group) -> (num, den)``: its value over any set of streams is
``sum(num) / sum(den)`` (``den`` None: a total, ``sum(num)``), which is what lets
``memlens.analyze.stats`` bootstrap it over streams without replaying anything again.

The registry drives everything that lists metrics: the ``compare`` table and its CSV/JSON
columns, what MLflow records, the experiments' tables and the determinism tests.  A report
that carries a key no metric declares is an error (``check_keys``), so a new metric cannot be
added in one place and forgotten in another.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

import numpy as np

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
    # f(RequestGroup) -> (num, den): additive per-stream parts, value = sum num / sum den over
    # streams (den None: a total, value = sum num); what the bootstrap over streams resamples
    parts: Callable | None = None
    # f(StreamColumns) -> (num, den): every stream's ``parts`` at once, as arrays over streams
    # (``memlens.analyze.metrics.StreamColumns``); the stream's value is num / den (den None:
    # num; for a metric without parts, num is its value, NaN for none).  Declared beside
    # ``compute`` so a run over thousands of streams does no per-stream Python (issue 34);
    # tests/analyze/test_stream_columns.py holds it to ``compute`` and ``parts`` stream by
    # stream.  A metric without it makes the run take the per-stream loop.
    by_stream: Callable | None = None

    def format(self, value) -> str:
        if value is None or (isinstance(value, float) and value != value):
            return "-"
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            return str(value)
        return format(value, self.fmt)


METRICS: dict[str, Metric] = {}


def declared() -> dict[str, Metric]:
    """Every declared metric.  ``memlens.analyze`` imports ``memlens.analyze.metrics``, where
    they are declared, before any of its modules, so this is always the whole registry."""
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


def decomposable() -> list[Metric]:
    """Metrics with additive per-stream parts (the ones that get an interval)."""
    return [m for m in declared().values() if m.parts is not None]


def stream_parts(groups: list) -> dict[str, tuple[np.ndarray, np.ndarray | None]]:
    """{metric: (num, den)} over ``groups`` (one per stream, in order); den None: a total."""
    out = {}
    for m in decomposable():
        pairs = [m.parts(g) for g in groups]
        num = np.asarray([p[0] for p in pairs], dtype=np.float64)
        totals = bool(pairs) and pairs[0][1] is None
        den = None if totals else np.asarray([p[1] for p in pairs], dtype=np.float64)
        out[m.key] = (num, den)
    return out


class StreamParts:
    """:func:`stream_parts` over a run's groups given one at a time, in stream order, written
    into arrays made once: what ``stream_parts([g])`` per stream and a concatenation did, at
    a fraction of the cost over thousands of streams (issue 34).  Same numbers: each part is
    stored as the float64 that ``np.asarray`` makes of it."""

    def __init__(self, n: int) -> None:
        self.n, self.metrics = n, decomposable()
        self.num = {m.key: np.empty(n, dtype=np.float64) for m in self.metrics}
        self.den: dict[str, np.ndarray] = {}

    def add(self, s: int, group) -> None:
        for m in self.metrics:
            num, den = m.parts(group)
            self.num[m.key][s] = num
            if den is not None:
                if m.key not in self.den:
                    self.den[m.key] = np.empty(self.n, dtype=np.float64)
                self.den[m.key][s] = den

    def result(self) -> dict[str, tuple[np.ndarray, np.ndarray | None]]:
        if self.n == 0:
            return stream_parts([])
        return {key: (num, self.den.get(key)) for key, num in self.num.items()}


def combine(num: np.ndarray, den: np.ndarray | None) -> float | None:
    """A decomposable metric's value from its parts (sum num / sum den; den None: sum num)."""
    if den is None:
        return float(np.sum(num))
    total = float(np.sum(den))
    return None if total == 0 else float(np.sum(num)) / total


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
        raise KeyError(f"{where}: metrics {unknown} are not declared in memlens.analyze.registry")
