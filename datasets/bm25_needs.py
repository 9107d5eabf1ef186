"""The ``bm25`` derivation method: Okapi BM25 of a step against the earlier items of its log.

BM25 is the lexical baseline that needs no tuning to a dataset: its weights (document
frequencies, lengths) come from the log itself.  The scoring is the ``bm25s`` library's (the
Lucene variant, sparse matrices, maintained; ``rank-bm25`` has had no release since 2022);
words are the needs module's terms (stopwords out), stemmed by PyStemmer's English Snowball
stemmer when ``bm25_stem`` is on.  One index holds every item text of the log; a step's scores
are read at the rows of the items written before it in its stream.
"""

from __future__ import annotations

import functools

import numpy as np

from .text_terms import _STOPWORDS, _TERM


@functools.lru_cache(maxsize=1)
def _stemmer():
    import Stemmer

    return Stemmer.Stemmer("english")


def words(text: str, stem: bool) -> list[str]:
    """The matching words of ``text``: its terms (in order, repeats kept), stemmed if asked."""
    out = [t for t in (w.lower() for w in _TERM.findall(text)) if t not in _STOPWORDS]
    return _stemmer().stemWords(out) if stem and out else out


class BM25Index:
    """BM25 over ``texts`` (every item of a log), queried one step at a time; each query's
    scores are kept, because calibration asks the same log the same queries at every grid
    point (:func:`shared_index` keeps the index itself)."""

    def __init__(self, texts: list[str], stem: bool, k1: float = 1.5, b: float = 0.75):
        import bm25s

        self.stem = stem
        self.memo: dict[str, np.ndarray] = {}
        self.model = bm25s.BM25(k1=k1, b=b)
        docs = [words(t, stem) for t in texts]
        self.empty = not any(docs)
        if not self.empty:
            self.model.index(docs, show_progress=False)

    def scores(self, query: str) -> np.ndarray:
        """The BM25 score of ``query`` against every text (empty when nothing can match)."""
        if query not in self.memo:
            self.memo[query] = self._scores(query)
        return self.memo[query]

    def _scores(self, query: str) -> np.ndarray:
        q = words(query, self.stem)
        if self.empty or not q:
            return np.zeros(0)
        vocab = self.model.vocab_dict
        q = [w for w in q if w in vocab]
        return self.model.get_scores(q) if q else np.zeros(0)


@functools.lru_cache(maxsize=4)
def shared_index(texts: tuple[str, ...], stem: bool, k1: float = 1.5, b: float = 0.75) -> BM25Index:
    """One index per log, stemming and BM25 parameters (a pure function of them: safe to
    share); ``k1`` (term-frequency saturation) and ``b`` (length normalisation) at the
    library's defaults unless ``fusion`` sets them."""
    return BM25Index(list(texts), stem, k1, b)


def pick_best(scores: np.ndarray, ids: list[str], top_k: int, ratio: float) -> list[str]:
    """The best-scoring id, and up to ``top_k`` in all whose score is at least ``ratio`` of
    the best (positive scores only; ties go to the later item, the nearer one)."""
    if not len(scores) or scores.max() <= 0:
        return []
    order = sorted(range(len(ids)), key=lambda i: (-float(scores[i]), -i))
    best = float(scores[order[0]])
    return [ids[i] for i in order[:top_k] if scores[i] > 0 and scores[i] >= ratio * best]


def bm25_needs(index: BM25Index, query: str, earlier, rows: list[int], top_k: int,
               ratio: float) -> list[str]:  # fmt: skip
    """The ``bm25`` method's needs of one step among ``earlier`` (rows ``rows`` of the index)."""
    all_scores = index.scores(query)
    if not len(all_scores):
        return []
    keep = [(e.id, r) for e, r in zip(earlier, rows, strict=True) if not e.pinned]
    if not keep:
        return []
    scores = all_scores[[r for _, r in keep]]
    return pick_best(scores, [i for i, _ in keep], top_k, ratio)
