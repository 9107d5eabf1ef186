"""Context assembly at request time: working memory plus what retrieval brings back.

For each request (``retrieval.enabled``; what retrieval does is a
:class:`memlens.retrieval.config.RetrievalConfig`, the short-term cache and the configured
latencies a :class:`memlens.retrieval.tiers.TiersConfig`):

1. the query vector (``memlens.retrieval.query``);
2. the pre-filter: same stream always; same task, item types and a time window optionally.
   It is applied before any similarity is computed;
3. candidates: the ``k`` most similar items of the short-term cache (exact) and the ``k``
   nearest of the long-term store (hnswlib, or the backend ``retrieval.store`` names:
   :mod:`memlens.retrieval.store`), with similarity at least ``min_similarity``;
4. rerank by ``rerank.similarity * cosine + rerank.value * value + rerank.freshness *
   0.5 ** (age / rerank.freshness_half_life_s)`` (ties: lower item index), then take items best
   first while they fit in ``budget`` tokens.  An item from the long-term store costs its
   stored size (compression);
5. optionally promote what was retrieved in full into working memory (the simulator does the
   move, subject to the policy's ``admit``; the run is then outside the oracle class), and
   refresh retrieved short-term items in the cache's LRU order.

With ``prefetch`` the set assembled at a stream's request k-1 (from k-1's query and the state
then) is what request k gets, so the latency is off the critical path; the record says how often
that set covered everything the request needed beyond working memory.

Two drivers: :class:`LiveRetrieval` is called by the reference simulator at every request
(needed when promotion feeds back into working memory); :func:`retrieve_post_hoc` runs the same
engine over a finished replay's move log (any engine, including the compiled kernels), which
gives identical results when nothing is promoted.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field

import numpy as np

from memlens.retrieval.compression import LOSSY, NONE, POINTER, Compressor
from memlens.retrieval.config import RetrievalConfig
from memlens.retrieval.embeddings import Embeddings
from memlens.retrieval.index import Prefilter, top_k
from memlens.retrieval.query import plan_requests, query_vectors
from memlens.retrieval.store import long_term_index
from memlens.retrieval.tiers import LTS, STC, WM, TierLog, TiersConfig, TierState, merged_schedule
from memlens.simulator import SimResult
from memlens.trace.model import ITEM_TYPES, Trace


@dataclass
class RetrievalRecord:
    """What retrieval did at each request; ``memlens.analyze.metrics`` turns it into numbers."""

    ret_ptr: np.ndarray  # int64 [R + 1]: retrieved entries of request r are [ptr[r], ptr[r+1])
    ret_item: np.ndarray  # int32
    ret_form: np.ndarray  # int8: compression code the item came back in (NONE from the STC)
    ret_tier: np.ndarray  # int8: STC or LTS
    ret_tokens: np.ndarray  # int64: context tokens it cost
    ret_needed: np.ndarray  # bool: the request needed it
    need_ctx: np.ndarray  # uint8 per reference: present in the assembled context (and usable)
    need_lost: np.ndarray  # uint8 per reference: retrieved, but only in a lossy form that fails
    retrieved_tokens: np.ndarray  # int64 per request
    modeled_ms: np.ndarray  # float64 per request: configured tier latency on the critical path
    measured_ms: np.ndarray  # float64 per request: wall time of the retrieval (timing only)
    index_ms: np.ndarray  # float64 per request: wall time of the LTS index query (timing only)
    prefetch_served: np.ndarray  # int8 per request: -1 n/a, 0/1 prefetched set covered it
    promoted: int
    stored_tokens_saved: int  # full - stored tokens of items in the LTS at the end
    lossy_items_at_end: int
    build_s: float
    index_queries: int
    exact_queries: int
    tiers: TierLog
    config: RetrievalConfig
    tiers_config: TiersConfig
    extra: dict = field(default_factory=dict)


class Retriever:
    """The retrieval engine: tier state, LTS index and context assembly for one replay."""

    def __init__(self, trace: Trace, cfg: RetrievalConfig, tiers: TiersConfig, emb: Embeddings,
                 compressor: Compressor, values: np.ndarray, seed: int):  # fmt: skip
        """``cfg``: what retrieval does; ``tiers``: the short-term cache and the configured
        latencies; ``seed``: the run's seed (seeds the long-term store's graphs)."""
        if emb.items.shape[0] != trace.n_items or emb.requests.shape[0] != trace.n_requests:
            raise ValueError("embeddings do not match the trace (item or request count differs)")
        self.trace, self.cfg, self.tiers_config, self.comp = trace, cfg, tiers, compressor
        self.vectors = emb.items
        names = {name: n for n, name in enumerate(dict.fromkeys(trace.item_task))}
        self._task_names = names
        self.index = long_term_index(
            cfg.store, emb.items, trace.item_stream, trace.n_streams, seed=seed,
            item_type=trace.item_type,
            item_task=np.asarray([names[t] for t in trace.item_task], dtype=np.int64),
            item_t=trace.item_t, **asdict(cfg.hnsw),
        )  # fmt: skip
        self.state = TierState(trace, tiers.short_term_tokens, tiers.ttl_s, listener=self.index)
        plan = plan_requests(trace)
        self.plan = plan
        self.query = query_vectors(emb.items, emb.requests, plan, cfg.query)
        self.values = np.asarray(values, dtype=np.float64)
        self.item_t = trace.item_t
        self.tokens = trace.item_tokens
        self.req_stream = trace.req_stream.tolist()
        self.ev_t = trace.ev_t
        types = cfg.filter.types
        self._types = tuple(ITEM_TYPES.index(t) for t in types) if types else None
        self._pending: dict[int, list[tuple[int, int, int, int]]] = {}
        n_req, n_ref = trace.n_requests, trace.n_references
        self._ptr = [0]
        self._items: list[int] = []
        self._forms: list[int] = []
        self._tiers: list[int] = []
        self._toks: list[int] = []
        self._needed: list[bool] = []
        self.need_ctx = np.zeros(n_ref, dtype=np.uint8)
        self.need_lost = np.zeros(n_ref, dtype=np.uint8)
        self.retrieved_tokens = np.zeros(n_req, dtype=np.int64)
        self.modeled_ms = np.zeros(n_req, dtype=np.float64)
        self.measured_ms = np.zeros(n_req, dtype=np.float64)
        self.index_ms = np.zeros(n_req, dtype=np.float64)
        self.prefetch_served = np.full(n_req, -1, dtype=np.int8)
        self._rows: dict[int, tuple] = {}
        self.promoted = 0

    # ------------------------------------------------------------- pre-filter
    def prefilter(self, r: int, now: float) -> Prefilter | None:
        """Request ``r``'s conditions beyond its stream (None when there are none)."""
        f = self.cfg.filter
        if not (self._types or f.same_task or f.max_age_s is not None):
            return None
        return Prefilter(
            types=self._types,
            task=self._task_names.get(self.plan.task[r], -1) if f.same_task else None,
            min_t=None if f.max_age_s is None else now - f.max_age_s,
        )

    # --------------------------------------------------------------- assembly
    def assemble(self, r: int, s: int, e: int, now: float | None = None, touch: bool = True
                 ) -> tuple[list[tuple[int, int, int, int]], float]:  # fmt: skip
        """Retrieved (item, form, tier, tokens) for request ``r`` and the LTS query wall ms.
        ``now``: the trace time (default: event ``e``'s); ``touch=False``: a look that leaves
        the short-term cache's order as it is (the live manager's ``context``)."""
        cfg = self.cfg
        q = self.query[r]
        now = float(self.ev_t[e]) if now is None else now
        pre = self.prefilter(r, now)
        stc = self.state.stc[s]
        stc_items = np.fromiter(stc.keys(), dtype=np.int64, count=len(stc))
        if pre is not None and stc_items.size:
            stc_items = stc_items[self.index.mask(stc_items, pre)]
        si, ss = top_k(self.vectors, stc_items, q, cfg.k)
        t0 = time.perf_counter()
        li, ls = self.index.search(s, q, cfg.k, pre)
        index_ms = (time.perf_counter() - t0) * 1e3 if self.index.live[s] else 0.0
        items = np.concatenate([si, li])
        if items.size == 0:
            return [], index_ms
        sims = np.concatenate([ss, ls]).astype(np.float64)
        tier = np.concatenate([np.full(si.size, STC, np.int8), np.full(li.size, LTS, np.int8)])
        keep = sims >= cfg.min_similarity
        items, sims, tier = items[keep], sims[keep], tier[keep]
        age = np.maximum(0.0, now - self.item_t[items])
        w = cfg.rerank
        score = (w.similarity * sims + w.value * self.values[items]
                 + w.freshness * np.exp2(-age / w.freshness_half_life_s))  # fmt: skip
        order = np.lexsort((items, -score))
        chosen = []
        used = 0
        strategy, stored = self.comp.strategy, self.comp.stored_tokens
        for n in order.tolist():
            i = int(items[n])
            if tier[n] == STC:
                form, cost = NONE, int(self.tokens[i])
            else:
                form, cost = int(strategy[i]), int(stored[i])
            if used + cost <= cfg.budget:
                used += cost
                chosen.append((i, form, int(tier[n]), cost))
        if touch and self.tiers_config.short_term_policy == "lru":
            for i, _, t, _ in chosen:
                if t == STC:
                    self.state.touch(i, e)
        return chosen, index_ms

    def gather(self, r: int, e: int) -> tuple[list[tuple[int, int, int, int]], bool, float, float]:
        """What request ``r`` (at event ``e``) gets from the lower tiers, the state moved on as
        the request moves it (TTL tick, the cache's LRU order, the prefetched set): ``(got,
        hidden, index ms, measured ms)``, ``hidden`` when prefetching took it off the critical
        path."""
        s = self.req_stream[r]
        self.state.tick(e, s)
        t0 = time.perf_counter()
        fresh, index_ms = self.assemble(r, s, e)
        if self.cfg.prefetch:
            got = self._pending.get(s, [])
            self._pending[s] = fresh
            hidden = True
        else:
            got, hidden = fresh, False
        measured_ms = (time.perf_counter() - t0) * 1e3
        return self.not_resident(got), hidden, index_ms, measured_ms

    def not_resident(self, got: list[tuple[int, int, int, int]]) -> list:
        """``got`` without what is in working memory (a prefetched item may be resident by now)."""
        where = self.state.where
        return [g for g in got if where[g[0]] != WM]

    def serve(self, r: int, e: int) -> list[int]:
        """Assemble request ``r``'s context (tier state must be current); returns promotions."""
        cfg = self.cfg
        s = self.req_stream[r]
        got, hidden, self.index_ms[r], self.measured_ms[r] = self.gather(r, e)
        if not hidden:
            tiers = self.tiers_config
            lat = tiers.short_term_latency_ms
            if self.index.live[s] > 0:
                lat += tiers.long_term_latency_ms
            if any(g[1] == POINTER for g in got):
                lat += tiers.long_term_latency_ms  # the full content behind the pointer
            self.modeled_ms[r] = lat
        self._record(r, got)
        if cfg.promote:
            promote = [g[0] for g in got if g[1] not in LOSSY]
            self.promoted += len(promote)
            return promote
        return []

    def _record(self, r: int, got: list[tuple[int, int, int, int]]) -> None:
        trace = self.trace
        lo, hi = int(trace.needs_ptr[r]), int(trace.needs_ptr[r + 1])
        needs, groups = trace.needs[lo:hi].tolist(), trace.alternative_groups
        # a need with alternatives (trace format 1.1) is served by any of them
        need_set = set(trace.group_items[trace.group_ptr[lo] : trace.group_ptr[hi]].tolist())
        form_of = {g[0]: g[1] for g in got}
        where = self.state.where
        missing = covered = 0
        for j, i in zip(range(lo, hi), needs):
            alts = groups.get(j, (i,))
            if any(where[a] == WM for a in alts):
                self.need_ctx[j] = 1
                continue
            missing += 1
            forms = [form_of[a] for a in alts if a in form_of]
            if not forms:
                continue
            if any(self.comp.serves(f, j) for f in forms):
                self.need_ctx[j] = 1
                covered += 1
            else:
                self.need_lost[j] = 1
        if self.cfg.prefetch and missing:
            self.prefetch_served[r] = 1 if covered == missing else 0
        for i, f, t, c in got:
            self._items.append(i)
            self._forms.append(f)
            self._tiers.append(t)
            self._toks.append(c)
            self._needed.append(i in need_set)
        self.retrieved_tokens[r] = sum(g[3] for g in got)
        self._rows[r] = (len(self._items) - len(got), len(self._items))

    # ----------------------------------------------------------------- result
    def record(self) -> RetrievalRecord:
        n_req = self.trace.n_requests
        counts = np.zeros(n_req, dtype=np.int64)
        starts = np.zeros(n_req, dtype=np.int64)
        for r, (a, b) in self._rows.items():
            counts[r], starts[r] = b - a, a
        # requests were served stream by stream (live driver): lay entries out by request
        take = np.concatenate([np.arange(a, a + c) for a, c in zip(starts.tolist(), counts.tolist())]
                              ) if n_req else np.empty(0, dtype=np.int64)  # fmt: skip
        take = take.astype(np.int64)
        ptr = np.zeros(n_req + 1, dtype=np.int64)
        np.cumsum(counts, out=ptr[1:])
        log = self.state.log()
        order = np.argsort(log.event, kind="stable")
        log = TierLog(log.event[order], log.item[order], log.src[order], log.dst[order],
                      log.final_tier)  # fmt: skip
        in_lts = log.final_tier == LTS
        return RetrievalRecord(
            ret_ptr=ptr,
            ret_item=np.asarray(self._items, dtype=np.int32)[take],
            ret_form=np.asarray(self._forms, dtype=np.int8)[take],
            ret_tier=np.asarray(self._tiers, dtype=np.int8)[take],
            ret_tokens=np.asarray(self._toks, dtype=np.int64)[take],
            ret_needed=np.asarray(self._needed, dtype=bool)[take],
            need_ctx=self.need_ctx,
            need_lost=self.need_lost,
            retrieved_tokens=self.retrieved_tokens,
            modeled_ms=self.modeled_ms,
            measured_ms=self.measured_ms,
            index_ms=self.index_ms,
            prefetch_served=self.prefetch_served,
            promoted=self.promoted,
            stored_tokens_saved=self.comp.tokens_saved(in_lts),
            lossy_items_at_end=int(np.isin(self.comp.strategy[in_lts], LOSSY).sum()),
            build_s=self.index.build_s,
            index_queries=self.index.index_queries,
            exact_queries=self.index.exact_queries,
            tiers=log,
            config=self.cfg,
            tiers_config=self.tiers_config,
        )


