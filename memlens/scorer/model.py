"""The learned value model: a LightGBM estimator, its shippable file, and a compiled evaluator.

* :class:`ValueScorer` (``memlens.scorer.estimator``, re-exported here when first asked for,
  so a replay never imports scikit-learn) is LightGBM behind a scikit-learn-style estimator: ``fit`` returns
  ``self``, learned state ends in ``_`` (``booster_``, ``feature_names_in_``, ...), and
  ``random_state`` with ``deterministic=True`` and one thread makes the same data give the same
  trees, bit for bit.
* A model a user can ship is two text files, never a pickle (a pickle runs code when loaded):
  ``NAME.txt``, LightGBM's own text model, and ``NAME.json``, its sidecar (feature names and
  order, label kind, the training traces' hashes, code version, parameters, and the policy's
  decay and size settings).  :func:`save_model` writes both, :func:`load_model` reads them back
  from a path, from ``default`` (the model bundled in ``memlens/models/``) or from an MLflow
  registry URI ``models:/NAME/VERSION``, and refuses a sidecar whose features are not exactly
  :data:`memlens.scorer.decision_features.FEATURE_NAMES` in order.
* :class:`CompiledForest` evaluates the trees from ``booster.dump_model()`` arrays in numba
  (LightGBM's numerical split rule with its missing-value handling), so the policy never pays
  LightGBM's per-call thread-pool overhead; ``tests/learn/test_learned.py`` checks that it gives
  LightGBM's raw scores.
"""

from __future__ import annotations

import hashlib
import json
import math
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING

import numba
import numpy as np

from memlens.scorer import leafmasks
from memlens.scorer.decision_features import FEATURE_NAMES
from memlens.scorer.model_text import ModelFormatError, TreeArrays, parse_model

if TYPE_CHECKING:
    from memlens.scorer.estimator import ValueScorer

SIDECAR_FORMAT = "memlens-learned-model/1"
MODELS_DIR = Path(__file__).resolve().parents[1] / "models"
DEFAULT_MODEL = MODELS_DIR / "default_learned.txt"


def __getattr__(name: str):
    """``ValueScorer`` from ``memlens.scorer.estimator``, imported (with scikit-learn) only
    when asked for: replaying ``policy=learned`` needs the compiled forest, not the estimator."""
    if name == "ValueScorer":
        from memlens.scorer.estimator import ValueScorer

        return ValueScorer
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


class ModelError(ValueError):
    """A model file or sidecar that cannot be used; the message names the file and field."""


# ---------------------------------------------------------------------- compiled forest
MISSING_NONE, MISSING_ZERO, MISSING_NAN = 0, 1, 2
_MISSING = {"None": MISSING_NONE, "Zero": MISSING_ZERO, "NaN": MISSING_NAN}
ZERO_THRESHOLD = 1e-35  # LightGBM's kZeroThreshold


@numba.njit(cache=True, nogil=True, inline="always")
def _leaf(X, r, node, column, value, feature, threshold, child, default_left, missing):
    """The leaf (``-leaf - 1``) row ``r`` of ``X`` reaches from ``node``, reading ``value``
    for feature ``column`` (-1: none replaced).  The next node is picked by index
    (``child[2 * node + right]``) rather than by a branch: which way a row goes is what a CPU
    cannot predict, and this loop is the learned scorer's whole preparation per budget."""
    while node >= 0:
        f = feature[node]
        x = value if f == column else X[r, f]
        m = missing[node]
        if np.isnan(x) and m != 2:
            x = 0.0
        if (m == 1 and -1e-35 <= x <= 1e-35) or (m == 2 and np.isnan(x)):
            right = 0 if default_left[node] else 1
        else:
            right = 1 if x > threshold[node] else 0
        node = child[2 * node + right]
    return -node - 1


@numba.njit(cache=True, nogil=True, parallel=True)
def _forest_raw(X, roots, feature, threshold, child, default_left, missing, leaf_value):
    """Sum of the trees' leaf values per row, trees in order (as LightGBM adds them).  Rows
    are independent, so spreading them over threads changes no sum."""
    n = X.shape[0]
    out = np.zeros(n)
    for r in numba.prange(n):
        s = 0.0
        for t in range(roots.shape[0]):
            s += leaf_value[_leaf(X, r, roots[t], -1, 0.0, feature, threshold, child,
                                  default_left, missing)]  # fmt: skip
        out[r] = s
    return out


