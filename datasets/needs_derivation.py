"""Which earlier items an agent's step used, derived from a log nobody annotated.

A real agent log says what the agent wrote and which tools it called, never which earlier
messages it relied on; yet a trace's ``needs`` decide every hit rate.  Each way of guessing them
is a named method, recorded in the trace header, so that a verdict can be checked against
another method (``memlens compare`` over several derivations reports whether it holds) and each
method can be measured against human evidence (``experiments/derivation.py`` on LoCoMo):

``args``       every scalar value in the step's tool-call arguments, traced to the earlier items
               that contain it as a whole token (case-insensitive); a string that is no earlier
               item's token is read as a command or code (:mod:`arg_values`: shell, Python,
               SQL, ``file:line``) and each of its parts is traced.  The item that *introduced*
               a value (the first holding it) is its source; with ``pick=alternatives``
               (default) the later items repeating it are alternatives (trace format 1.1: the
               need is met when any one is resident); ``first`` picks the introducer, ``last``
               the latest holder that is not an assistant repeat.  A pinned item (the system
               prompt) is the source only when nothing else holds it.
``overlap``    the step's salient terms (identifiers, numbers, capitalised names, rare words)
               found in earlier items; an item sharing at least ``overlap_min_terms`` of them is
               a need, the ``overlap_top_k`` best by summed inverse document frequency.
``embedding``  the offline TF-IDF/SVD embedder of ``memlens.retrieval.embeddings``: earlier items whose
               cosine similarity to the step is at least ``embedding_threshold``, the
               ``embedding_top_k`` most similar.
``bm25``       Okapi BM25 (the ``bm25s`` library; weights from the log itself, words stemmed by
               PyStemmer) of the step's text against every earlier item: the best item, and
               up to ``bm25_top_k`` whose score is at least ``bm25_ratio`` of the best.  The
               step's text is the whole turn, its answer included (a request's ``meta.answer``
               when its trace records one).
``fusion``     BM25 and the embedding's cosine fused (each scaled by its best), the step's
               answer weighing more than its question, each value an answer lists traced on
               its own, a cut relative to the top score, and a reply that only echoes the
               turn before it traced back to that turn (:mod:`fusion_needs`).
``union``      every need any of ``args``, ``overlap``, ``embedding`` and ``bm25`` derives.

``overlap``, ``embedding``, ``bm25`` and ``fusion`` never name a pinned item (it is resident whatever the
policy).  Provenance: an item they name that an *assistant* wrote and that shares with the step
only values an earlier item introduced is never the sole source: the need becomes the group of
the introducer of the most specific shared value and the repeat.  Each need's values (argument
values, or the shared terms) are kept in :attr:`ArgsResult.sources` for the request's ``meta``.
Everything here is a pure function of the log and the settings: same input, same needs.
"""

from __future__ import annotations

import functools
import math
import re
from collections import Counter
from dataclasses import asdict, dataclass, field

import numpy as np

from .text_terms import _STOPWORDS, _TERM

METHODS = ("args", "overlap", "embedding", "bm25", "fusion", "union")
PICKS = ("alternatives", "first", "last")
Need = str | list[str]  # an item id, or a group of alternative ids (any one meets the need)


def _setting(default, meaning: str):
    return field(default=default, metadata={"help": meaning})


