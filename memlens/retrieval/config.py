"""The ``retrieval:`` settings block, typed: what request-time retrieval does (docs/concepts/tiers.md).

These dataclasses are the schema Hydra checks (types, defaults, unknown keys) when a command's
config is composed, and the objects the retrieval engine reads: there is no second mapping.
Range checks run in ``__post_init__``, i.e. when ``memlens.config.schema.resolve`` turns the
composed config into objects, before any work starts.
"""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass, field

from memlens._util.values import number
from memlens.trace.model import ITEM_TYPES

#: ``retrieval.store`` values (memlens.retrieval.store builds each)
STORES = ("hnsw", "exact", "qdrant")


@dataclass
class QueryConfig:
    goal_weight: float = 0.0  # add the stream task's first user input to the query
    last_action_weight: float = 0.0  # add the stream's most recent write to the query

    def __post_init__(self) -> None:
        for key in ("goal_weight", "last_action_weight"):
            number(f"retrieval.query.{key}", getattr(self, key), low=0)


@dataclass
class FilterConfig:
    """Pre-filter applied before any similarity is computed (same stream always)."""

    same_task: bool = False
    types: list[str] | None = None  # e.g. [user_input, tool_result]
    max_age_s: float | None = None  # only items written at most this many trace seconds ago

    def __post_init__(self) -> None:
        for t in self.types or []:
            if t not in ITEM_TYPES:
                raise ValueError(f"retrieval.filter.types: unknown item type {t!r}")
        if self.max_age_s is not None:
            number("retrieval.filter.max_age_s", self.max_age_s, low=0)


@dataclass
class RerankConfig:
    """score = similarity*cos + value*value + freshness*0.5**(age/half_life)."""

    similarity: float = 1.0
    value: float = 0.2
    freshness: float = 0.2
    freshness_half_life_s: float = 3600.0

    def __post_init__(self) -> None:
        for key in ("similarity", "value", "freshness"):
            number(f"retrieval.rerank.{key}", getattr(self, key), low=0)
        number("retrieval.rerank.freshness_half_life_s", self.freshness_half_life_s, above=0)


@dataclass
class HnswConfig:
    M: int = 16
    ef_construction: int = 100
    ef_search: int = 64
    exact_below: int = 64  # score exactly when the filtered candidates are this few

    def __post_init__(self) -> None:
        # hnswlib caps M at 10000 itself (with a warning): above it the setting would be ignored
        for key, least, most in (("M", 2, 10_000), ("ef_construction", 1, None),
                                 ("ef_search", 1, None), ("exact_below", 0, None)):  # fmt: skip
            number(f"retrieval.hnsw.{key}", getattr(self, key), low=least, high=most, integer=True)


@dataclass
class RetrievalConfig:
    enabled: bool = False
    budget: int = 512  # tokens of retrieved context per request (on top of working memory)
    k: int = 8  # candidates taken from each tier (STC exact, LTS hnswlib)
    min_similarity: float = 0.0  # drop candidates less similar than this (cosine)
    promote: bool = False  # bring what was retrieved into WM (outside the oracle class)
    prefetch: bool = False  # assemble request k's set at request k-1 (latency hidden)
    query: QueryConfig = field(default_factory=QueryConfig)
    filter: FilterConfig = field(default_factory=FilterConfig)
    rerank: RerankConfig = field(default_factory=RerankConfig)
    hnsw: HnswConfig = field(default_factory=HnswConfig)
    # the long-term store's backend: hnsw (hnswlib per stream, the default) | exact (numpy,
    # exact cosine) | qdrant (Qdrant local mode in a temporary folder; pip install
    # 'memlens[qdrant]'), the last two through the VectorIndex protocol (memlens.retrieval.store)
    store: str = "hnsw"

    def __post_init__(self) -> None:
        if self.store not in STORES:
            raise ValueError(f"retrieval.store must be one of {', '.join(STORES)}, "
                             f"got {self.store!r}")  # fmt: skip
        if self.store == "qdrant" and importlib.util.find_spec("qdrant_client") is None:
            raise ValueError("retrieval.store=qdrant needs the qdrant-client package, which is "
                             "not installed: pip install 'memlens[qdrant]'")  # fmt: skip
        number("retrieval.budget", self.budget, low=0, below=2**62, integer=True)  # tokens
        number("retrieval.k", self.k, low=0, integer=True)
        number("retrieval.min_similarity", self.min_similarity, low=-1, high=1)  # a cosine
