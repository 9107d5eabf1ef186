"""Generative Agents' retrieval score as an eviction order: forget what would not be retrieved.

Park, O'Brien, Cai, Morris, Liang and Bernstein, "Generative Agents: Interactive Simulacra of
Human Behavior", UIST 2023 (arXiv:2304.03442), section 4.1.  A memory's retrieval score is

    score = w_r * recency + w_i * importance + w_v * relevance

with each component min-max normalised to [0, 1] over the candidate memories, and the paper's
weights all 1.  Here the candidates are the resident, unpinned items, and the lowest score is
evicted (ties: least recently used):

* ``recency``     ``decay ** hours`` since the item was last written or needed (decay 0.995);
* ``importance``  stands in for the LLM's 1-10 poignancy rating: the rule scorer's static value
                  (type, content features, cost; ``memlens.trace.features.static_value``) divided by
                  its largest possible value under the configured boosts; with
                  ``importance="meta"`` a rating the trace carries (``meta.importance``, 1-10)
                  divided by 10 instead, the stand-in where an item has none;
* ``relevance``   cosine similarity between the item's text and the latest request's text,
                  with TF-IDF vectors (scikit-learn) computed once per trace; with
                  ``relevance="embeddings"`` the dot product of the run's embedding vectors
                  (below).  Before a stream's first request every relevance is 0.

Two variants (``variant``; each constant overridable):

* ``paper`` (the default: the paper's formula, sec. 4.1): weights 1, 1, 1; recency
  ``0.995 ** hours`` since the item was last accessed.
* ``code``: github.com/joonspk-research/generative_agents,
  ``reverie/backend_server/persona/cognitive_modules/retrieve.py`` at commit
  51072d422e28abb7cd3fdf2b92f1d6e90a7cced8, ``new_retrieve`` (lines 199-267): weights
  ``gw = [0.5, 3, 2]`` for recency, relevance, importance (line 244, times the persona's
  ``recency_w = relevance_w = importance_w = 1``, ``persona/memory_structures/scratch.py:57-59``
  at commit 6d7d7ad1e95355e57934b00db377a05226b1277f), and a recency by *rank*: the nodes are
  sorted by ``last_accessed``, oldest first (line 227), and ``extract_recency`` (lines 132-152)
  gives the i-th of them ``recency_decay ** i``, i = 1..n, so the *oldest* memory gets the
  highest recency (an inversion of the paper's intent); ``recency_decay = 0.99``
  (``scratch.py:60``; the bundled personas' saved scratch files are said to hold 0.995, which
  is not checked here).  Each component is min-max normalised (lines 232-236); one without
  spread becomes 0.5 everywhere (``normalize_dict_floats``, lines 97-99), which orders nothing,
  as here.  As an eviction order the inversion evicts the most recently accessed first among
  otherwise equal memories.  Both recencies replay on the compiled kernel
  (``memlens/kernels/generative_agents.py``: the rank recency sorts the candidates by
  recency at each victim choice).

Relevance, the stand-in for ``text-embedding-ada-002``.  The released code embeds the focal
point with ``get_embedding`` (``persona/prompt_template/gpt_structure.py``, model
``text-embedding-ada-002``) and takes ``cos_sim`` (``retrieve.py:49-67``, ``dot(a, b) /
(norm(a) * norm(b))``) with each node's stored embedding (``extract_relevance``,
``retrieve.py:175-196``: the call at 189, the cosine at 194).  No LLM is called here, so:

* ``relevance="tfidf"`` (the default): the cosine of the item's and the request's sparse
  TF-IDF vectors, fitted once on the whole trace's texts.  It stays the default so that the
  golden numbers and every published table keep their meaning, and because it is the cheaper
  of the two (a few shared terms per pair instead of a dot product over every dimension).
* ``relevance="embeddings"``: the vectors ``memlens.retrieval.embeddings.embed_trace`` gives
  for the run's ``embeddings:`` block (``kind`` tfidf / hashing: TF-IDF reduced to ``dim``
  dimensions by a seeded SVD; ``trace``: the vectors the trace carries in ``meta.embedding``,
  e.g. ada-002's own; ``sentence``: a sentence-transformers model already on this machine,
  ``embeddings.model``, never downloaded), the ones the retrieval tiers index, cached per
  trace and settings there.  They are L2-normalised (float32), so the cosine is their dot
  product, summed in float64 over the dimensions in order.  The run hands the settings and
  seed to the policy (``use_embeddings_settings``, called by ``memlens.runs.pipeline``); a
  policy built in Python without a run uses ``EmbeddingsConfig()`` and seed 0.  An empty
  text has the zero vector (relevance 0), where the released code embeds "this is blank".

Offline stand-ins, said plainly: the IDF statistics are those of the whole trace (texts, never
needs), and importance is a rule, not a language model.
"""