@dataclass
class NeedsSettings:
    """How needs are derived (recorded verbatim in the trace header under ``needs``).

    ``fusion``'s defaults are what its calibration (``calibrate_needs``, target precision 0.6)
    chose on all ten LoCoMo conversations; ``experiments/needs_scores.py`` scores it calibrated
    on one half and tested on the other, the figure that counts."""

    method: str = _setting(
        "args", "args | overlap | embedding | bm25 | fusion | union (all but fusion)"
    )
    pick: str = _setting(
        "alternatives", "args: a value several items hold -> alternatives | first | last"
    )
    overlap_min_terms: int = _setting(1, "overlap: salient terms an item must share")
    overlap_top_k: int = _setting(3, "overlap: at most this many items, best IDF score first")
    rare_share: float = _setting(0.01, "overlap: a word in at most this share of items is rare")
    embedding_threshold: float = _setting(0.3, "embedding: least cosine similarity")
    embedding_top_k: int = _setting(3, "embedding: at most this many items, most similar first")
    embedding_dim: int = _setting(0, "embedding: 0 = exact TF-IDF, else SVD dimensions")
    bm25_top_k: int = _setting(2, "bm25: at most this many items, best score first")
    bm25_ratio: float = _setting(0.8, "bm25: least score, as a share of the best item's")
    bm25_stem: bool = _setting(True, "bm25, fusion: stem words (PyStemmer, English) first")
    fusion_answer_weight: float = _setting(4.0, "fusion: the answer's words count this many times")
    fusion_embedding_weight: float = _setting(
        0.25, "fusion: weight of the scaled cosine beside the scaled BM25 score"
    )
    fusion_part_ratio: float = _setting(
        0.2, "fusion: a listed value's best item kept from this share of the best"
    )
    fusion_top_k: int = _setting(3, "fusion: at most this many items for the whole step")
    fusion_ratio: float = _setting(0.9, "fusion: least fused score, as a share of the best")
    fusion_echo_window: int = _setting(
        3, "fusion: an echo of one of this many items just before it is traced back to it"
    )
    fusion_bm25_k1: float = _setting(0.9, "fusion: BM25 term-frequency saturation k1")
    fusion_bm25_b: float = _setting(0.2, "fusion: BM25 length normalisation b (0: none)")
    commands: bool = _setting(
        True,
        "args: split commands/code no item holds whole into traced parts (false: whole "
        "values, no meta.provenance, as the shipped tau-bench trace)",
    )
    answer: bool = _setting(True, "data derive: a request's meta.answer is part of its text")
    item_dates: bool = _setting(True, "data derive: an item's date (from POSIX-second t) counts")
    calibration: str | None = _setting(None, "where the thresholds were calibrated (recorded)")

    def __post_init__(self) -> None:
        if self.method not in METHODS:
            raise ValueError(
                f"needs.method must be one of {', '.join(METHODS)}, got {self.method!r}"
            )
        if self.pick not in PICKS:
            raise ValueError(f"needs.pick must be one of {', '.join(PICKS)}, got {self.pick!r}")
        for name in (
            "overlap_min_terms",
            "overlap_top_k",
            "embedding_top_k",
            "embedding_dim",
            "bm25_top_k",
            "fusion_top_k",
            "fusion_echo_window",
        ):
            low = 0 if name in ("embedding_dim", "fusion_echo_window") else 1
            if getattr(self, name) < low:
                raise ValueError(f"needs.{name} must be at least {low}, got {getattr(self, name)}")
        for name in ("bm25_ratio", "fusion_ratio", "fusion_part_ratio"):
            if not 0 < getattr(self, name) <= 1:
                raise ValueError(f"needs.{name} must be in (0, 1], got {getattr(self, name)}")
        if not 0 <= self.fusion_bm25_b <= 1:
            raise ValueError(f"needs.fusion_bm25_b must be in [0, 1], got {self.fusion_bm25_b}")
        for name in ("fusion_answer_weight", "fusion_embedding_weight", "fusion_bm25_k1"):
            if not 0 <= getattr(self, name) <= 100:
                raise ValueError(f"needs.{name} must be in [0, 100], got {getattr(self, name)}")
        if not 0 < self.rare_share <= 1:
            raise ValueError(f"needs.rare_share must be in (0, 1], got {self.rare_share}")
        if not -1 <= self.embedding_threshold <= 1:
            raise ValueError(
                f"needs.embedding_threshold must be in [-1, 1], got {self.embedding_threshold}"
            )

    def describe(self) -> dict:
        """The header's ``needs`` block: the method, the settings it uses, and a label."""
        used = {"args": ("pick", "commands"), "overlap": ("overlap_", "rare_share"),
                "embedding": ("embedding_",), "bm25": ("bm25_",),
                "fusion": ("fusion_", "bm25_stem", "embedding_dim")}  # fmt: skip
        union = [m for m in used if m != "fusion"]
        prefixes = sum((used[m] for m in (union if self.method == "union" else [self.method])), ())
        settings = {k: v for k, v in asdict(self).items() if k.startswith(prefixes)}
        if not self.commands:  # a header without it: whole values, as before
            settings.pop("commands", None)
        if self.calibration is not None:
            settings["calibration"] = self.calibration
        return {"method": self.method, **settings, "evidence": "derived"}


