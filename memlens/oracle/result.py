"""What the oracle solver returns: per-stream bounds and the plans behind ``oracle_lower``.

Their own module so that the solver (``memlens.oracle.solve``) and its disk cache
(``memlens.oracle.cache``) both read them without importing each other.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, fields

import numpy as np


@dataclass
class StreamBound:
    upper: int
    lower: int
    references: int
    # exact (memlens.oracle.exact: both bounds the integer optimum) | lp | milp (closed after
    # the LP stage: HiGHS, or one more cut round's LP proof, memlens.oracle.proofs) | relaxed
    upper_method: str
    lower_method: str  # exact | milp | lp-round | belady
    gaps: int
    solve_s: float
    segments: int = 1  # LPs the upper bound was solved as (memlens.oracle.segments)

    def as_dict(self) -> dict:
        """The fields by name (every one a number or a string: no copy is needed, where
        ``dataclasses.asdict`` deep-copies each, 0.25 s for a 5,800-stream result)."""
        return {name: getattr(self, name) for name in _STREAM_FIELDS}


_STREAM_FIELDS = tuple(f.name for f in fields(StreamBound))


@dataclass
class OracleResult:
    budget: int
    demand_fetch: bool
    streams: list[StreamBound]
    plans: Sequence[np.ndarray] = field(repr=False)  # per stream (n, 2): anchor event, item
    wall_s: float = 0.0
    from_cache: bool = False  # not computed by this call (process memo or disk cache)

    @property
    def upper(self) -> int:
        return sum(s.upper for s in self.streams)

    @property
    def lower(self) -> int:
        return sum(s.lower for s in self.streams)

    @property
    def references(self) -> int:
        return sum(s.references for s in self.streams)

    @property
    def upper_method(self) -> str:
        used = sorted({s.upper_method for s in self.streams if s.references})
        return "+".join(used) if used else "lp"
