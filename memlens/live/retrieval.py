"""Retrieval from the lower tiers for ``MemoryManager.context(stream, query=...)``.

A run with ``retrieval.enabled`` assembles, at each request, the working memory plus what the
short-term cache and the long-term store bring back for the request's text
(``memlens.retrieval.assemble``).  The live manager answers ``context(stream, query)`` as that
engine answers a request with text ``query`` made *now*.  :func:`retrieve` is the definition:
it runs the replay's own retrieval driver (``retrieve_post_hoc``) over the session so far plus
one probe request (no needs) at the end, and returns what the probe request got, rebuilding
the tier state, the long-term index and the embeddings per call (time in the session's
length).  :class:`IncrementalRetrieval` gives the same answers from the same engine kept
current as the session grows (an index query per call); the manager asks it where it serves
and falls back to :func:`retrieve` elsewhere.  Nothing here re-implements a rule of the
engine, so a following ``used(stream, ids, text=query)`` at the same clock reading is a
request whose retrieved set in ``memlens simulate`` of the record is exactly this one.

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

import numpy as np
from omegaconf import OmegaConf
from omegaconf.errors import OmegaConfBaseException

from memlens.retrieval.assemble import Retriever
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


def incremental_supported(settings: LiveRetrievalSettings) -> bool:
    """Whether :class:`IncrementalRetrieval` can serve these settings: an embedder fitted on
    a fixed corpus (a sentence model's batches are left to the rebuild, ``retrieve``)."""
    emb = settings.embeddings
    return emb.kind in ("tfidf", "hashing") and bool(emb.corpus)


class IncrementalRetrieval(Retriever):
    """The retrieval engine of a live session, kept current as the session grows, so that a
    ``context(stream, query)`` costs an index query, not a rebuild.

    It is the replay's :class:`memlens.retrieval.assemble.Retriever` (its ``assemble`` and
    ``gather`` run unchanged) over growing parts: the tier state
    (:class:`memlens.retrieval.tiers.GrowingTierState`) follows the live engines' move logs,
    the long-term store's index (:class:`memlens.retrieval.index.GrowingLongTermIndex`) gets
    an item when it enters the store and marks it deleted when it leaves, and every request
    the session records is served as the replay serves it (the short-term cache's LRU order,
    the prefetched set).  Items' vectors, static values and stored forms depend on the item
    alone, so they are computed as items come.  :meth:`catch_up` feeds the events recorded
    since its last call, in record order, with the moves of each event after its request is
    served (``merged_schedule``'s order); :meth:`context` answers the probe request
    ``retrieve`` would add, without changing anything.
    """

    def __init__(self, settings: LiveRetrievalSettings, columns, seed: int) -> None:
        from memlens.retrieval.embeddings import corpus_embedder
        from memlens.retrieval.index import GrowingLongTermIndex
        from memlens.retrieval.query import RequestPlan
        from memlens.retrieval.tiers import GrowingTierState
        from memlens.trace.model import ITEM_TYPES

        cfg, tiers = settings.retrieval, settings.tiers
        self.cfg, self.tiers_config, self.columns = cfg, tiers, columns
        self._compression = settings.compression
        self._embed = corpus_embedder(settings.embeddings, seed)
        dim = int(self._embed([""]).shape[1])
        self.index = GrowingLongTermIndex(dim, seed=seed, **dataclasses.asdict(cfg.hnsw))
        self.state = GrowingTierState(columns.item_tokens, columns.item_stream, columns.ev_t,
                                      tiers.short_term_tokens, tiers.ttl_s, listener=self.index)  # fmt: skip
        self.tokens, self.ev_t = columns.item_tokens, columns.ev_t
        self.vectors, self.item_t = self.index.vectors, self.index.item_t
        self.values = np.zeros(0)
        self.comp = _StoredForms()
        # a live write has no task field, so every item's and request's task is ""
        self._task_names = {"": 0}
        self.plan = RequestPlan(task=[], goal_item=np.zeros(0), last_item=np.zeros(0))
        self.query: list[np.ndarray] = []
        self.req_stream: list[int] = []
        self._types = (tuple(ITEM_TYPES.index(t) for t in cfg.filter.types)
                       if cfg.filter.types else None)  # fmt: skip
        self._pending: dict[int, list] = {}
        self._user_type = ITEM_TYPES.index("user_input")
        self._last_write: list[int] = []  # per stream
        self._first_user: dict[int, int] = {}  # stream -> its first user_input item
        self._moves_seen: list[int] = []  # per stream: moves of its engine applied
        self._fed = 0  # events fed

    # ------------------------------------------------------------ feeding
    def catch_up(self, events: list[dict], engines: list, query: str = "") -> np.ndarray:
        """Feed the session's events from the last call on (``events[e]`` is event ``e``;
        ``engines[s]``: stream ``s``'s live engine, whose move log has every event's moves);
        returns ``query``'s text vector, embedded in the same batch as the new texts (an
        embedder call costs about a millisecond however few its texts)."""
        new = range(self._fed, len(events))
        n0 = len(self.state.where)
        written = [self.columns.ev_t[e] for e in new if events[e]["event"] == "write"]
        items = self.columns.item_text[n0 : n0 + len(written)]
        texts = [events[e].get("text", "") for e in new if events[e]["event"] == "request"]
        batch = self._embed([*items, *texts, query])
        self._add_items(n0, written, len(engines), batch[: len(items)])
        vectors = iter(batch[len(items) : -1])
        cols, item, state = self.columns, n0, self.state
        for e in new:
            s, kind = cols.ev_stream[e], events[e]["event"]
            if kind == "write":
                self._wrote(s, item)
                item += 1
            elif kind == "request":
                self._request(s, next(vectors), e)
            engine, seen = engines[s], self._moves_seen[s]
            mv_event, mv_item, mv_kind = engine.mv_event, engine.mv_item, engine.mv_kind
            while seen < len(mv_event) and mv_event[seen] <= e:
                state.apply(mv_event[seen], mv_item[seen], mv_kind[seen])
                seen += 1
            self._moves_seen[s] = seen
        self._fed = len(events)
        return batch[-1]

    def _add_items(self, n0: int, times: list[float], n_streams: int, vectors: np.ndarray
                   ) -> None:  # fmt: skip
        """The items written since the last call, from item ``n0`` on (``times``: their write
        times; ``vectors``: their text vectors): values, forms, the index's rows."""
        from memlens.retrieval.compression import stored_forms
        from memlens.trace.features import static_value_of

        cols, n1 = self.columns, n0 + len(times)
        while len(self._last_write) < n_streams:
            self._last_write.append(-1)
            self._moves_seen.append(0)
        self.state.grow(n1, n_streams)
        if n1 == n0:
            self.index.add_items(np.zeros((0, self.index.dim), np.float32), [], [], [], [],
                                 n_streams)  # fmt: skip
            return
        texts = cols.item_text[n0:n1]
        types, tokens = cols.item_type[n0:n1], cols.item_tokens[n0:n1]
        values = np.clip(static_value_of(types, texts, tokens, cols.item_cost[n0:n1]), 0.0, 1.0)
        self.values = np.concatenate([self.values, values])
        self.comp.extend(*stored_forms(self._compression, types, tokens, texts, values))
        self.index.add_items(vectors, cols.item_stream[n0:n1], types, [0] * (n1 - n0),
                             times, n_streams)  # fmt: skip
        self.vectors, self.item_t = self.index.vectors, self.index.item_t

    def _wrote(self, s: int, i: int) -> None:
        """What a request's query needs to know of a write (``plan_requests``)."""
        self._last_write[s] = i
        if self.columns.item_type[i] == self._user_type:
            self._first_user.setdefault(s, i)

    def _query(self, s: int, vector: np.ndarray) -> np.ndarray:
        """The query of a request of stream ``s`` with text vector ``vector``, now."""
        from memlens.retrieval.query import RequestPlan, query_vectors

        plan = RequestPlan([""], np.asarray([self._first_user.get(s, -1)], np.int64),
                           np.asarray([self._last_write[s]], np.int64))  # fmt: skip
        return query_vectors(self.vectors, vector[None, :], plan, self.cfg.query)[0]

    def _request(self, s: int, vector: np.ndarray, e: int) -> None:
        """A recorded request: served as the replay serves it (the state moves on)."""
        r = len(self.query)
        self.query.append(self._query(s, vector))
        self.plan.task.append("")
        self.req_stream.append(s)
        self.gather(r, e)

    # ------------------------------------------------------------ asking
    def context(self, s: int, vector: np.ndarray, now: float) -> list[tuple[int, int, int]] | None:
        """``retrieve``'s answer for a request of stream ``s`` whose text has the vector
        ``vector`` (``catch_up``'s) at trace time ``now``, after the events fed; the state is
        left as it is.  None when that
        request would itself move the state first (a TTL expiry due at ``now``): the caller
        then asks ``retrieve``."""
        if self.state.expiring(s, now):
            return None
        if self.cfg.prefetch:  # a request gets the set assembled at the stream's previous one
            got = self._pending.get(s, [])
        else:
            r = len(self.query)
            self.query.append(self._query(s, vector))
            self.plan.task.append("")
            try:
                got, _ = self.assemble(r, s, -1, now=now, touch=False)
            finally:
                self.query.pop()
                self.plan.task.pop()
        return [(i, tier, tokens) for i, _, tier, tokens in self.not_resident(got)]


class _StoredForms:
    """The compression strategy and stored size of every item so far (``Compressor``'s
    ``strategy`` and ``stored_tokens``, growing)."""

    def __init__(self) -> None:
        self.strategy = np.zeros(0, np.int8)
        self.stored_tokens = np.zeros(0, np.int64)

    def extend(self, strategy: np.ndarray, stored: np.ndarray) -> None:
        self.strategy = np.concatenate([self.strategy, strategy])
        self.stored_tokens = np.concatenate([self.stored_tokens, stored])