@dataclass
class Earlier:
    """An item written before the step: its id, text, whether it is pinned, and whether an
    assistant wrote it (its text or a tool call: it may only repeat what others introduced)."""

    id: str
    text: str
    pinned: bool = False
    assistant: bool = False


@dataclass
class Step:
    """A step whose needs are derived: its text (its vector's row ``row``) and tool arguments;
    when its text is a question and its recorded answer, both apart (``fusion`` weighs them)."""

    text: str
    arguments: list
    row: int = -1
    question: str = ""
    answer: str = ""


# ------------------------------------------------------------------------------- args
def argument_values(args) -> list[tuple[str, str]]:
    """Scalar leaves of a tool call's arguments as ``(argument path, value string)``.

    Numbers are written as a person would (``30.0`` -> ``30``); booleans, nulls and blank
    strings are skipped because no message is their source.
    """
    out: list[tuple[str, str]] = []

    def walk(value, key: str) -> None:
        if isinstance(value, dict):
            for k, v in value.items():
                walk(v, f"{key}.{k}" if key else str(k))
        elif isinstance(value, list):
            for v in value:
                walk(v, f"{key}[]")
        elif isinstance(value, bool) or value is None:
            return
        elif isinstance(value, int):
            out.append((key, str(value)))
        elif isinstance(value, float):
            out.append((key, str(int(value)) if value.is_integer() else repr(value)))
        elif isinstance(value, str) and value.strip():
            out.append((key, value.strip()))

    walk(args, "")
    return out


def token_pattern(value: str) -> re.Pattern:
    """Whole-token, case-insensitive matcher: ``value`` not flanked by letters, digits or ``_``."""
    return re.compile(r"(?<![0-9A-Za-z_])" + re.escape(value.lower()) + r"(?![0-9A-Za-z_])")


@dataclass
class ArgsResult:
    """A step's needs, counts of the argument values traced, and each need's values."""

    needs: list[Need]
    values: int = 0
    found: int = 0
    system_only: int = 0
    unmatched: list[str] | None = None
    sources: list[dict] = field(default_factory=list)  # {"values": [...], "need": need}


def holders(value: str, earlier: list[Earlier]) -> tuple[list[int], bool]:
    """Positions of the earlier items holding ``value`` as a whole token, oldest first, and
    whether they are pinned ones (only when no other item holds it).  A path no item holds
    whole is looked up by its file name (a listing shows ``x.py``, the call says ``src/x.py``)."""
    for v in (value, value.rstrip("/").rsplit("/", 1)[-1] if "/" in value.rstrip("/") else None):
        if not v:
            continue
        pat = token_pattern(v)
        hits = [k for k, e in enumerate(earlier) if pat.search(e.text.lower())]
        free = [k for k in hits if not earlier[k].pinned]
        if free or hits:
            return (free, False) if free else (hits, True)
    return [], False


def provenance(hits: list[int], earlier: list[Earlier], pick: str) -> Need:
    """The need a value's holders make: the introducer (the first holder) is the source, later
    holders are alternatives; ``last`` takes the latest holder that is not an assistant's
    repeat (an assistant is never the sole source of a value someone else introduced)."""
    ids = [earlier[k].id for k in hits]
    if pick == "first" or len(hits) == 1:
        return ids[0]
    if pick == "last":
        own = [k for k in hits[1:] if not earlier[k].assistant]
        return earlier[own[-1]].id if own else ids[0]
    return ids