@numba.njit(cache=True, nogil=True, parallel=True)
def _forest_raw_pair(X, moved, column, value, splits_on, roots, feature, threshold, child,
                     default_left, missing, leaf_value):  # fmt: skip
    """``_forest_raw`` of ``X``, and of the rows where ``moved`` with ``column`` read as
    ``value`` (the others: the same as ``X``'s), in one pass: a tree that never splits on
    ``column`` reaches the same leaf both ways, and the sums add the trees in the same order."""
    n = X.shape[0]
    main = np.zeros(n)
    other = np.zeros(n)
    for r in numba.prange(n):
        s = 0.0
        o = 0.0
        for t in range(roots.shape[0]):
            v = leaf_value[_leaf(X, r, roots[t], -1, 0.0, feature, threshold, child,
                                 default_left, missing)]  # fmt: skip
            s += v
            if moved[r]:
                if splits_on[t]:
                    v = leaf_value[_leaf(X, r, roots[t], column, value, feature, threshold,
                                         child, default_left, missing)]  # fmt: skip
                o += v
        main[r] = s
        other[r] = o if moved[r] else s
    return main, other


@numba.njit(cache=True, nogil=True, inline="always")
def _right(x, node, threshold, default_left, missing):
    """Whether a row reading ``x`` at ``node`` goes right: ``_leaf``'s rule, for one value."""
    m = missing[node]
    if np.isnan(x) and m != 2:
        x = 0.0
    if (m == 1 and -1e-35 <= x <= 1e-35) or (m == 2 and np.isnan(x)):
        return not default_left[node]
    return x > threshold[node]


#: The most budgets :func:`_forest_raw_budgets` scores in one pass (two scenarios each, one bit
#: of a 64-bit mask per scenario).
MAX_PASS_BUDGETS = 16


@numba.njit(cache=True, nogil=True, parallel=True)
def _forest_raw_budgets(X, moved, slot, values, tier_value, varies, roots, feature, threshold,
                        child, default_left, missing, leaf_value):  # fmt: skip
    """``_forest_raw_pair`` at K budgets in one walk of each tree per row.

    ``values[k, r, j]``: budget ``k``'s value of the ``j``-th budget column of row ``r``;
    ``slot[f]``: ``j`` for a budget column ``f``, -1 for one no budget changes, -2 for the
    tier column (read as ``tier_value`` in the rows where ``moved``, for the "as missed"
    scores); ``varies[t]``: whether tree ``t`` reads any of them.  Scenario ``k`` is budget
    ``k`` in place, ``K + k`` the same as missed.  The scenarios walk a tree together, as a
    bit mask, and part only where a node reads a column they see differently; each
    scenario's sum still adds the leaf it reaches in every tree, in tree order, so every score
    is ``_forest_raw_pair``'s at that budget, bit for bit."""
    n, K = X.shape[0], values.shape[0]
    main = np.empty((K, n))
    miss = np.empty((K, n))
    n_chunks = (n + _CHUNK - 1) // _CHUNK
    for c in numba.prange(n_chunks):
        acc = np.empty(2 * K)
        stack_node = np.empty(2 * K + 1, np.int64)
        stack_mask = np.empty(2 * K + 1, np.int64)
        for r in range(c * _CHUNK, min(n, (c + 1) * _CHUNK)):
            S = 2 * K if moved[r] else K
            acc[:S] = 0.0
            for t in range(roots.shape[0]):
                if not varies[t]:  # every scenario reaches the same leaf
                    v = leaf_value[_leaf(X, r, roots[t], -1, 0.0, feature, threshold, child,
                                         default_left, missing)]  # fmt: skip
                    for s in range(S):
                        acc[s] += v
                    continue
                stack_node[0] = roots[t]
                stack_mask[0] = (1 << S) - 1
                top = 1
                while top > 0:
                    top -= 1
                    node, mask = stack_node[top], stack_mask[top]
                    while node >= 0:
                        f = feature[node]
                        j = slot[f]
                        if j == -1:
                            go = _right(X[r, f], node, threshold, default_left, missing)
                            node = child[2 * node + (1 if go else 0)]
                            continue
                        left_mask = 0
                        right_mask = 0
                        for s in range(S):
                            bit = 1 << s
                            if mask & bit:
                                if j == -2:
                                    x = tier_value if s >= K else X[r, f]
                                else:
                                    x = values[s % K, r, j]
                                if _right(x, node, threshold, default_left, missing):
                                    right_mask |= bit
                                else:
                                    left_mask |= bit
                        if left_mask and right_mask:  # the scenarios part: one goes on later
                            stack_node[top] = child[2 * node + 1]
                            stack_mask[top] = right_mask
                            top += 1
                            node, mask = child[2 * node], left_mask
                        elif right_mask:
                            node = child[2 * node + 1]
                        else:
                            node = child[2 * node]
                    v = leaf_value[-node - 1]
                    for s in range(S):
                        if mask & (1 << s):
                            acc[s] += v
            for k in range(K):
                main[k, r] = acc[k]
                miss[k, r] = acc[K + k] if moved[r] else acc[k]
    return main, miss


