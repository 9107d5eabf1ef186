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


def replay_record_retrieval(path: str | os.PathLike, engine: str = "auto"):
    """The record replayed with its retrieval settings, through the run pipeline's own
    builders: ``(SimResult, RetrievalRecord)`` (the record None when retrieval is off)."""
    from memlens.retrieval.setup import build_retriever, live_hook, retrieval_record
    from memlens.trace.io import load_trace

    config = LiveConfig.from_json(read_header(path), str(path))
    trace = load_trace(path)
    typed = config.retrieval_settings()
    retriever = None if typed is None else build_retriever(
        trace, typed.retrieval, typed.tiers, typed.embeddings, typed.compression, config.seed)  # fmt: skip
    hook = live_hook(retriever, engine)
    result = simulate(trace, config.build(), config.budget, config.demand_fetch, config.seed,
                      engine=engine, hook=hook)  # fmt: skip
    return result, retrieval_record(trace, result, retriever, hook)


def simulate_overrides(path: str | os.PathLike) -> list[str]:
    """The ``memlens simulate`` overrides that replay the record as its session ran."""
    config = LiveConfig.from_json(read_header(path), str(path))
    name = config.policy["_target_"].split(".")[-2]  # memlens.policies.<name>.<Class>
    out = [f"trace={path}", f"policy={name}", f"budget={config.budget}",
           f"demand_fetch={str(config.demand_fetch).lower()}", f"seed={config.seed}"]  # fmt: skip
    for key, value in config.policy.items():
        if key != "_target_" and not isinstance(value, (dict, list)) and value is not None:
            out.append(f"policy.{key}={value}")
    for block, node in (config.retrieval or {}).items():
        out += [f"{key}={_override_value(value)}" for key, value in _leaves(block, node)]
    return out


def _leaves(prefix: str, node: dict):
    """(dotted key, value) of every leaf of a settings block (a null dict value left out: a
    typed mapping's null is its default)."""
    for key, value in node.items():
        if isinstance(value, dict):
            yield from ((k, v) for k, v in _leaves(f"{prefix}.{key}", value) if v is not None)
        else:
            yield f"{prefix}.{key}", value


def _override_value(value) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, list):
        return "[" + ",".join(_override_value(v) for v in value) + "]"
    return str(value)
