"""What a missed need costs and what a hit is worth, per item type: the ``costs:`` settings.

Declared here, beside the metrics that read them (``memlens.analyze.metrics``), so that the
metrics do not import the whole settings schema; ``memlens.config.schema`` composes it into
``RunConfig``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from memlens.trace.features import DEFAULT_TYPE_BASE
from memlens.trace.model import ITEM_TYPES


def _per_type(values: dict, default: dict, key: str, upper: float = math.inf) -> dict:
    """``values`` over the four item types, missing types from ``default``; unknown types,
    non-finite, negative or above-``upper`` values refused."""
    unknown = sorted(set(values) - set(ITEM_TYPES))
    if unknown:
        raise ValueError(
            f"{key}: unknown item type {unknown[0]!r} (types: {', '.join(ITEM_TYPES)})"
        )
    out = {}
    for name in ITEM_TYPES:
        v = values.get(name, default[name])
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            raise ValueError(f"{key}.{name} must be a number, got {v!r}")
        if not (math.isfinite(v) and 0 <= v <= upper):
            bound = "a finite number >= 0" if upper == math.inf else f"a number in [0, {upper:g}]"
            raise ValueError(f"{key}.{name} must be {bound}, got {v}")
        out[name] = float(v)
    return out


_ZERO_PER_TYPE = dict.fromkeys(ITEM_TYPES, 0.0)


@dataclass
class CostsConfig:
    """What a missed need costs and what a hit is worth, per item type (formulas of
    ``miss_cost_usd``, ``miss_latency_s``, ``total_cost_usd`` and ``value_weighted_hit_rate``:
    ``memlens.analyze.metrics``).  A type left out takes its default; an unknown type is refused.

    Penalties and latencies default to 0: no trace measures them, so any other default would
    be an invented number presented as a result; set them for your agent
    (``costs.miss_latency_s.user_input=30``).  Value weights default to the type prior the
    value-aware policies use (``memlens.trace.features.DEFAULT_TYPE_BASE``) and share the [0, 1]
    scale of a person's ``annotate`` value, which overrides them.
    """

    miss_penalty_usd: dict[str, float] = field(default_factory=lambda: dict(_ZERO_PER_TYPE))
    miss_latency_s: dict[str, float] = field(default_factory=lambda: dict(_ZERO_PER_TYPE))
    value_weight: dict[str, float] = field(default_factory=lambda: dict(DEFAULT_TYPE_BASE))

    def __post_init__(self) -> None:
        self.miss_penalty_usd = _per_type(self.miss_penalty_usd, _ZERO_PER_TYPE,
                                          "costs.miss_penalty_usd")  # fmt: skip
        self.miss_latency_s = _per_type(self.miss_latency_s, _ZERO_PER_TYPE, "costs.miss_latency_s")
        self.value_weight = _per_type(self.value_weight, DEFAULT_TYPE_BASE, "costs.value_weight",
                                      upper=1.0)  # fmt: skip
