"""Build the retrieval engine from a run's config, and describe it in metrics.json.

Kept out of ``memlens.run`` so that the run only asks three questions: is there a retriever,
does the replay need to call it live, and what goes in the record.
"""

from __future__ import annotations

import numpy as np

from memlens.compression import CompressionConfig, Compressor
from memlens.retrieval.assemble import LiveRetrieval, RetrievalConfig, RetrievalRecord, Retriever
from memlens.retrieval.query import static_values
from memlens.tiers import LTS, TierLog
from memlens.trace import Trace


def build_retriever(cfg, trace: Trace) -> Retriever | None:
    """The engine for this run, or None when ``retrieval.enabled`` is false."""
    rcfg = RetrievalConfig.from_cfg(cfg)
    if not rcfg.enabled:
        return None
    from memlens.embeddings import embed_trace

    emb_cfg = dict(cfg.get("embeddings") or {})
    emb_cfg.setdefault("seed", int(cfg.get("seed", 0)))
    emb = embed_trace(trace, emb_cfg)
    values = static_values(trace)
    comp = Compressor(trace, CompressionConfig.from_cfg(cfg.get("compression")), values)
    return Retriever(trace, rcfg, emb, comp, values)


def live_hook(cfg, retriever: Retriever | None) -> LiveRetrieval | None:
    """The simulator hook when retrieval must run inside the replay, else None.

    Promotion feeds retrieval back into working memory, so it needs the live driver; with
    ``engine=reference`` the live driver is used as well (the definition).  Otherwise the
    replay may use a compiled kernel and retrieval runs after it over the move log, with
    identical results.
    """
    if retriever is None:
        return None
    if retriever.cfg.promote or str(cfg.get("engine", "auto")) == "reference":
        return LiveRetrieval(retriever)
    return None


def stored_tokens_saved(cfg, trace: Trace, tiers: TierLog) -> int:
    """Tokens compression saves over the items in the long-term store at the end of a run."""
    ccfg = CompressionConfig.from_cfg(cfg.get("compression"))
    if ccfg.default == "none" and not ccfg.by_type and ccfg.low_value_threshold is None:
        return 0
    comp = Compressor(trace, ccfg, static_values(trace))
    in_lts = tiers.final_tier == LTS
    return int((trace.item_tokens[in_lts] - comp.stored_tokens[in_lts]).sum())


def retrieval_section(rec: RetrievalRecord | None) -> dict:
    """The ``retrieval`` block of metrics.json: settings that shape the numbers."""
    if rec is None:
        return {"enabled": False}
    c = rec.config
    return {
        "enabled": True,
        "budget": c.budget,
        "k": c.k,
        "promote": c.promote,
        "prefetch": c.prefetch,
        "short_term_latency_ms": c.short_term_latency_ms,
        "long_term_latency_ms": c.long_term_latency_ms,
        "index_queries": rec.index_queries,
        "exact_queries": rec.exact_queries,
        "lossy_items_at_end": rec.lossy_items_at_end,
        "retrieved_from": {
            "stc": int(np.sum(rec.ret_tier == 1)),
            "lts": int(np.sum(rec.ret_tier == 2)),
        },
    }


def make_retriever(trace: Trace, rcfg: RetrievalConfig, emb, ccfg: CompressionConfig | None = None,
                   values: np.ndarray | None = None) -> Retriever:  # fmt: skip
    """A retriever from explicit parts (tests, notebooks, benchmarks)."""
    values = static_values(trace) if values is None else values
    return Retriever(
        trace, rcfg, emb, Compressor(trace, ccfg or CompressionConfig(), values), values
    )


def replay_with_retrieval(
    trace: Trace,
    policy,
    budget: int,
    retriever: Retriever,
    *,
    demand_fetch: bool = False,
    live: bool | None = None,
    seed: int = 0,
):
    """Replay with retrieval; ``live`` None: live only when promoting.  -> (SimResult, record)."""
    from memlens.retrieval.assemble import retrieve_post_hoc
    from memlens.simulator import simulate

    live = retriever.cfg.promote if live is None else live
    if live:
        res = simulate(
            trace,
            policy,
            budget,
            demand_fetch=demand_fetch,
            seed=seed,
            engine="reference",
            progress=False,
            hook=LiveRetrieval(retriever),
        )
        return res, retriever.record()
    res = simulate(trace, policy, budget, demand_fetch=demand_fetch, seed=seed, progress=False)
    return res, retrieve_post_hoc(trace, res, retriever)
