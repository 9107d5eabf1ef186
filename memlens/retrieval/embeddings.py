"""Vectors for items and requests, computed offline and cached per trace.

Retrieval needs one vector per item (what the long-term store indexes) and one per request
(the query).  They are computed once per (trace, embedder settings) before the replay, not in
the replay loop, so the replay pays only for the index queries, as a deployed agent that embeds
on write would.

Embedders (``embeddings.kind``):

* ``tfidf`` (default): scikit-learn TF-IDF over item and request texts, reduced to ``dim``
  dimensions with TruncatedSVD (seeded), fitted on the trace itself or on a text corpus
  (``embeddings.corpus``: one document per line).  Works offline, needs nothing downloaded.
* ``hashing``: the same with a HashingVectorizer (no vocabulary to hold; for huge traces).
* ``trace``: the trace carries its own vectors in ``meta.embedding`` of every write and request.
* ``sentence``: a sentence-transformers model that is already on this machine
  (``embeddings.model`` = local path or cached name).  Hugging Face is put in offline mode first,
  so a missing model is an error, never a download.

Every vector is L2-normalised, so a dot product is the cosine similarity the index uses.
Results are cached as ``<cache_dir>/<key>.npz`` where the key hashes the trace's sha256, the
embedder settings that change the vectors (``kind``, ``dim``, ``model``, the corpus's content)
and the run's seed; a changed setting, seed or trace is a new key.  Entries are stored through
``memlens._util.safecache`` (no pickle, checksummed): a damaged one is discarded with one warning and
computed again.
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from memlens._util import safecache
from memlens._util.cachedir import cache_dir
from memlens._util.values import number
from memlens.trace.model import Trace

EMBEDDER_VERSION = 1  # bump when the computation changes, so old cache files are not reused
KINDS = ("tfidf", "hashing", "trace", "sentence")


class EmbeddingError(ValueError):
    """Embeddings could not be made (bad trace vectors, missing model, bad settings)."""


@dataclass
class EmbeddingsConfig:
    """The ``embeddings:`` settings block (typed; checked when a command's config is resolved)."""

    kind: str = "tfidf"  # tfidf | hashing (scikit-learn + TruncatedSVD) | trace | sentence
    dim: int = 256  # 256 beat 64 on LoCoMo and tau-bench recall (benchmarks/results/retrieval.md)
    corpus: str | None = None  # fit on this text file (one document per line), not the trace
    model: str | None = None  # kind=sentence: a locally installed sentence-transformers model
    cache: bool = True
    cache_dir: str | None = None  # default $MEMLENS_CACHE/embeddings or ~/.cache/memlens/...

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise EmbeddingError(
                f"embeddings.kind must be one of {', '.join(KINDS)}, got {self.kind!r}"
            )
        try:
            number("embeddings.dim", self.dim, low=1, integer=True)
        except ValueError as exc:
            raise EmbeddingError(str(exc)) from None
        if self.kind == "sentence" and not self.model:
            raise EmbeddingError("embeddings.kind=sentence needs embeddings.model (a local model)")


@dataclass
class Embeddings:
    items: np.ndarray  # float32 [n_items, dim], rows L2-normalised (zero rows for empty text)
    requests: np.ndarray  # float32 [n_requests, dim]
    kind: str
    cache_file: str | None = None

    @property
    def dim(self) -> int:
        return int(self.items.shape[1])


def _normalise(x: np.ndarray) -> np.ndarray:
    x = np.asarray(x, dtype=np.float32)
    norms = np.linalg.norm(x, axis=1, keepdims=True)
    norms[norms == 0] = 1.0
    return (x / norms).astype(np.float32)


CACHE_KIND = "embeddings"  # memlens._util.safecache's kind (and the cache sub-folder)


def _cache_key(trace: Trace, cfg: EmbeddingsConfig, seed: int) -> str:
    """Hash of what changes the vectors: the settings below, the seed, the trace and corpus."""
    parts = {"kind": cfg.kind, "dim": cfg.dim, "seed": seed, "model": cfg.model}
    parts["version"] = EMBEDDER_VERSION
    parts["store"] = safecache.FORMAT  # a new entry format is a new key, not a "corrupt" entry
    parts["trace"] = trace.sha256
    if cfg.corpus:
        parts["corpus"] = hashlib.sha256(Path(cfg.corpus).read_bytes()).hexdigest()
    blob = json.dumps(parts, sort_keys=True).encode()
    return hashlib.sha256(blob).hexdigest()[:32]


def vectors_key(trace: Trace, cfg: EmbeddingsConfig, seed: int) -> str:
    """The key of ``embed_trace(trace, cfg, seed)``'s vectors: equal keys, equal vectors (the
    settings that change them, the seed, the trace's and the corpus's content).  For callers
    that keep the vectors in memory (``generative_agents``' relevance) under the same key."""
    return _cache_key(trace, cfg, seed)


def default_cache_dir() -> Path:
    return cache_dir(CACHE_KIND)


def embed_trace(trace: Trace, cfg: EmbeddingsConfig | None = None, seed: int = 0) -> Embeddings:
    """Vectors for every item and request of ``trace`` (from the cache when possible).

    ``seed``: the run's seed (seeds the TF-IDF/hashing embedders' SVD).
    """
    cfg = EmbeddingsConfig() if cfg is None else cfg
    path = None
    if cfg.cache:
        where = Path(os.path.expanduser(cfg.cache_dir)) if cfg.cache_dir else default_cache_dir()
        path = where / f"{_cache_key(trace, cfg, seed)}.npz"
        cached = safecache.load(path, CACHE_KIND, _decoder(trace, cfg.kind, path))
        if cached is not None:
            return cached
    items, requests = _compute(trace, cfg, seed)
    emb = Embeddings(_normalise(items), _normalise(requests), cfg.kind, str(path) if path else None)
    if path is not None:
        arrays = {"items": emb.items, "requests": emb.requests}
        safecache.store(path, CACHE_KIND, arrays, {"kind": cfg.kind})
    return emb


def _decoder(trace: Trace, kind: str, path: Path):
    """Checks a cached entry against the trace (one row per item and request, float32)."""

    def decode(arrays: dict, meta: dict) -> Embeddings:
        items, requests = arrays["items"], arrays["requests"]
        if meta["kind"] != kind or items.dtype != np.float32 or requests.dtype != np.float32:
            raise ValueError(f"not {kind} float32 vectors")
        if items.ndim != 2 or requests.ndim != 2 or items.shape[1] != requests.shape[1]:
            raise ValueError("the vectors are not two matrices of one width")
        if (len(items), len(requests)) != (trace.n_items, trace.n_requests):
            raise ValueError("the vectors do not match the trace's items and requests")
        return Embeddings(items, requests, kind, str(path))

    return decode


def _compute(trace: Trace, cfg: EmbeddingsConfig, seed: int) -> tuple[np.ndarray, np.ndarray]:
    if cfg.kind == "trace":
        return _trace_vectors(trace)
    texts = list(trace.item_text) + list(trace.req_text)
    if cfg.kind == "sentence":
        vecs = _sentence_vectors(texts, cfg.model)
    else:
        vecs = _sklearn_vectors(texts, cfg, seed)
    return vecs[: trace.n_items], vecs[trace.n_items :]


def _sklearn_vectors(texts: list[str], cfg: EmbeddingsConfig, seed: int) -> np.ndarray:
    fit_docs = texts
    if cfg.corpus:
        fit_docs = Path(cfg.corpus).read_text(encoding="utf-8").splitlines()
    fitted = _fit_sklearn(fit_docs, cfg, seed)
    if fitted is None:  # no words at all: every vector is zero
        return np.zeros((len(texts), 1), dtype=np.float32)
    sparse, fit_x, project = fitted
    return project(fit_x if fit_docs is texts else sparse.transform(texts))


def _fit_sklearn(fit_docs: list[str], cfg: EmbeddingsConfig, seed: int):
    """The TF-IDF (or hashing) weights and the reduction fitted on ``fit_docs``:
    ``(sparse, fit_x, project)`` where ``project(sparse.transform(texts))`` gives the texts'
    vectors; None when the documents have no words.  Each text's vector depends on that text
    alone (sparse rows, then a product per row)."""
    from sklearn.decomposition import TruncatedSVD
    from sklearn.feature_extraction.text import HashingVectorizer, TfidfTransformer, TfidfVectorizer
    from sklearn.pipeline import make_pipeline

    # Single characters and '#' carry little; words and numbers (identifiers) are what a request
    # shares with the item it needs.
    pattern = r"(?u)\b\w\w+\b"
    if cfg.kind == "hashing":
        sparse = make_pipeline(
            HashingVectorizer(
                n_features=2**18, alternate_sign=False, token_pattern=pattern, norm=None
            ),
            TfidfTransformer(sublinear_tf=True),
        )
    else:
        sparse = TfidfVectorizer(token_pattern=pattern, sublinear_tf=True)
    try:
        fit_x = sparse.fit_transform(fit_docs)
    except ValueError:  # no words at all
        return None
    # the SVD's rank is bounded by the vocabulary and the number of fitted documents
    n_features = int(np.count_nonzero(np.asarray(fit_x.sum(axis=0)).ravel()))
    k = min(cfg.dim, n_features - 1, fit_x.shape[0] - 1)
    if k < 1 or cfg.kind == "tfidf" and n_features <= cfg.dim:
        # the vocabulary is already small: keep the exact TF-IDF space, no reduction needed
        cols = np.flatnonzero(np.asarray(fit_x.sum(axis=0)).ravel())
        return sparse, fit_x, lambda x: np.asarray(x[:, cols].todense(), dtype=np.float32)
    svd = TruncatedSVD(n_components=k, random_state=seed, algorithm="randomized", n_iter=7)
    svd.fit(fit_x)
    return sparse, fit_x, lambda x: svd.transform(x).astype(np.float32)


def corpus_embedder(cfg: EmbeddingsConfig, seed: int):
    """``embed(texts) -> float32 [len(texts), dim]``, normalised rows: the vectors
    :func:`embed_trace` gives those texts in any trace, for an embedder fitted on
    ``cfg.corpus`` (tfidf or hashing), fitted once (the live manager's incremental
    retrieval embeds what a session writes as it comes)."""
    if cfg.kind not in ("tfidf", "hashing") or not cfg.corpus:
        raise EmbeddingError("corpus_embedder: needs kind tfidf or hashing with a corpus")
    fit_docs = Path(cfg.corpus).read_text(encoding="utf-8").splitlines()
    fitted = _fit_sklearn(fit_docs, cfg, seed)
    if fitted is None:
        return lambda texts: np.zeros((len(texts), 1), dtype=np.float32)
    sparse, _, project = fitted

    def embed(texts) -> np.ndarray:
        import sklearn

        # the same computation without scikit-learn's per-call checks of settings and input
        # (most of a call on a few texts); neither changes a number
        with sklearn.config_context(assume_finite=True, skip_parameter_validation=True):
            return _normalise(project(sparse.transform(list(texts))))

    return embed


def _vector_of(trace: Trace, meta: dict, line: int, what: str, dim: int | None) -> np.ndarray:
    v = meta.get("embedding")
    if v is None:
        raise EmbeddingError(
            f'{trace.source}:{line}: field "meta.embedding" missing on {what} '
            "(embeddings.kind=trace needs a vector on every write and request)"
        )
    try:
        arr = np.asarray(v, dtype=np.float64)
    except (TypeError, ValueError):
        arr = None
    if arr is None or arr.ndim != 1 or arr.size == 0 or not np.all(np.isfinite(arr)):
        raise EmbeddingError(
            f'{trace.source}:{line}: field "meta.embedding" of {what} must be a non-empty list '
            "of finite numbers"
        )
    if dim is not None and arr.size != dim:
        raise EmbeddingError(
            f'{trace.source}:{line}: field "meta.embedding" of {what} has {arr.size} numbers, '
            f"expected {dim} like the first vector"
        )
    return arr


def _trace_vectors(trace: Trace) -> tuple[np.ndarray, np.ndarray]:
    items: list[np.ndarray] = []
    dim = None
    for i, meta in enumerate(trace.item_meta):
        line = int(trace.ev_line[trace.item_event[i]])
        v = _vector_of(trace, meta, line, f'write "{trace.item_id[i]}"', dim)
        dim = v.size
        items.append(v)
    reqs = []
    for r, meta in enumerate(trace.req_meta):
        line = int(trace.ev_line[trace.req_event[r]])
        v = _vector_of(trace, meta, line, f'request "{trace.req_id[r]}"', dim)
        dim = v.size
        reqs.append(v)
    dim = dim or 1
    return (
        np.asarray(items, dtype=np.float32).reshape(-1, dim),
        np.asarray(reqs, dtype=np.float32).reshape(-1, dim),
    )


def _sentence_vectors(texts: list[str], model: str | None) -> np.ndarray:
    if not model:
        raise EmbeddingError("embeddings.kind=sentence needs embeddings.model (a local model)")
    # never download: a model that is not on this machine must fail, not be fetched
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    try:
        from sentence_transformers import SentenceTransformer
    except ImportError:
        raise EmbeddingError(
            "embeddings.kind=sentence needs the sentence-transformers package, which is not "
            "installed; use kind=tfidf"
        ) from None
    try:
        st = SentenceTransformer(str(model), device="cpu")
    except Exception as exc:  # noqa: BLE001 - any loader failure means "not available offline"
        raise EmbeddingError(f"sentence model {model!r} is not available locally: {exc}") from None
    return np.asarray(st.encode(texts, batch_size=64, show_progress_bar=False), dtype=np.float32)
