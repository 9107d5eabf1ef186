"""Retrieval from the lower tiers for ``MemoryManager.context(stream, query=...)``.

A run with ``retrieval.enabled`` assembles, at each request, the working memory plus what the
short-term cache and the long-term store bring back for the request's text
(``memlens.retrieval.assemble``).  The live manager answers ``context(stream, query)`` as that
engine answers a request with text ``query`` made *now*: it runs the replay's own retrieval
driver (``retrieve_post_hoc``) over the session so far plus one probe request (no needs) at
the end, and returns what the probe request got.  Nothing here re-implements a rule of the
engine, so a following ``used(stream, ids, text=query)`` at the same clock reading is a
request whose retrieved set in ``memlens simulate`` of the record is exactly this one.

What that costs: the tier state, the long-term index and the embeddings of the session are
rebuilt per call (time in the session's length; docs/live.md gives the measured cost).

Two limits, both refused with a clear error when the session is configured:

* the vectors must not depend on texts still to come: ``embeddings.corpus`` (tfidf or hashing
  fitted on a fixed corpus), or ``kind=sentence``.  Fitted on the trace itself (the offline
  default), a vector would change as the session grows;
* ``retrieval.promote`` feeds retrieval back into working memory inside the replay, which the
  live engines do not run; it is refused.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from omegaconf import OmegaConf
from omegaconf.errors import OmegaConfBaseException

from memlens.retrieval.compression import CompressionConfig
from memlens.retrieval.config import RetrievalConfig
from memlens.retrieval.embeddings import EmbeddingsConfig
from memlens.retrieval.tiers import LTS, STC, TiersConfig
from memlens.simulator import SimResult

#: the settings blocks a live session with retrieval carries (a run's config has the same)
BLOCKS = {"retrieval": RetrievalConfig, "tiers": TiersConfig, "embeddings": EmbeddingsConfig,
          "compression": CompressionConfig}  # fmt: skip
TIER_NAMES = {STC: "short_term", LTS: "long_term"}  # ``Item.tier`` of a retrieved item
PROBE = "__memlens_context_probe__"  # the probe request's id (never an id the session has)


@dataclass(frozen=True)
class LiveRetrievalSettings:
    """The typed ``retrieval``, ``tiers``, ``embeddings`` and ``compression`` blocks."""

    retrieval: RetrievalConfig
    tiers: TiersConfig
    embeddings: EmbeddingsConfig
    compression: CompressionConfig

    def to_json(self) -> dict:
        return {name: dataclasses.asdict(getattr(self, name)) for name in BLOCKS}


def settings_from(blocks: dict | None, where: str) -> LiveRetrievalSettings | None:
    """The typed blocks (None when retrieval is off); ``ValueError`` naming the field."""
    if blocks is None:
        return None
    if not isinstance(blocks, dict):
        raise ValueError(f"{where}: retrieval: expected a mapping of settings blocks")
    unknown = sorted(set(blocks) - set(BLOCKS))
    if unknown:
        raise ValueError(f"{where}: {unknown[0]}: not a retrieval settings block "
                         f"(blocks: {', '.join(BLOCKS)})")  # fmt: skip
    typed = {name: _typed(name, schema, blocks.get(name) or {}, where)
             for name, schema in BLOCKS.items()}  # fmt: skip
    if not typed["retrieval"].enabled:
        return None
    _check_live(typed, where)
    return LiveRetrievalSettings(**typed)


def _typed(name: str, schema: type, node, where: str):
    if not isinstance(node, dict):
        raise ValueError(f"{where}: {name}: expected a mapping, got {node!r}")
    try:
        return OmegaConf.to_object(OmegaConf.merge(OmegaConf.structured(schema), node))
    except OmegaConfBaseException as exc:
        key = getattr(exc, "full_key", None) or "?"
        raise ValueError(f"{where}: {name}.{key}: {getattr(exc, 'msg', exc)}") from None
    except ValueError as exc:  # a range check of the block's __post_init__
        raise ValueError(f"{where}: {exc}") from None


def _check_live(typed: dict, where: str) -> None:
    emb, ret = typed["embeddings"], typed["retrieval"]
    if ret.promote:
        raise ValueError(f"{where}: retrieval.promote: promotion runs inside the replay's "
                         "request handler, which the live manager does not drive; use "
                         "promote=false")  # fmt: skip
    if emb.kind == "trace":
        raise ValueError(f"{where}: embeddings.kind: trace (vectors in meta.embedding) is not "
                         "supported live: the query has no vector; use a corpus or a sentence "
                         "model")  # fmt: skip
    if emb.kind in ("tfidf", "hashing") and not emb.corpus:
        raise ValueError(f"{where}: embeddings.corpus: live retrieval needs vectors that do not "
                         "depend on texts still to come: fit the embedder on a fixed corpus "
                         "(embeddings.corpus=FILE) or use kind=sentence")  # fmt: skip


def retrieve(settings: LiveRetrievalSettings, events: list[dict], result: SimResult,
             stream: str, query: str, t: float, seed: int) -> list[tuple[int, int, int]]:  # fmt: skip
    """(item index, tier code, context tokens) of what a request of ``stream`` with text
    ``query`` at time ``t`` gets from the lower tiers, after the session's ``events`` (whose
    replay is ``result``), best first."""
    from memlens.retrieval.assemble import retrieve_post_hoc
    from memlens.retrieval.embeddings import embed_trace
    from memlens.retrieval.setup import make_retriever
    from memlens.trace.io import trace_from_events

    probe = {"event": "request", "id": PROBE, "stream": stream, "t": t, "needs": [],
             "text": query}  # fmt: skip
    header = {"event": "header", "version": "1.1"}
    trace = trace_from_events([header, *events, probe], "<live context>")
    emb_cfg = dataclasses.replace(settings.embeddings, cache=False)  # a new trace per call
    emb = embed_trace(trace, emb_cfg, seed)
    retriever = make_retriever(trace, settings.retrieval, emb, settings.compression,
                               tiers=settings.tiers, seed=seed)  # fmt: skip
    record = retrieve_post_hoc(trace, result, retriever)
    r = trace.n_requests - 1
    lo, hi = int(record.ret_ptr[r]), int(record.ret_ptr[r + 1])
    return list(zip(record.ret_item[lo:hi].tolist(), record.ret_tier[lo:hi].tolist(),
                    record.ret_tokens[lo:hi].tolist()))  # fmt: skip
