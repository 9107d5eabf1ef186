"""The ``fusion`` derivation method: lexical and semantic scores fused, the answer's values
traced one by one, and an echo traced back to the turn that introduced what it repeats.

Each rule is a general property of a log, not of one dataset:

* **Fusion.**  BM25 (:mod:`bm25_needs`) and the cosine of the log's own TF-IDF embedding each
  scaled by their best score among the candidates, then added, the cosine weighted by
  ``fusion_embedding_weight`` (normalised-score fusion): lexical matching finds the rare shared
  word, the embedding ranks the many items that share only common ones.
* **The answer weighs more.**  When a step records its answer (the turn that used the memory),
  its words count ``fusion_answer_weight`` times the question's: the answer carries the value
  that was needed, the question mostly names the topic.
* **One source per value.**  An answer listing several values (``pottery, camping and
  painting``) usually took each from a different item: each part is scored on its own (with
  the question) and its best item is added when it scores at least ``fusion_part_ratio`` of
  the whole step's best.
* **Adaptive cut.**  The best item, and up to ``fusion_top_k`` whose fused score is at least
  ``fusion_ratio`` of the best (a cut relative to the top score, not a fixed count).
* **Echoes.**  A chosen item whose matched words all occur in one of the ``fusion_echo_window``
  items just before it (a reply echoing the turn it answers: "Wow, extreme sports!") repeats
  what that item introduced: the need is the earlier item.

Every knob is set by :mod:`calibrate_needs` on labelled data for a target precision.
"""

from __future__ import annotations

import functools
import re

import numpy as np

_PART_SPLIT = re.compile(r"[,;\n]|\band\b|\bor\b", re.IGNORECASE)


def answer_parts(answer: str) -> list[str]:
    """The values an answer lists (split at commas, semicolons, new lines, ``and``, ``or``):
    one part when it lists nothing, none when it is blank."""
    return [p.strip() for p in _PART_SPLIT.split(answer or "") if p.strip()]


def scaled(scores: np.ndarray) -> np.ndarray:
    """``scores`` divided by their best (zeros when nothing scores above 0); negatives are 0."""
    s = np.maximum(np.asarray(scores, dtype=np.float64), 0.0)
    best = s.max() if len(s) else 0.0
    return s / best if best > 0 else np.zeros_like(s)


def fuse(
    lexical: np.ndarray, semantic: np.ndarray, weight: float, scale: float = 0.0
) -> np.ndarray:
    """Normalised-score fusion: ``lexical / scale + weight * semantic / max(semantic)``, with
    ``scale`` the lexical best (0: this vector's own best).  A part of the answer is scaled by
    the whole step's best, so that a part matching weakly stays below the whole."""
    lex = np.maximum(np.asarray(lexical, dtype=np.float64), 0.0)
    top = scale if scale > 0 else (lex.max() if len(lex) else 0.0)
    lex = lex / top if top > 0 else np.zeros_like(lex)
    return lex + weight * scaled(semantic) if weight else lex


def echo_source(pos: int, matched: set[str], words_at, window: int) -> int:
    """The position a chosen item's need moves to: the nearest of the ``window`` items just
    before ``pos`` whose words (``words_at(position)``) hold every one of its ``matched`` words
    (it introduced them), else ``pos`` itself."""
    if not matched:
        return pos
    for back in range(1, window + 1):
        if pos - back >= 0 and matched <= words_at(pos - back):
            return pos - back
    return pos


def top_positions(scores: np.ndarray, top_k: int, ratio: float) -> list[int]:
    """The best position, and up to ``top_k`` in all scoring at least ``ratio`` of the best
    (positive scores only; ties go to the later position, the nearer item)."""
    if not len(scores) or scores.max() <= 0:
        return []
    order = np.lexsort((-np.arange(len(scores)), -scores))[:top_k]
    best = float(scores[order[0]])
    return [int(i) for i in order if scores[i] > 0 and scores[i] >= ratio * best]


def fusion_positions(question: np.ndarray, answer: np.ndarray, parts: list[np.ndarray],
                     semantic: np.ndarray, s) -> list[int]:  # fmt: skip
    """Positions (among the candidates) the ``fusion`` method picks before echoes are traced:
    ``question``/``answer``/``parts`` are BM25 scores of the step's question, its answer and
    each part of the answer, ``semantic`` the cosine of the whole step; ``s`` the settings."""
    w = s.fusion_answer_weight
    lexical = question + w * answer
    top = float(np.maximum(lexical, 0).max()) if len(lexical) else 0.0
    if top <= 0:
        return []
    whole = fuse(lexical, semantic, s.fusion_embedding_weight)
    chosen = top_positions(whole, s.fusion_top_k, s.fusion_ratio)
    best = float(whole.max())
    for part in parts if len(parts) > 1 else []:
        scored = fuse(question + w * part, semantic, s.fusion_embedding_weight, scale=top)
        i = int(np.argmax(scored))
        if scored[i] > 0 and scored[i] >= s.fusion_part_ratio * best and i not in chosen:
            chosen.append(i)
    return chosen


@functools.lru_cache(maxsize=1 << 16)
def word_set(text: str, stem: bool) -> frozenset[str]:
    """The matching words of ``text`` as BM25 sees them (cached: every step of a log looks at
    the same earlier texts again)."""
    from .bm25_needs import words

    return frozenset(words(text, stem))


def fusion_needs(index, cosine: np.ndarray, step, earlier, rows: list[int], s) -> list[str]:
    """The ``fusion`` method's needs of ``step`` among ``earlier`` (rows ``rows`` of the log's
    BM25 ``index`` and of ``cosine``, the step's cosine with every item of the log)."""
    cand = [(e, r) for e, r in zip(earlier, rows, strict=True) if not e.pinned]
    if not cand:
        return []
    at = [r for _, r in cand]

    def lexical(text: str) -> np.ndarray:
        got = index.scores(text) if text else np.zeros(0)
        return got[at] if len(got) else np.zeros(len(at))

    question = step.question if step.answer else step.text
    parts = [lexical(p) for p in answer_parts(step.answer)]
    picked = fusion_positions(lexical(question), lexical(step.answer), parts, cosine[at], s)
    asked = word_set(step.text, s.bm25_stem)

    def words_at(k: int) -> frozenset[str]:
        return word_set(cand[k][0].text, s.bm25_stem)

    moved = [echo_source(i, asked & words_at(i), words_at, s.fusion_echo_window) for i in picked]
    return [cand[i][0].id for i in dict.fromkeys(moved)]
