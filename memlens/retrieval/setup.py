"""Build the retrieval engine from a run's typed settings, and describe it in metrics.json.

Kept out of the run pipeline so that the pipeline only asks four questions: is there a
retriever, does the replay need to call it live, what did it record, and what goes in the
report.  Every function takes the typed settings objects (``RetrievalConfig``, ``TiersConfig``,
``EmbeddingsConfig``, ``CompressionConfig``) and the run's seed; none reads a raw config.
"""

from __future__ import annotations

import numpy as np

from memlens.retrieval.assemble import (
    LiveRetrieval,
    RetrievalRecord,
    Retriever,
    retrieve_post_hoc,
)
from memlens.retrieval.compression import CompressionConfig, Compressor
from memlens.retrieval.config import RetrievalConfig
from memlens.retrieval.embeddings import Embeddings, EmbeddingsConfig, embed_trace
from memlens.retrieval.query import static_values
from memlens.retrieval.tiers import LTS, TierLog, TiersConfig
from memlens.simulator import SimResult, simulate
from memlens.trace.model import Trace


def build_retriever(
    trace: Trace,
    retrieval: RetrievalConfig,
    tiers: TiersConfig,
    embeddings: EmbeddingsConfig,
    compression: CompressionConfig,
    seed: int,
) -> Retriever | None:
    """The engine for this run, or None when ``retrieval.enabled`` is false."""
    if not retrieval.enabled:
        return None
    emb = embed_trace(trace, embeddings, seed)
    return make_retriever(trace, retrieval, emb, compression, tiers=tiers, seed=seed)


def make_retriever(
    trace: Trace,
    rcfg: RetrievalConfig,
    emb: Embeddings,
    ccfg: CompressionConfig | None = None,
    values: np.ndarray | None = None,
    tiers: TiersConfig | None = None,
    seed: int = 0,
) -> Retriever:
    """A retriever from explicit parts (tests, notebooks, benchmarks); defaults for the rest."""
    values = static_values(trace) if values is None else values
    comp = Compressor(trace, CompressionConfig() if ccfg is None else ccfg, values)
    tiers = TiersConfig() if tiers is None else tiers
    return Retriever(trace, rcfg, tiers, emb, comp, values, seed)


def live_hook(retriever: Retriever | None, engine: str) -> LiveRetrieval | None:
    """The simulator hook when retrieval must run inside the replay, else None.

    Promotion feeds retrieval back into working memory, so it needs the live driver; with
    ``engine=reference`` the live driver is used as well (the definition).  Otherwise the
    replay may use a compiled kernel and retrieval runs after it over the move log, with
    identical results.
    """
    if retriever is None:
        return None
    if retriever.cfg.promote or engine == "reference":
        return LiveRetrieval(retriever)
    return None


def retrieval_record(
    trace: Trace, result: SimResult, retriever: Retriever | None, hook: LiveRetrieval | None
) -> RetrievalRecord | None:
    """What retrieval did in the replay that produced ``result`` (None without a retriever).

    With a live ``hook`` the retriever already ran inside the replay; without one it runs now,
    over the replay's move log.
    """
    if retriever is None:
        return None
    return retriever.record() if hook is not None else retrieve_post_hoc(trace, result, retriever)


def stored_tokens_saved(trace: Trace, tiers_log: TierLog, compression: CompressionConfig) -> int:
    """Tokens compression saves over the items in the long-term store at the end of a run."""
    if compression.stores_in_full:
        return 0
    comp = Compressor(trace, compression, static_values(trace))
    return comp.tokens_saved(tiers_log.final_tier == LTS)


def retrieval_section(rec: RetrievalRecord | None) -> dict:
    """The ``retrieval`` block of metrics.json: settings that shape the numbers."""
    if rec is None:
        return {"enabled": False}
    c, t = rec.config, rec.tiers_config
    return {
        "enabled": True,
        "budget": c.budget,
        "k": c.k,
        "promote": c.promote,
        "prefetch": c.prefetch,
        "store": c.store,
        "short_term_latency_ms": t.short_term_latency_ms,
        "long_term_latency_ms": t.long_term_latency_ms,
        "index_queries": rec.index_queries,
        "exact_queries": rec.exact_queries,
        "lossy_items_at_end": rec.lossy_items_at_end,
        "retrieved_from": {
            "stc": int(np.sum(rec.ret_tier == 1)),
            "lts": int(np.sum(rec.ret_tier == 2)),
        },
    }


def replay_with_retrieval(
    trace: Trace,
    policy,
    budget: int,
    retriever: Retriever | None,
    *,
    demand_fetch: bool = False,
    live: bool | None = None,
    seed: int = 0,
) -> tuple[SimResult, RetrievalRecord | None]:
    """Replay with retrieval (tests, notebooks, benchmarks).  -> (SimResult, record or None).

    ``live`` None: the live driver (reference engine) only when promoting; otherwise the
    default engine and retrieval over the move log afterwards.  ``retriever`` None: a plain
    replay (record None).
    """
    if live is None:
        live = retriever is not None and retriever.cfg.promote
    hook = live_hook(retriever, "reference") if live else None
    res = simulate(
        trace,
        policy,
        budget,
        demand_fetch=demand_fetch,
        seed=seed,
        engine="reference" if live else "auto",
        progress=False,
        hook=hook,
    )
    return res, retrieval_record(trace, res, retriever, hook)