def traced_values(args) -> list[tuple[str, str]]:
    """``(argument path, value)`` of every value of a call: whole scalars, and the parts of a
    string that reads as a command or code (:func:`arg_values.pieces`)."""
    from .arg_values import pieces

    out = []
    for arg, value in argument_values(args):
        kind, parts = pieces(value) if isinstance(value, str) else ("value", [value])
        out += [(arg, value)] if kind == "value" else [(f"{arg}:{kind}", p) for p in parts]
    return out


def args_needs(arguments: list, earlier: list[Earlier], pick: str,
               commands: bool = True) -> ArgsResult:  # fmt: skip
    """The ``args`` method: each argument value's source item(s) among ``earlier``.  A string
    some item holds whole is one value; otherwise its parts are (:func:`traced_values`)."""
    res = ArgsResult(needs=[], unmatched=[])
    for args in arguments:
        for arg, value in argument_values(args):
            hits, pinned = holders(value, earlier)
            whole = hits or not commands
            todo = [(arg, value)] if whole else traced_values({arg: value}) or [(arg, value)]
            for a, v in todo:
                res.values += 1
                hits, pinned = (hits, pinned) if v == value else holders(v, earlier)
                if not hits:
                    res.unmatched.append(a)
                    continue
                res.system_only += pinned
                res.found += not pinned
                need = provenance(hits, earlier, pick)
                res.needs.append(need)
                res.sources.append({"values": [v], "need": need})
    res.needs = simplify(res.needs)
    return res


def simplify(needs: list[Need]) -> list[Need]:
    """Distinct needs in first-seen order; a group met whenever another need is met (it holds
    a single need, or every member of a smaller group) is dropped, a group of one is its id."""
    sets = []
    for n in needs:
        s = frozenset([n]) if isinstance(n, str) else frozenset(n)
        if s not in [x for x, _ in sets]:
            sets.append((s, n))
    out: list[Need] = []
    for s, n in sets:
        if any(other < s for other, _ in sets):
            continue
        out.append(next(iter(s)) if len(s) == 1 else list(n) if isinstance(n, list) else n)
    return out


# ---------------------------------------------------------------------------- overlap
@functools.lru_cache(maxsize=1 << 16)
def terms(text: str) -> frozenset[str]:
    """The lowercased word, number and identifier tokens of ``text`` (stopwords left out;
    cached: every later step of a log looks at the same earlier texts again)."""
    return frozenset(t.lower() for t in _TERM.findall(text)) - _STOPWORDS


def _is_path(t: str) -> bool:
    """``parse.py``, ``a/b``: a dot or slash between letters (not a decimal number)."""
    return any(c in t for c in "./") and any(c.isalpha() for c in t)


def salient_terms(text: str, df: Counter, n_docs: int, rare_share: float) -> set[str]:
    """The terms of a step that point at a source: identifiers (letters with digits or ``_``),
    numbers of two or more digits, capitalised names, and words in at most ``rare_share`` of
    the documents (or in just one)."""
    out = set()
    for raw in _TERM.findall(text):
        t = raw.lower()
        if t in _STOPWORDS:
            continue
        has_digit = any(c.isdigit() for c in t)
        ident = has_digit and any(c.isalpha() for c in t) or "_" in t or _is_path(t)
        number = t.isdigit() and len(t) >= 2
        name = raw[0].isupper() and len(raw) > 1 and t.isalpha()
        rare = len(t) >= 3 and df.get(t, 0) <= max(1.0, rare_share * n_docs)
        if ident or number or name or rare:
            out.add(t)
    return out


