"""Which earlier items an agent's step used, derived from a log nobody annotated.

A real agent log says what the agent wrote and which tools it called, never which earlier
messages it relied on; yet a trace's ``needs`` decide every hit rate.  Each way of guessing them
is a named method, recorded in the trace header, so that a verdict can be checked against
another method (``memlens compare`` over several derivations reports whether it holds) and each
method can be measured against human evidence (``experiments/derivation.py`` on LoCoMo):

``args``       every scalar value in the step's tool-call arguments, traced to the earlier items
               that contain it as a whole token (case-insensitive).  When several items hold the
               value, ``pick=alternatives`` (default) emits the group of all of them (trace
               format 1.1: the need is met when any one is resident); ``first``/``last`` pick one.
               A pinned item (the system prompt) is the source only when nothing else holds it.
``overlap``    the step's salient terms (identifiers, numbers, capitalised names, rare words)
               found in earlier items; an item sharing at least ``overlap_min_terms`` of them is
               a need, the ``overlap_top_k`` best by summed inverse document frequency.
``embedding``  the offline TF-IDF/SVD embedder of ``memlens.retrieval.embeddings``: earlier items whose
               cosine similarity to the step is at least ``embedding_threshold``, the
               ``embedding_top_k`` most similar.
``union``      every need any of the three methods derives.

``overlap`` and ``embedding`` never name a pinned item (it is resident whatever the policy).
Everything here is a pure function of the log and the settings: same input, same needs.
"""

from __future__ import annotations

import functools
import math
import re
from collections import Counter
from dataclasses import asdict, dataclass, field

import numpy as np

METHODS = ("args", "overlap", "embedding", "union")
PICKS = ("alternatives", "first", "last")
Need = str | list[str]  # an item id, or a group of alternative ids (any one meets the need)

_TERM = re.compile(r"[A-Za-z0-9][A-Za-z0-9_@.\-]*[A-Za-z0-9]|[A-Za-z0-9]")
_STOPWORDS = frozenset(
    """a about after again all also am an and any are as at be because been before being but by
    can could did do does doing don down during each few for from further had has have having he
    her here hers him his how i if in into is it its just me more most my no nor not now of off on
    once only or other our out over own same she should so some such than that the their them then
    there these they this those through to too under until up very was we were what when where
    which while who whom why will with would you your yours yes yeah hey hi oh ok okay thanks
    thank really so much like get got go going know think want well great good sure lot let one
    i'm it's that's you're i've i'll""".split()
)


def _setting(default, meaning: str):
    return field(default=default, metadata={"help": meaning})


@dataclass
class NeedsSettings:
    """How needs are derived (recorded verbatim in the trace header under ``needs``)."""

    method: str = _setting("args", "args | overlap | embedding | union (all three)")
    pick: str = _setting(
        "alternatives", "args: a value several items hold -> alternatives | first | last"
    )
    overlap_min_terms: int = _setting(1, "overlap: salient terms an item must share")
    overlap_top_k: int = _setting(3, "overlap: at most this many items, best IDF score first")
    rare_share: float = _setting(0.01, "overlap: a word in at most this share of items is rare")
    embedding_threshold: float = _setting(0.3, "embedding: least cosine similarity")
    embedding_top_k: int = _setting(3, "embedding: at most this many items, most similar first")
    embedding_dim: int = _setting(0, "embedding: 0 = exact TF-IDF, else SVD dimensions")

    def __post_init__(self) -> None:
        if self.method not in METHODS:
            raise ValueError(
                f"needs.method must be one of {', '.join(METHODS)}, got {self.method!r}"
            )
        if self.pick not in PICKS:
            raise ValueError(f"needs.pick must be one of {', '.join(PICKS)}, got {self.pick!r}")
        for name in ("overlap_min_terms", "overlap_top_k", "embedding_top_k", "embedding_dim"):
            low = 0 if name == "embedding_dim" else 1
            if getattr(self, name) < low:
                raise ValueError(f"needs.{name} must be at least {low}, got {getattr(self, name)}")
        if not 0 < self.rare_share <= 1:
            raise ValueError(f"needs.rare_share must be in (0, 1], got {self.rare_share}")
        if not -1 <= self.embedding_threshold <= 1:
            raise ValueError(
                f"needs.embedding_threshold must be in [-1, 1], got {self.embedding_threshold}"
            )

    def describe(self) -> dict:
        """The header's ``needs`` block: the method, the settings it uses, and a label."""
        used = {"args": ("pick",), "overlap": ("overlap_", "rare_share"),
                "embedding": ("embedding_",)}  # fmt: skip
        prefixes = sum((used[m] for m in (used if self.method == "union" else [self.method])), ())
        settings = {k: v for k, v in asdict(self).items() if k.startswith(prefixes)}
        return {"method": self.method, **settings, "evidence": "derived"}