from __future__ import annotations

import inspect
import math

import numpy as np
from memlens.policies.scan import ScanPolicy

from memlens.policy import PolicyContext, compiled_kernel
from memlens.retrieval.embeddings import EmbeddingError, EmbeddingsConfig, embed_trace, vectors_key
from memlens.trace.features import (
    DEFAULT_TYPE_BASE,
    content_boost,
    distinct_texts,
    static_value,
    type_array,
    unique_texts,
)
from memlens.trace.words import count_matrix, l2_normalize_rows, text_tokens

_VECTORS_KEY = "_memlens_tfidf_rows"
_DISTINCT_KEY = "_memlens_tfidf_distinct"
#: ``{vectors_key: CSR arrays}`` and ``{vectors_key: dict rows}`` of ``relevance=embeddings``:
#: attributes of their own, keyed by the embedder settings, so TF-IDF and each embedder never
#: share an entry
_EMBEDDED_CSR_KEY = "_memlens_ga_embedded_csr"
_EMBEDDED_ROWS_KEY = "_memlens_ga_embedded_rows"
#: Where relevance comes from (``relevance=``)
RELEVANCE_SOURCES = ("tfidf", "embeddings")
#: ``content_boost``'s defaults: the boosts that count when the config does not set them
BOOST_DEFAULTS = {
    name: p.default
    for name, p in inspect.signature(content_boost).parameters.items()
    if p.default is not inspect.Parameter.empty
}


def _tfidf_of_distinct(trace):
    """(TF-IDF rows of the distinct item and request texts or None, each text's row), cached
    on the trace: the vectoriser runs once for the class's dicts and the kernel's arrays."""
    cached = trace.__dict__.get(_DISTINCT_KEY)
    if cached is None:
        distinct, inverse = _distinct_item_and_request_texts(trace)
        x = tfidf_distinct(distinct, np.bincount(inverse, minlength=len(distinct)))
        cached = trace.__dict__[_DISTINCT_KEY] = (x, inverse)
    return cached


def tfidf_rows(trace) -> tuple[list[dict[int, float]], list[dict[int, float]]]:
    """L2-normalised TF-IDF vectors of every item and request text, as {term: weight} dicts
    (equal texts share one dict, which nobody mutates).

    Cached on the trace: the vectoriser runs once however many policies and budgets replay it.
    """
    cached = trace.__dict__.get(_VECTORS_KEY)
    if cached is None:
        x, inverse = _tfidf_of_distinct(trace)
        if x is None:
            rows = [{} for _ in inverse]
        else:
            ind, dat, ptr = x.indices.tolist(), x.data.tolist(), x.indptr.tolist()
            once = [dict(zip(ind[a:b], dat[a:b])) for a, b in zip(ptr[:-1], ptr[1:])]
            rows = [once[k] for k in inverse.tolist()]
        cached = (rows[: trace.n_items], rows[trace.n_items :])
        trace.__dict__[_VECTORS_KEY] = cached
    return cached


def tfidf_csr(trace) -> tuple[np.ndarray, ...]:
    """:func:`tfidf_rows` as CSR arrays (pointer, term, weight) for the items, then the
    requests, each row in its dict's order, without building a dict (the compiled kernel's
    input: on a 5M-event trace the dicts were gigabytes)."""
    x, inverse = _tfidf_of_distinct(trace)
    if x is None:
        ptr, term, weight = np.zeros(1, np.int64), np.zeros(0, np.int64), np.zeros(0)
    else:
        ptr, term, weight = x.indptr.astype(np.int64), x.indices.astype(np.int64), x.data
    items = _gather_rows(ptr, term, weight, inverse[: trace.n_items])
    return items + _gather_rows(ptr, term, weight, inverse[trace.n_items :])