_CHUNK = 4096  # rows per task of ``_forest_raw_budgets`` (its scratch is allocated per task)


@dataclass
class CompiledForest:
    """A binary LightGBM model as flat arrays (children >= 0: internal nodes; < 0: leaf ``-c-1``)."""

    roots: np.ndarray
    feature: np.ndarray
    threshold: np.ndarray
    left: np.ndarray
    right: np.ndarray
    default_left: np.ndarray
    missing: np.ndarray
    leaf_value: np.ndarray

    @classmethod
    def from_trees(cls, trees: list[TreeArrays]) -> CompiledForest:
        """From the checked trees of ``memlens.scorer.model_text.parse_model`` (the same
        arrays :meth:`from_dump` builds from LightGBM's dump of the same model)."""

        def cat(key: str, dtype) -> np.ndarray:
            return np.asarray([v for t in trees for v in getattr(t, key)], dtype)

        return cls(np.asarray([t.root for t in trees], np.int64), cat("feature", np.int64),
                   cat("threshold", np.float64), cat("left", np.int64), cat("right", np.int64),
                   cat("default_left", np.bool_), cat("missing", np.int8),
                   cat("leaf_value", np.float64))  # fmt: skip

    @classmethod
    def from_dump(cls, dump: dict) -> CompiledForest:
        """From ``booster.dump_model()`` (numerical splits only; one tree per iteration)."""
        if dump.get("num_tree_per_iteration", 1) != 1:
            raise ModelError("only binary models (one tree per iteration) can be compiled")
        nodes: dict[str, list] = {k: [] for k in ("f", "t", "l", "r", "d", "m")}
        leaves: list[float] = []

        def visit(node: dict) -> int:
            if "leaf_value" in node:
                leaves.append(float(node["leaf_value"]))
                return -len(leaves)
            if node.get("decision_type", "<=") != "<=":
                raise ModelError("categorical splits are not supported by the compiled forest")
            k = len(nodes["f"])
            for key, v in (("f", node["split_feature"]), ("t", float(node["threshold"])),
                           ("l", 0), ("r", 0), ("d", bool(node["default_left"])),
                           ("m", _MISSING[node.get("missing_type", "None")])):  # fmt: skip
                nodes[key].append(v)
            nodes["l"][k] = visit(node["left_child"])
            nodes["r"][k] = visit(node["right_child"])
            return k

        roots = [visit(tree["tree_structure"]) for tree in dump["tree_info"]]
        return cls(np.asarray(roots, np.int64), np.asarray(nodes["f"], np.int64),
                   np.asarray(nodes["t"], np.float64), np.asarray(nodes["l"], np.int64),
                   np.asarray(nodes["r"], np.int64), np.asarray(nodes["d"], np.bool_),
                   np.asarray(nodes["m"], np.int8), np.asarray(leaves, np.float64))  # fmt: skip

    def raw(self, X) -> np.ndarray:
        """Raw scores (log-odds) of the rows of ``X``."""
        X = np.ascontiguousarray(X, dtype=np.float64)
        if len(self.roots) == 0:
            return np.zeros(X.shape[0])
        return _forest_raw(X, self.roots, self.feature, self.threshold, self.children,
                           self.default_left, self.missing, self.leaf_value)  # fmt: skip

    @cached_property
    def children(self) -> np.ndarray:
        """``[left, right]`` of every node, interleaved (``children[2 * node + 1]``: right)."""
        out = np.empty(2 * len(self.left), np.int64)
        out[0::2], out[1::2] = self.left, self.right
        return out

    def splits_on(self, column: int) -> np.ndarray:
        """Per tree: whether any of its splits reads feature ``column``."""
        out = np.zeros(len(self.roots), np.bool_)
        for t, root in enumerate(self.roots.tolist()):
            stack = [root]
            while stack:
                node = stack.pop()
                if node >= 0:
                    out[t] |= bool(self.feature[node] == column)
                    stack += [int(self.left[node]), int(self.right[node])]
        return out

    def raw_pair(self, X, moved: np.ndarray, column: int, value: float):
        """``(raw(X), raw(X'))`` where ``X'`` is ``X`` with ``column`` set to ``value`` in the
        rows where ``moved`` (the learned scorer's anchors in place and as missed)."""
        X = np.ascontiguousarray(X, dtype=np.float64)
        if len(self.roots) == 0:
            return np.zeros(X.shape[0]), np.zeros(X.shape[0])
        return _forest_raw_pair(X, np.asarray(moved, np.bool_), int(column), float(value),
                                self.splits_on(column), self.roots, self.feature,
                                self.threshold, self.children, self.default_left,
                                self.missing, self.leaf_value)  # fmt: skip

    def raw_budgets(self, X, moved: np.ndarray, column: int, value: float,
                    columns: list[int], values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:  # fmt: skip
        """:meth:`raw_pair` at several budgets in one pass: row ``k`` of each result is
        ``raw_pair`` of ``X`` with ``X[:, columns]`` set to ``values[k]`` (shape (K, n,
        len(columns))): the same leaves, added in the same order, as one ``raw_pair`` per
        budget.  By the forest's leaf masks (``memlens.scorer.leafmasks``: twice as fast on
        the bundled model), or by :meth:`walk_budgets` for a forest without them.  The masks
        read ``X`` in either layout (the learned scorer's blocks are column by column: copying
        them into rows took 0.55 s of its preparation on a 5,800-stream trace)."""
        X = np.asarray(X, dtype=np.float64)
        if not X.flags.f_contiguous:
            X = np.ascontiguousarray(X)
        values = np.ascontiguousarray(values, dtype=np.float64)
        K, n = values.shape[0], X.shape[0]
        if values.shape[1:] != (n, len(columns)):
            raise ValueError(f"values must be (budgets, {n}, {len(columns)}), got {values.shape}")
        if len(self.roots) == 0 or K == 0:
            return np.zeros((K, n)), np.zeros((K, n))
        masks = self.leaf_masks
        distinct = len(set(map(int, columns))) == len(columns)  # the walk: the last one wins
        if masks is not None and distinct and int(self.feature.max(initial=-1)) < X.shape[1]:
            return leafmasks.raw_budgets(masks, X, moved, column, value, columns, values)
        return self.walk_budgets(X, moved, column, value, columns, values)

    @cached_property
    def leaf_masks(self) -> leafmasks.LeafMasks | None:
        """The forest as leaf bit masks (``memlens.scorer.leafmasks``; None: a tree has more
        than 64 leaves)."""
        return leafmasks.leaf_masks(self.roots, self.feature, self.threshold, self.children,
                                    self.default_left, self.missing, self.leaf_value)  # fmt: skip

    def walk_budgets(self, X, moved: np.ndarray, column: int, value: float,
                     columns: list[int], values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:  # fmt: skip
        """:meth:`raw_budgets` by walking the trees (every budget together, apart only below
        the nodes that read ``columns`` or ``column``): forests without leaf masks."""
        X = np.ascontiguousarray(X, dtype=np.float64)
        values = np.ascontiguousarray(values, dtype=np.float64)
        K = values.shape[0]
        slot = np.full(max(X.shape[1], int(self.feature.max(initial=-1)) + 1), -1, np.int64)
        slot[int(column)] = -2
        slot[np.asarray(columns, np.int64)] = np.arange(len(columns))
        moved = np.asarray(moved, np.bool_)
        varies = self.splits_on(int(column))
        for f in columns:
            varies |= self.splits_on(int(f))
        mains, misses = [], []
        for a in range(0, K, MAX_PASS_BUDGETS):
            main, miss = _forest_raw_budgets(X, moved, slot, values[a : a + MAX_PASS_BUDGETS],
                                             float(value), varies, self.roots, self.feature,
                                             self.threshold, self.children, self.default_left,
                                             self.missing, self.leaf_value)  # fmt: skip
            mains.append(main)
            misses.append(miss)
        return np.concatenate(mains), np.concatenate(misses)


# ------------------------------------------------------------------------- the model file
@dataclass
class LearnedModel:
    """A loaded model: LightGBM's text, its sidecar, and where it came from."""

    text: str
    meta: dict
    source: str = "<memory>"
    _forest: CompiledForest | None = field(default=None, repr=False)

    @cached_property
    def sha256(self) -> str:
        return hashlib.sha256(self.text.encode()).hexdigest()

    @property
    def forest(self) -> CompiledForest:
        """The compiled evaluator, built from our own checked parse of the text (LightGBM
        never reads a model to score it: ``memlens.scorer.model_text``)."""
        if self._forest is None:
            try:
                trees = parse_model(self.text, len(FEATURE_NAMES))
            except ModelFormatError as exc:
                raise ModelError(f"{self.source}: {exc}") from None
            self._forest = CompiledForest.from_trees(trees)
        return self._forest

    @property
    def checked_text(self) -> str:
        """The part of the text our parse checked: the header and the trees, up to ``end of
        trees``.  What follows (feature importances, LightGBM's parameters) is never read: a
        truncated parameters section alone makes LightGBM's loader crash."""
        self.forest  # noqa: B018 - checked first
        end = self.text.index("end of trees") + len("end of trees")
        return self.text[:end] + "\n"

    def booster(self):
        """LightGBM's own reading of the checked part of the model (tests compare the two
        evaluators; nothing unchecked ever reaches LightGBM)."""
        import lightgbm as lgb

        return lgb.Booster(model_str=self.checked_text)

    def raw(self, X) -> np.ndarray:
        """Log-odds of "worth keeping" for feature rows ``X`` (the compiled evaluator)."""
        return self.forest.raw(X)

    def policy_setting(self, key: str, default):
        return self.meta.get("policy", {}).get(key, default)


def sidecar_path(model_path: str | Path) -> Path:
    return Path(model_path).with_suffix(".json")


def sidecar(estimator: ValueScorer, meta: dict) -> dict:
    """The full sidecar of a fitted estimator: format, feature names, ``meta``, model hash."""
    text = estimator.booster_.model_to_string()
    return {"format": SIDECAR_FORMAT, "feature_names": list(FEATURE_NAMES), **meta,
            "model_sha256": hashlib.sha256(text.encode()).hexdigest()}  # fmt: skip


def save_model(path: str | Path, estimator: ValueScorer, meta: dict) -> tuple[Path, Path]:
    """Write ``path`` (LightGBM text model) and its JSON sidecar next to it."""
    path = Path(path)
    if path.suffix != ".txt":
        raise ValueError(f"a model path ends in .txt (the sidecar is .json), got {path}")
    from memlens._util.atomic import write_text

    write_text(path, estimator.booster_.model_to_string())
    side = json.dumps(sidecar(estimator, meta), indent=2, sort_keys=True) + "\n"
    write_text(sidecar_path(path), side)
    return path, sidecar_path(path)


def check_sidecar(meta, where: str) -> dict:
    """The sidecar if usable, else a :class:`ModelError` naming the file and field."""
    if not isinstance(meta, dict):
        raise ModelError(f"{where}: the sidecar must be a JSON object")
    if meta.get("format") != SIDECAR_FORMAT:
        raise ModelError(f"{where}: field 'format' must be {SIDECAR_FORMAT!r}, "
                         f"got {meta.get('format')!r}")  # fmt: skip
    names = meta.get("feature_names")
    if names != list(FEATURE_NAMES):
        raise ModelError(f"{where}: field 'feature_names' does not match this version's features "
                         f"({len(FEATURE_NAMES)} in memlens.scorer.decision_features.FEATURE_NAMES); "
                         "retrain the model with `memlens train`")  # fmt: skip
    policy = meta.get("policy", {})
    for key in ("decay_per_request", "size_exponent"):
        v = policy.get(key, 0.0)
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v < 0:
            raise ModelError(f"{where}: field 'policy.{key}' must be a finite number >= 0")
    return meta


#: The largest model text and sidecar read (the bundled model is 180 kB).
MAX_MODEL_BYTES, MAX_SIDECAR_BYTES = 256 << 20, 16 << 20


def _read_text(path: Path, limit: int) -> str:
    """A model file's text, refused when too large or not UTF-8 (a ``ModelError``)."""
    try:
        if path.stat().st_size > limit:
            raise ModelError(f"{path}: larger than {limit >> 20} MiB")
        return path.read_bytes().decode("utf-8")  # as written: no newline translation
    except UnicodeDecodeError:
        raise ModelError(f"{path}: not UTF-8 text") from None
    except OSError as exc:
        raise ModelError(f"{path}: cannot be read ({exc.strerror or exc})") from None


def _from_files(path: Path) -> LearnedModel:
    side = sidecar_path(path)
    for p in (path, side):
        if not p.is_file():
            raise ModelError(f"{p}: no such model file (a model is NAME.txt plus NAME.json)")
    try:
        meta = json.loads(_read_text(side, MAX_SIDECAR_BYTES))
    except (json.JSONDecodeError, RecursionError) as exc:
        raise ModelError(f"{side}: not JSON ({str(exc)[:120]})") from None
    meta = check_sidecar(meta, str(side))
    return _checked(_read_text(path, MAX_MODEL_BYTES), meta, str(path))


def _checked(text: str, meta: dict, where: str) -> LearnedModel:
    """A model whose hash is the sidecar's ``model_sha256`` (required: an edited model is
    noticed) and whose text passes our own check (``memlens.scorer.model_text``) before
    anything, LightGBM included, reads it."""
    model = LearnedModel(text, meta, where)
    want = meta.get("model_sha256")
    if not isinstance(want, str):
        raise ModelError(f"{where}: the sidecar has no field 'model_sha256' (the model's "
                         "SHA-256, which `memlens train` writes); it is required")  # fmt: skip
    if want != model.sha256:
        raise ModelError(f"{where}: field 'model_sha256' of the sidecar does not match the model")
    model.forest  # noqa: B018 - parse and check now, fail here rather than mid-replay
    return model


def _from_registry(uri: str) -> LearnedModel:
    """A model logged by ``memlens train`` to MLflow (``models:/NAME/VERSION``)."""
    import tempfile

    import mlflow
    from mlflow.models import Model

    with tempfile.TemporaryDirectory() as tmp:
        try:
            local = Path(mlflow.artifacts.download_artifacts(artifact_uri=uri, dst_path=tmp))
        except Exception as exc:  # MLflow raises several types for a missing model
            raise ModelError(f"{uri}: cannot load it from the MLflow registry ({exc})") from None
        meta = (Model.load(str(local)).metadata or {}).get("memlens")
        texts = list(local.rglob("*.lgb")) or list(local.rglob("*.txt"))
        if not texts:
            raise ModelError(f"{uri}: no LightGBM text model among the artifacts")
        text = texts[0].read_text(encoding="utf-8")
    return _checked(text, check_sidecar(meta, f"{uri} (MLmodel metadata 'memlens')"), uri)


_LOADED: dict[tuple, LearnedModel] = {}


def load_model(spec: str) -> LearnedModel:
    """A model from ``default``, a ``.txt`` path (with its ``.json``) or ``models:/NAME/VER``.

    Files are memoised by (path, size, mtime) so every run of a ``compare`` shares one parse.
    """
    if spec.startswith("models:/"):
        key: tuple = (spec,)
        if key not in _LOADED:
            _LOADED[key] = _from_registry(spec)
        return _LOADED[key]
    path = DEFAULT_MODEL if spec == "default" else Path(spec).expanduser()
    stamp = tuple((p.stat().st_size, p.stat().st_mtime_ns) if p.exists() else None
                  for p in (path, sidecar_path(path)))  # fmt: skip
    key = (str(path.resolve()), stamp)
    if key not in _LOADED:
        _LOADED[key] = _from_files(path)
    return _LOADED[key]