@dataclass
class Earlier:
    """An item written before the step: its id, text and whether it is pinned."""

    id: str
    text: str
    pinned: bool = False


@dataclass
class Step:
    """A step whose needs are derived: its text (its vector's row ``row``) and tool arguments."""

    text: str
    arguments: list
    row: int = -1


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
    needs: list[Need]
    values: int = 0
    found: int = 0
    system_only: int = 0
    unmatched: list[str] | None = None


def args_needs(arguments: list, earlier: list[Earlier], pick: str) -> ArgsResult:
    """The ``args`` method: each argument value's source item(s) among ``earlier``."""
    res = ArgsResult(needs=[], unmatched=[])
    lowered = [(e.id, e.text.lower(), e.pinned) for e in earlier]
    for args in arguments:
        for arg, value in argument_values(args):
            res.values += 1
            pat = token_pattern(value)
            hits = [i for i, text, pinned in lowered if not pinned and pat.search(text)]
            if hits:
                res.found += 1
            else:
                hits = [i for i, text, pinned in lowered if pinned and pat.search(text)]
                if not hits:
                    res.unmatched.append(arg)
                    continue
                res.system_only += 1
            if len(hits) == 1 or pick != "alternatives":
                res.needs.append(hits[-1] if pick == "last" else hits[0])
            else:
                res.needs.append(hits)
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
        ident = has_digit and any(c.isalpha() for c in t) or "_" in t
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


def embedding_needs(
    step_vec: np.ndarray, earlier: list[Earlier], rows: list[int], vecs: np.ndarray,
    s: NeedsSettings,
) -> list[str]:  # fmt: skip
    """The ``embedding`` method: the most similar earlier items above the threshold."""
    cand = [(e.id, r) for e, r in zip(earlier, rows, strict=True) if not e.pinned]
    if not cand:
        return []
    sims = vecs[[r for _, r in cand]] @ step_vec.T
    sims = np.asarray(sims.todense() if hasattr(sims, "todense") else sims).ravel()
    order = sorted(range(len(cand)), key=lambda i: (-float(sims[i]), -i))
    keep = [i for i in order if sims[i] >= s.embedding_threshold][: s.embedding_top_k]
    return [cand[i][0] for i in keep]


# ------------------------------------------------------------------------------ all
class Deriver:
    """Derives the needs of every step of one log with one :class:`NeedsSettings`.

    Built once over every text of the log (``item_texts`` and ``step_texts``), because rarity
    and the embedding are properties of the whole log, not of one step."""

    def __init__(self, settings: NeedsSettings, item_texts: list[str], step_texts: list[str]):
        self.settings = settings
        self.vocab = Vocabulary.of(item_texts)
        self.vecs = None
        if settings.method in ("embedding", "union"):
            self.vecs = embed_texts([*item_texts, *step_texts], settings.embedding_dim)
        self.n_items = len(item_texts)

    def derive(self, step: Step, earlier: list[Earlier], rows: list[int]) -> ArgsResult:
        """Needs of ``step`` among ``earlier`` (whose texts are rows ``rows`` of the log's item
        texts); with ``args`` counts of the argument values found."""
        s, method = self.settings, self.settings.method
        res = ArgsResult(needs=[])
        if method in ("args", "union"):
            res = args_needs(step.arguments, earlier, s.pick)
        extra: list[Need] = []
        if method in ("overlap", "union"):
            extra += overlap_needs(step.text, earlier, self.vocab, s)
        if method in ("embedding", "union"):
            vec = self.vecs[self.n_items + step.row : self.n_items + step.row + 1]
            extra += embedding_needs(vec, earlier, rows, self.vecs, s)
        res.needs = simplify([*res.needs, *extra])
        return res