def _gather_rows(ptr, term, weight, rows) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The CSR rows ``rows`` (repeats allowed) of (``ptr``, ``term``, ``weight``), in order."""
    lengths = np.diff(ptr)[rows] if len(ptr) > 1 else np.zeros(len(rows), np.int64)
    out_ptr = np.zeros(len(rows) + 1, np.int64)
    np.cumsum(lengths, out=out_ptr[1:])
    at = np.repeat(ptr[rows] - out_ptr[:-1], lengths) + np.arange(out_ptr[-1])
    return out_ptr, term[at], weight[at]


def embedding_csr(trace, cfg: EmbeddingsConfig, seed: int) -> tuple[np.ndarray, ...]:
    """The run's embedding vectors (``embed_trace``: L2-normalised float32 rows) of the items,
    then the requests, as :func:`tfidf_csr`'s CSR arrays: each row's non-zero dimensions in
    order, as float64, so the class's dicts and the kernel sum every dot product over the same
    dimensions in the same order.  Cached on the trace per embedder settings and seed."""
    cache = trace.__dict__.setdefault(_EMBEDDED_CSR_KEY, {})
    key = vectors_key(trace, cfg, seed)
    if key not in cache:
        try:
            emb = embed_trace(trace, cfg, seed)
        except EmbeddingError as exc:
            raise EmbeddingError(f"generative_agents relevance=embeddings: {exc}") from None
        cache[key] = dense_csr(emb.items) + dense_csr(emb.requests)
    return cache[key]


def embedding_rows(trace, cfg: EmbeddingsConfig, seed: int) -> tuple[list[dict], list[dict]]:
    """:func:`embedding_csr` as the class's ``{dimension: weight}`` dicts (equal vectors share
    one dict, which nobody mutates), items then requests; cached like it."""
    cache = trace.__dict__.setdefault(_EMBEDDED_ROWS_KEY, {})
    key = vectors_key(trace, cfg, seed)
    if key not in cache:
        csr = embedding_csr(trace, cfg, seed)
        cache[key] = (csr_dicts(*csr[:3]), csr_dicts(*csr[3:]))
    return cache[key]


def dense_csr(x: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Dense rows as CSR arrays (pointer, dimension, float64 weight), the zeros left out."""
    rows, cols = np.nonzero(x)
    ptr = np.zeros(len(x) + 1, np.int64)
    np.cumsum(np.bincount(rows, minlength=len(x)), out=ptr[1:])
    return ptr, cols.astype(np.int64), x[rows, cols].astype(np.float64)


def csr_dicts(ptr, term, weight) -> list[dict[int, float]]:
    """CSR rows as ``{term: weight}`` dicts in row order; equal rows share one dict."""
    once: dict[tuple, dict[int, float]] = {}
    t, w, p = term.tolist(), weight.tolist(), ptr.tolist()
    out = []
    for a, b in zip(p[:-1], p[1:]):
        key = (tuple(t[a:b]), tuple(w[a:b]))
        row = once.get(key)
        if row is None:
            row = once[key] = dict(zip(t[a:b], w[a:b]))
        out.append(row)
    return out


def importance(trace, policy) -> np.ndarray:
    """The class's importance of every item (its static value scaled into [0, 1])."""
    value = static_value(trace, policy.type_base, policy.boosts, policy.cost_threshold,
                         policy.cost_boost)  # fmt: skip
    b = {**BOOST_DEFAULTS, **policy.boosts}
    top = type_array(policy.type_base).max() + policy.cost_boost
    top += sum(max(0.0, float(v)) for k, v in b.items() if k != "length_ref_tokens")
    return np.clip(value / top, 0.0, 1.0)


def _distinct_item_and_request_texts(trace) -> tuple[list[str], np.ndarray]:
    """``unique_texts(trace.item_text + trace.req_text)``, from the two columns' own."""
    items, item_row = distinct_texts(trace, "item_text")
    reqs, req_row = distinct_texts(trace, "req_text")
    distinct, row = unique_texts(items + reqs)
    return distinct, np.concatenate([row[: len(items)][item_row], row[len(items) :][req_row]])


def tfidf_distinct(distinct: list[str], copies: np.ndarray):
    """``TfidfVectorizer(sublinear_tf=True).fit_transform(texts)``'s rows of the distinct
    texts, where text ``k`` of ``distinct`` stands for ``copies[k]`` equal texts; None when
    there is no vocabulary.  The document frequencies count every copy, so each row is the
    very row (bit for bit) the vectoriser gives that text among all the copies, for a third
    (on a generated agent trace) of the tokenising."""
    x = count_matrix(text_tokens(distinct))  # CountVectorizer's, in one pass
    if x is None:  # no word of two letters or more anywhere: no vocabulary
        return None
    nnz_row = np.repeat(np.arange(x.shape[0]), np.diff(x.indptr))
    df = np.bincount(x.indices, weights=copies[nnz_row].astype(np.float64), minlength=x.shape[1])
    df += 1.0  # sklearn's smooth_idf, its order of operations
    idf = np.full_like(df, fill_value=int(copies.sum()) + 1, dtype=np.float64)
    idf /= df
    np.log(idf, out=idf)
    idf += 1.0
    np.log(x.data, x.data)  # sublinear tf
    x.data += 1.0
    x.data *= idf[x.indices]
    l2_normalize_rows(x)  # sklearn's normalize(x, norm="l2"), without importing it
    return x


