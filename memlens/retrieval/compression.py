"""Compression on the way into the long-term store, and what a compressed item can still serve.

An item that leaves the short-term cache is stored in one of four forms, chosen per item type
and value (``compression:`` in the config):

``none``      full content stored; retrieving it costs its full tokens; serves any need.
``pointer``   lossless: the store keeps the embedding and a pointer; the full content comes back
              on retrieval (full tokens, one more long-term round trip of latency); serves any
              need.
``summary``   lossy: keeps ``summary_fraction`` of the tokens.  A need served only by the
              summary counts as served when ``summary_counts_as_hit`` (default: no).
``entities``  lossy: keeps the numbers, identifiers and names found in the text (regex
              extraction; about four characters per token).  Serves a need only when the
              request marks that need answerable by entities (``meta.answerable_by_entities``:
              ``true`` for all its needs, or a list of the item ids that qualify).

The choice: ``low_value_strategy`` for items whose static value is below
``low_value_threshold`` (when set), else ``by_type[type]``, else ``default``.

Everything here is decided per item once, before the replay (vectorised), so the replay only
looks up arrays.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field

import numpy as np

from memlens.trace.model import ITEM_TYPES, Trace

STRATEGIES = ("none", "summary", "entities", "pointer")
NONE, SUMMARY, ENTITIES, POINTER = range(4)
LOSSY = (SUMMARY, ENTITIES)

_ENTITY_RE = re.compile(
    r"#?\b\d+(?:[.,:/-]\d+)*\b"  # numbers, amounts, dates, ticket numbers (#123)
    r"|\b(?=[\w-]*\d)(?=[\w-]*[A-Za-z])[\w-]+\b"  # identifiers mixing letters and digits
    r"|\b[A-Za-z]+(?:_[A-Za-z0-9]+)+\b"  # snake_case identifiers
    r"|(?<!^)(?<![.!?]\s)\b[A-Z][a-z]+(?:\s[A-Z][a-z]+)*"  # capitalised names (not sentence starts)
)


class CompressionError(ValueError):
    pass


def extract_entities(text: str) -> list[str]:
    """Numbers, identifiers and names in ``text``, in order, without repeats."""
    return list(dict.fromkeys(m.group(0) for m in _ENTITY_RE.finditer(text)))


def entity_tokens(text: str, full_tokens: int) -> int:
    """Tokens of the entities form: about four characters per token, at least one, at most all."""
    ents = extract_entities(text)
    est = math.ceil(len(" ".join(ents)) / 4) if ents else 1
    return int(min(full_tokens, max(1, est)))


@dataclass
class CompressionConfig:
    """The ``compression:`` settings block (typed; checked when it is built)."""

    default: str = "none"  # none | summary | entities | pointer
    # per item type, null = `default`: compression.by_type={llm_thought: summary} or
    # compression.by_type.tool_result=pointer.  Every type is listed (not a null dict) because
    # Hydra can neither merge a dict into a null node nor add a key to a typed one.
    by_type: dict[str, str | None] = field(default_factory=lambda: dict.fromkeys(ITEM_TYPES))
    low_value_threshold: float | None = None  # items whose static value is below this ...
    low_value_strategy: str = "summary"  # ... use this strategy
    summary_fraction: float = 0.2  # a summary keeps this share of the tokens
    summary_counts_as_hit: bool = False  # does a need served only by a summary count?

    def __post_init__(self) -> None:
        named = {
            "compression.default": self.default,
            "compression.low_value_strategy": self.low_value_strategy,
        }
        for t, v in (self.by_type or {}).items():
            if t not in ITEM_TYPES:
                raise CompressionError(
                    f"compression.by_type: unknown item type {t!r} (types: {', '.join(ITEM_TYPES)})"
                )
            if v is not None:
                named[f"compression.by_type.{t}"] = v
        for key, v in named.items():
            if v not in STRATEGIES:
                raise CompressionError(f"{key} must be one of {', '.join(STRATEGIES)}, got {v!r}")
        if not 0.0 < self.summary_fraction <= 1.0:
            raise CompressionError(
                f"compression.summary_fraction must be in (0, 1], got {self.summary_fraction}"
            )
        if self.low_value_threshold is not None and not math.isfinite(self.low_value_threshold):
            raise CompressionError(
                "compression.low_value_threshold must be a finite number or null, "
                f"got {self.low_value_threshold}"
            )

    def chosen_by_type(self) -> dict[str, str]:
        """The item types given their own strategy (the others use ``default``)."""
        return {t: v for t, v in (self.by_type or {}).items() if v is not None}

    @property
    def stores_in_full(self) -> bool:
        """True when every item is stored as ``none`` (nothing is compressed)."""
        chosen = [self.default, *self.chosen_by_type().values()]
        if self.low_value_threshold is not None:
            chosen.append(self.low_value_strategy)
        return all(v == "none" for v in chosen)


def stored_forms(cfg: CompressionConfig, types: np.ndarray, tokens: np.ndarray, texts,
                 values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:  # fmt: skip
    """Per item: its compression strategy code (int8) and its stored size in tokens (int64).
    Each item's depend on that item alone (its type, tokens, text and static value), so the
    live manager's incremental retrieval computes them as items are written."""
    types = np.asarray(types)
    codes = np.full(types.shape[0], STRATEGIES.index(cfg.default), dtype=np.int8)
    for t, v in cfg.chosen_by_type().items():
        codes[types == ITEM_TYPES.index(t)] = STRATEGIES.index(v)
    if cfg.low_value_threshold is not None:
        codes[values < float(cfg.low_value_threshold)] = STRATEGIES.index(cfg.low_value_strategy)
    full = np.asarray(tokens, dtype=np.int64)
    stored = full.copy()
    summ = codes == SUMMARY
    stored[summ] = np.maximum(1, np.ceil(full[summ] * cfg.summary_fraction)).astype(np.int64)
    for i in np.flatnonzero(codes == ENTITIES).tolist():
        stored[i] = entity_tokens(texts[i], int(full[i]))
    return codes, stored