@dataclass
class Vocabulary:
    """Document frequencies of terms over every item text of the log (for rarity and IDF)."""

    df: Counter
    n_docs: int

    @classmethod
    def of(cls, texts: list[str]) -> Vocabulary:
        df: Counter = Counter()
        for text in texts:
            df.update(terms(text))
        return cls(df, max(1, len(texts)))

    def idf(self, term: str) -> float:
        return math.log((1 + self.n_docs) / (1 + self.df.get(term, 0))) + 1.0


def overlap_needs(
    text: str, earlier: list[Earlier], vocab: Vocabulary, s: NeedsSettings
) -> list[str]:
    """The ``overlap`` method: earlier items sharing salient terms with ``text``."""
    wanted = salient_terms(text, vocab.df, vocab.n_docs, s.rare_share)
    if not wanted:
        return []
    scored = []
    for pos, e in enumerate(earlier):
        if e.pinned:
            continue
        shared = wanted & terms(e.text)
        if len(shared) >= s.overlap_min_terms:
            scored.append((-sum(vocab.idf(t) for t in sorted(shared)), -pos, e.id))
    scored.sort()
    return [ident for _, _, ident in scored[: s.overlap_top_k]]


# -------------------------------------------------------------------------- embedding
def embed_texts(texts: list[str], dim: int):
    """L2-normalised vectors of ``texts``: with ``dim`` 0 the exact (sparse) TF-IDF space of
    the offline embedder of ``memlens.retrieval.embeddings`` (same tokens, sublinear term frequency),
    otherwise that embedder's TF-IDF/SVD reduction to ``dim`` dimensions (seed 0)."""
    if dim == 0:
        from sklearn.feature_extraction.text import TfidfVectorizer

        try:
            return TfidfVectorizer(token_pattern=r"(?u)\b\w\w+\b", sublinear_tf=True).fit_transform(
                texts
            )
        except ValueError:  # no words at all
            return np.zeros((len(texts), 1), dtype=np.float32)
    from memlens.retrieval.embeddings import EmbeddingsConfig, _normalise, _sklearn_vectors

    return _normalise(_sklearn_vectors(texts, EmbeddingsConfig(kind="tfidf", dim=dim), 0))


def cosines(step_vec, vecs, rows: list[int]) -> np.ndarray:
    """Cosine of the step's (normalised) vector with rows ``rows`` of ``vecs``, dense."""
    sims = vecs[rows] @ step_vec.T
    return np.asarray(sims.todense() if hasattr(sims, "todense") else sims).ravel()


class Embedded:
    """A log's embedding (``vecs``: items, then steps) and each step's cosine with every item,
    kept once computed (calibration derives the same log at every grid point)."""

    def __init__(self, texts: list[str], dim: int, n_items: int):
        self.vecs, self.n_items, self.memo = embed_texts(texts, dim), n_items, {}

    def step_cosines(self, row: int) -> np.ndarray:
        if row not in self.memo:
            step = self.vecs[self.n_items + row : self.n_items + row + 1]
            self.memo[row] = cosines(step, self.vecs, list(range(self.n_items)))
        return self.memo[row]


@functools.lru_cache(maxsize=2)
def shared_embedding(texts: tuple[str, ...], dim: int, n_items: int) -> Embedded:
    """One :class:`Embedded` per log and dimension (a pure function of both: safe to share)."""
    return Embedded(list(texts), dim, n_items)


def embedding_needs(
    step_vec: np.ndarray, earlier: list[Earlier], rows: list[int], vecs: np.ndarray,
    s: NeedsSettings,
) -> list[str]:  # fmt: skip
    """The ``embedding`` method: the most similar earlier items above the threshold."""
    cand = [(e.id, r) for e, r in zip(earlier, rows, strict=True) if not e.pinned]
    if not cand:
        return []
    sims = cosines(step_vec, vecs, [r for _, r in cand])
    order = sorted(range(len(cand)), key=lambda i: (-float(sims[i]), -i))
    keep = [i for i in order if sims[i] >= s.embedding_threshold][: s.embedding_top_k]
    return [cand[i][0] for i in keep]