#: Per variant: (w_recency, w_importance, w_relevance, recency_decay, recency).
VARIANT_DEFAULTS = {"paper": (1.0, 1.0, 1.0, 0.995, "hours"), "code": (0.5, 2.0, 3.0, 0.99, "rank")}


@compiled_kernel("memlens.kernels.generative_agents:replay")
class GenerativeAgents(ScanPolicy):
    name = "generative_agents"
    #: A sweep hands its batch out early (``memlens.runs.sweep.job_batches``): the TF-IDF
    #: vectors and importances of every item made it about half the learned scorer's batch.
    sweep_weight = 4.0
    #: relevance is TF-IDF with document frequencies over every item of the trace (or an
    #: embedding fitted on every text of it)
    stream_local = False

    def __init__(
        self,
        variant: str = "paper",
        w_recency: float | None = None,
        w_importance: float | None = None,
        w_relevance: float | None = None,
        recency_decay: float | None = None,
        recency: str | None = None,
        importance: str = "rule",
        relevance: str = "tfidf",
        normalize: bool = True,
        type_base: dict[str, float] | None = None,
        boosts: dict[str, float] | None = None,
        cost_threshold: float = 0.01,
        cost_boost: float = 0.15,
    ) -> None:
        if variant not in VARIANT_DEFAULTS:
            raise ValueError(f"generative_agents: variant must be paper or code, not {variant!r}")
        given = (w_recency, w_importance, w_relevance, recency_decay, recency)
        wr, wi, wv, decay, rec = (d if g is None else g
                                  for g, d in zip(given, VARIANT_DEFAULTS[variant]))  # fmt: skip
        if not 0.0 < decay <= 1.0:
            raise ValueError("generative_agents: recency_decay must be in (0, 1]")
        if rec not in ("hours", "rank"):
            raise ValueError(f"generative_agents: recency must be hours or rank, not {rec!r}")
        if importance not in ("rule", "meta"):
            raise ValueError(
                f"generative_agents: importance must be rule or meta, not {importance!r}"
            )
        if relevance not in RELEVANCE_SOURCES:
            raise ValueError(
                f"generative_agents: relevance must be tfidf or embeddings, not {relevance!r}"
            )
        self.importance_source, self.relevance_source = importance, relevance
        self.embeddings, self.embeddings_seed = EmbeddingsConfig(), 0
        self.variant, self.rank_recency = variant, rec == "rank"
        self.w_recency, self.w_importance, self.w_relevance = float(wr), float(wi), float(wv)
        self.recency_decay = float(decay)
        self.log_decay_per_s = math.log(decay) / 3600.0
        self.normalize = bool(normalize)
        self.type_base = dict(type_base or DEFAULT_TYPE_BASE)
        self.boosts = dict(boosts or {})
        self.cost_threshold, self.cost_boost = float(cost_threshold), float(cost_boost)

    @property
    def reads_embeddings(self) -> bool:
        """Whether a run must make embeddings for this policy (``memlens.runs.preflight``)."""
        return self.relevance_source == "embeddings"

    def use_embeddings_settings(self, embeddings: EmbeddingsConfig, seed: int) -> None:
        """The run's ``embeddings:`` block and seed (``memlens.runs.pipeline.replay`` hands
        them over): the vectors of ``relevance=embeddings``, the retrieval tiers' own.  The
        next replay prepares its vectors again, even on the trace it last replayed."""
        self.embeddings, self.embeddings_seed = embeddings, int(seed)
        self._scan_trace = None  # ``ScanPolicy.reset`` then calls ``prepare`` again

    def relevance_key(self, trace, source: str | None = None) -> tuple:
        """What this instance's relevance vectors depend on besides the trace: the source
        and, for embeddings, the embedder settings and seed (the kernel's cache key).
        ``source``: that source instead of the instance's (the kernel's warm-up: TF-IDF)."""
        if (source or self.relevance_source) == "tfidf":
            return ("tfidf",)
        return ("embeddings", vectors_key(trace, self.embeddings, self.embeddings_seed))

    def relevance_csr(self, trace, source: str | None = None) -> tuple[np.ndarray, ...]:
        """This instance's item and request vectors (or ``source``'s) as CSR arrays, in its
        dicts' order (the compiled kernel's input)."""
        if (source or self.relevance_source) == "tfidf":
            return tfidf_csr(trace)
        return embedding_csr(trace, self.embeddings, self.embeddings_seed)

    def relevance_rows(self, trace) -> tuple[list[dict], list[dict]]:
        """This instance's item and request vectors as ``{term: weight}`` dicts."""
        if self.relevance_source == "tfidf":
            return tfidf_rows(trace)
        return embedding_rows(trace, self.embeddings, self.embeddings_seed)

    def importance_of(self, trace) -> np.ndarray:
        """Every item's importance under this instance's settings (its kernel reads it too):
        with ``importance="meta"`` an item's ``meta.importance`` (the 1-10 poignancy an LLM
        rated, as the released code stores it) divided by 10, the rule's stand-in where an item
        has none."""
        value = importance(trace, self)
        if self.importance_source == "meta":
            for i, meta in enumerate(trace.item_meta):
                rated = meta.get("importance") if meta else None
                if isinstance(rated, (int, float)) and not isinstance(rated, bool):
                    value[i] = float(rated) / 10.0
        return value

    def prepare(self, trace) -> None:
        self._importance = self.importance_of(trace).tolist()
        self._item_vec, self._req_vec = self.relevance_rows(trace)

    def reset(self, ctx: PolicyContext) -> None:
        super().reset(ctx)
        # recency = decay ** hours = c(t) * rho_i with rho_i = exp(-k * (accessed_i - t0)): the
        # common factor c(t) cancels under min-max normalisation, so only rho is kept
        events = ctx.trace.stream_events[ctx.stream]
        self._t0 = self._t[int(events[0])] if len(events) else 0.0
        self._rho: dict[int, float] = {}
        self._query: dict[int, float] = {}  # the latest request's vector
        self._rel: dict[int, float] = {}  # non-zero relevances of candidates to the latest request

    def relevance(self, item: int) -> float:
        """Cosine similarity of the item's vector to the latest request's (TF-IDF or the
        run's embeddings), summed over the item's terms in their order."""
        q = self._query
        vec = self._item_vec[item]
        if not q or q.keys().isdisjoint(vec):  # short texts: usually disjoint, decided in C
            return 0.0
        return sum(w * q[term] for term, w in vec.items() if term in q)

    def insert(self, item: int, now: int) -> None:
        super().insert(item, now)
        self._rho[item] = math.exp(-self.log_decay_per_s * (self._t[now] - self._t0))
        q = self._query
        if q and not q.keys().isdisjoint(self._item_vec[item]):
            self._rel[item] = self.relevance(item)

    def observe(self, request: int, now: int) -> None:
        super().observe(request, now)
        q = self._query = self._req_vec[request]
        # only non-zero relevances are stored; a missing entry means 0
        rel: dict[int, float] = {}
        if q:
            disjoint = q.keys().isdisjoint
            item_vec = self._item_vec
            for i in self._res:
                vec = item_vec[i]
                if not disjoint(vec):
                    rel[i] = sum(w * q[term] for term, w in vec.items() if term in q)
        self._rel = rel

    def unpin(self, item: int) -> None:
        super().unpin(item)
        if item in self._res:
            self._rel[item] = self.relevance(item)

    def used(self, item: int, now: int) -> None:
        self._rho[item] = math.exp(-self.log_decay_per_s * (self._t[now] - self._t0))

    def scores(self, items: list[int], t: float) -> list[float]:
        rho, importance, rel_of = self._rho, self._importance, self._rel
        if self.rank_recency:  # the code's: items are least recently accessed first
            d = self.recency_decay
            rec = [d ** (k + 1) for k in range(len(items))]
        else:
            rec = [rho[i] for i in items]
        if not self.normalize and not self.rank_recency:  # the common factor matters: c(t) * rho
            c = math.exp(self.log_decay_per_s * (t - self._t0))
            rec = [c * r for r in rec]
        imp = [importance[i] for i in items]
        get = rel_of.get
        rel = [get(i, 0.0) for i in items]
        wr, wi, wv = self.w_recency, self.w_importance, self.w_relevance
        if self.normalize:
            # min-max normalisation is affine: only the slopes matter for the ranking, so
            # scale each weight by 1 / range (a component without spread counts for nothing)
            wr, wi, wv = (w / r if r > 1e-12 else 0.0
                          for w, r in ((wr, max(rec) - min(rec)), (wi, max(imp) - min(imp)),
                                       (wv, max(rel) - min(rel))))  # fmt: skip
        return [wr * a + wi * b + wv * c for a, b, c in zip(rec, imp, rel)]