class LiveRetrieval:
    """The simulator's request hook: keeps tier state current from the growing move log."""

    def __init__(self, retriever: Retriever):
        self.retriever = retriever
        self.promote = retriever.cfg.promote
        self._pos = 0

    def _sync(self, mv_event: list, mv_item: list, mv_kind: list) -> None:
        apply = self.retriever.state.apply
        for n in range(self._pos, len(mv_event)):
            apply(mv_event[n], mv_item[n], mv_kind[n])
        self._pos = len(mv_event)

    def request(self, r: int, e: int, mv_event: list, mv_item: list, mv_kind: list) -> list[int]:
        self._sync(mv_event, mv_item, mv_kind)
        return self.retriever.serve(r, e)

    def finish(self, mv_event: list, mv_item: list, mv_kind: list) -> None:
        self._sync(mv_event, mv_item, mv_kind)


def retrieve_post_hoc(trace: Trace, result: SimResult, retriever: Retriever) -> RetrievalRecord:
    """Run retrieval over a finished replay (no promotion: working memory is already decided)."""
    if retriever.cfg.promote:
        raise ValueError("retrieval.promote needs the live driver (reference engine)")
    state, serve = retriever.state, retriever.serve
    for e, i, k in merged_schedule(trace, result, ticks=True):
        if i < 0:
            serve(k, e)
        else:
            state.apply(e, i, k)
    return retriever.record()