# ------------------------------------------------------------------------- provenance
def attribute(need: str, step_terms: frozenset[str], earlier: list[Earlier],
              vocab: Vocabulary) -> tuple[Need, list[str]]:  # fmt: skip
    """A lexical method's need, made a group when it is an assistant's repeat: ``(need, the
    values it shares with the step)``; ``step_terms`` are the step's values (salient terms:
    identifiers, paths, numbers, names, rare words).  An assistant item whose shared values were all
    introduced by earlier items is never the sole source: the need becomes the group of the
    introducer of its most specific (highest IDF) shared value and the item itself."""
    pos = next(k for k, e in enumerate(earlier) if e.id == need)
    shared = sorted(step_terms & terms(earlier[pos].text), key=lambda t: (-vocab.idf(t), t))
    if not earlier[pos].assistant or not shared:
        return need, shared[:8]
    intro = {}
    for t in shared:
        intro[t] = next(k for k, e in enumerate(earlier[: pos + 1]) if t in terms(e.text))
    if any(k == pos for k in intro.values()):  # it introduced a value itself
        return need, shared[:8]
    first = intro[shared[0]]
    return [earlier[first].id, need], shared[:8]


# ------------------------------------------------------------------------------ all
class Deriver:
    """Derives the needs of every step of one log with one :class:`NeedsSettings`.

    Built once over every text of the log (``item_texts`` and ``step_texts``), because rarity,
    the embedding and BM25's weights are properties of the whole log, not of one step."""

    def __init__(self, settings: NeedsSettings, item_texts: list[str], step_texts: list[str]):
        self.settings = settings
        self.vocab = Vocabulary.of(item_texts)
        self.vecs = self.bm25 = self.embedded = None
        if settings.method in ("embedding", "fusion", "union"):
            self.embedded = shared_embedding((*item_texts, *step_texts), settings.embedding_dim,
                                             len(item_texts))  # fmt: skip
            self.vecs = self.embedded.vecs
        if settings.method in ("bm25", "fusion", "union"):
            from .bm25_needs import shared_index

            fusion = settings.method == "fusion"
            self.bm25 = shared_index(tuple(item_texts), settings.bm25_stem,
                                     *((settings.fusion_bm25_k1, settings.fusion_bm25_b)
                                       if fusion else ()))  # fmt: skip
        self.n_items = len(item_texts)

    def derive(self, step: Step, earlier: list[Earlier], rows: list[int]) -> ArgsResult:
        """Needs of ``step`` among ``earlier`` (whose texts are rows ``rows`` of the log's item
        texts); with ``args`` counts of the argument values found; each need's values in
        ``sources``."""
        s, method = self.settings, self.settings.method
        res = ArgsResult(needs=[])
        if method in ("args", "union"):
            res = args_needs(step.arguments, earlier, s.pick, s.commands)
        found: list[str] = []
        if method in ("overlap", "union"):
            found += overlap_needs(step.text, earlier, self.vocab, s)
        if method in ("embedding", "union"):
            vec = self.vecs[self.n_items + step.row : self.n_items + step.row + 1]
            found += embedding_needs(vec, earlier, rows, self.vecs, s)
        if method in ("bm25", "union"):
            from .bm25_needs import bm25_needs

            found += bm25_needs(self.bm25, step.text, earlier, rows, s.bm25_top_k, s.bm25_ratio)
        if method == "fusion":
            from .fusion_needs import fusion_needs

            cosine = self.embedded.step_cosines(step.row)
            found += fusion_needs(self.bm25, cosine, step, earlier, rows, s)
        step_terms = frozenset(salient_terms(step.text, self.vocab.df, self.vocab.n_docs,
                                             s.rare_share))  # fmt: skip
        for ident in dict.fromkeys(found):
            need, values = attribute(ident, step_terms, earlier, self.vocab)
            res.needs.append(need)
            res.sources.append({"values": values, "need": need})
        res.needs = simplify(res.needs)
        return res
