"""Replaying a live session's record offline, with the config its header holds."""

from __future__ import annotations

import os

from memlens.live.config import LiveConfig
from memlens.live.record import read_header
from memlens.simulator import SimResult, simulate


def replay_record(path: str | os.PathLike, engine: str = "auto") -> SimResult:
    """``memlens simulate trace=PATH`` with the record's own config, as a ``SimResult``
    (``engine``: ``auto``, ``fast`` or ``reference``)."""
    from memlens.trace.io import load_trace

    config = LiveConfig.from_json(read_header(path), str(path))
    return simulate(load_trace(path), config.build(), config.budget, config.demand_fetch,
                    config.seed, engine=engine)  # fmt: skip


def simulate_overrides(path: str | os.PathLike) -> list[str]:
    """The ``memlens simulate`` overrides that replay the record as its session ran."""
    config = LiveConfig.from_json(read_header(path), str(path))
    name = config.policy["_target_"].split(".")[-2]  # memlens.policies.<name>.<Class>
    out = [f"trace={path}", f"policy={name}", f"budget={config.budget}",
           f"demand_fetch={str(config.demand_fetch).lower()}", f"seed={config.seed}"]  # fmt: skip
    for key, value in config.policy.items():
        if key != "_target_" and not isinstance(value, (dict, list)) and value is not None:
            out.append(f"policy.{key}={value}")
    return out