class Compressor:
    """Per-item strategy and stored size, and whether a stored form serves a given need."""

    def __init__(self, trace: Trace, cfg: CompressionConfig, values: np.ndarray):
        self.cfg = cfg
        self.strategy, self.stored_tokens = stored_forms(
            cfg, trace.item_type, trace.item_tokens, trace.item_text, values
        )  # stored_tokens: what the item costs in context when retrieved from the LTS
        self.full_tokens = trace.item_tokens
        self.need_entity_ok = answerable_by_entities(trace)

    def tokens_saved(self, where: np.ndarray) -> int:
        """Full minus stored tokens over the items selected by the bool mask ``where``."""
        return int((self.full_tokens[where] - self.stored_tokens[where]).sum())

    def serves(self, form: int, need_index: int) -> bool:
        """Does an item retrieved in ``form`` serve the need at ``trace.needs[need_index]``?"""
        if form == SUMMARY:
            return self.cfg.summary_counts_as_hit
        if form == ENTITIES:
            return bool(self.need_entity_ok[need_index])
        return True


def answerable_by_entities(trace: Trace) -> np.ndarray:
    """Per needed reference: did its request mark it answerable from extracted entities?"""
    ok = np.zeros(trace.n_references, dtype=bool)
    for r, meta in enumerate(trace.req_meta):
        mark = meta.get("answerable_by_entities")
        if mark is None or mark is False:
            continue
        lo, hi = int(trace.needs_ptr[r]), int(trace.needs_ptr[r + 1])
        if mark is True:
            ok[lo:hi] = True
        elif isinstance(mark, list) and all(isinstance(x, str) for x in mark):
            marked = set(mark)
            for j in range(lo, hi):  # a need with alternatives: if any of them is marked
                ok[j] = any(trace.item_id[i] in marked for i in trace.alternatives(j).tolist())
        else:
            line = int(trace.ev_line[trace.req_event[r]])
            raise CompressionError(
                f'{trace.source}:{line}: field "meta.answerable_by_entities" of request '
                f'"{trace.req_id[r]}" must be true, false or a list of item ids, got {mark!r}'
            )
    return ok
