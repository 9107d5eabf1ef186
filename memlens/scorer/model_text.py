"""LightGBM's text model, read and checked by MemLens itself before LightGBM ever sees it.

Why: LightGBM trusts its model files.  A same-length edit that gives a tree a cycle
(``left_child=0 ...``) makes its ``dump_model`` recurse until the process dies (SIGSEGV), and
``split_feature=9999`` makes it abort (SIGABRT): a model file from a shared folder could end
any command that loads it, with no error line.  So a model is parsed here, field by field,
and refused with a :class:`ModelFormatError` naming the tree and field unless:

* the text up to ``end of trees`` holds no control character (LightGBM reads NUL as the end
  of the text and CR as a line break), and fields are split as LightGBM splits them;
* the header says one binary model (``num_class=1``, ``num_tree_per_iteration=1``, a
  ``binary`` objective, no ``average_output``) over at most ``n_features`` features;
* ``tree_sizes`` lists every tree and matches each tree's bytes (LightGBM seeks by those
  sizes, so a tree it reads is the tree checked here), and trees are numbered 0, 1, ...;
* every tree is numerical (``num_cat=0``, not linear), its arrays have the lengths its
  ``num_leaves`` implies, every child index is in range and the nodes form one tree (each
  node reached once from the root: no cycle, nothing unreachable), every split feature is
  below the feature count, and every threshold and leaf value is a number (finite, but for
  the ``inf`` threshold LightGBM itself writes for "every number goes left", which is read
  as LightGBM's own dump reads it, 1e300).

The compiled evaluator (``memlens.scorer.model.CompiledForest``) is then built from these
arrays, numbered as ``CompiledForest.from_dump`` numbers LightGBM's own dump (nodes and leaves
in depth-first order, left first), so a checked model scores exactly as before without
LightGBM reading it at all.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

#: Header keys LightGBM writes that a MemLens model must have.
REQUIRED_HEADER = ("version", "num_class", "num_tree_per_iteration", "label_index",
                   "max_feature_idx", "objective", "feature_names", "feature_infos",
                   "tree_sizes")  # fmt: skip
#: ``objective=binary sigmoid:S`` (S > 0), and one ``[low:high]`` or ``none`` per feature.
_NUMBER = r"-?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][-+]?[0-9]+)?"
_INT = re.compile(r"-?[0-9]+")
_FLOAT = re.compile(rf"{_NUMBER}|-?inf|nan")
_OBJECTIVE = re.compile(rf"binary sigmoid:({_NUMBER})")
_INFO = re.compile(rf"none|\[{_NUMBER}:{_NUMBER}\]")
#: Per-tree arrays of one value per internal node, and of one value per leaf.
NODE_ARRAYS = ("split_feature", "split_gain", "threshold", "decision_type", "left_child",
               "right_child", "internal_value", "internal_weight", "internal_count")  # fmt: skip
LEAF_ARRAYS = ("leaf_value", "leaf_weight", "leaf_count")
#: Trees, and leaves per tree, beyond any model ``memlens train`` makes (a bound on the work).
MAX_TREES, MAX_LEAVES = 100_000, 1 << 17
_CATEGORICAL, _DEFAULT_LEFT = 1, 2
THRESHOLD_CLAMP = 1e300
_TREE = re.compile(r"^Tree=([0-9]+)$", re.MULTILINE)
_CONTROL = re.compile(r"[\x00-\x09\x0b-\x1f\x7f]")


class ModelFormatError(ValueError):
    """A text model that is not a binary numerical LightGBM model MemLens can score."""


@dataclass
class TreeArrays:
    """One checked tree in ``CompiledForest``'s depth-first numbering (children >= 0: nodes,
    < 0: leaf ``-c - 1`` counted over the whole forest)."""

    feature: list[int]
    threshold: list[float]
    left: list[int]
    right: list[int]
    default_left: list[bool]
    missing: list[int]  # 0 None, 1 Zero, 2 NaN (LightGBM's missing types)
    leaf_value: list[float]
    root: int


def _lines(text: str) -> list[str]:
    """Lines split at ``\\n`` only, as LightGBM splits them (``str.splitlines`` would also
    split at characters LightGBM reads as part of a line)."""
    return text.split("\n")


def _header(text: str) -> dict[str, str]:
    """The ``key=value`` lines before the first tree (``average_output`` has no value), read
    exactly as written: no stripping, so a key is what LightGBM looks up."""
    first = _TREE.search(text)
    head = text[: first.start()] if first else text.split("end of trees", 1)[0]
    lines = _lines(head)
    if not lines or lines[0] != "tree":
        raise ModelFormatError("not a LightGBM text model (the first line must be 'tree')")
    out = {}
    for line in lines[1:]:
        key, sep, value = line.partition("=")
        if line == "average_output":
            raise ModelFormatError("average_output (random forest mode) is not supported")
        if sep:
            if key in out:
                raise ModelFormatError(f"header: field {key!r} appears twice")
            out[key] = value
    missing = [k for k in REQUIRED_HEADER if k not in out]
    if missing:
        raise ModelFormatError(f"header: field {missing[0]!r} is missing")
    return out


def _float_or_nan(value: str) -> float:
    return float(value) if _FLOAT.fullmatch(value) else math.nan


def _int(value: str, where: str) -> int:
    if not _INT.fullmatch(value):
        raise ModelFormatError(f"{where}: {value[:40]!r} is not an integer")
    return int(value)


def _tokens(raw: str) -> list[str]:
    """Values separated by one space each, as LightGBM splits them."""
    return raw.split(" ") if raw else []


def _numbers(fields: dict, key: str, n: int, where: str, kind=float) -> list:
    """The ``n`` values of array ``key``, each written as LightGBM writes a number (ASCII
    digits: Python alone would also read ``1_0`` or other scripts' digits, LightGBM not)."""
    raw = fields.get(key)
    if raw is None:
        raise ModelFormatError(f"{where}: field {key!r} is missing")
    parts = _tokens(raw)
    if len(parts) != n:
        raise ModelFormatError(f"{where}: field {key!r} has {len(parts)} values, "
                               f"{n} expected")  # fmt: skip
    pattern = _INT if kind is int else _FLOAT
    if not all(pattern.fullmatch(p) for p in parts):
        raise ModelFormatError(f"{where}: field {key!r} holds a value that is not a "
                               f"{'number' if kind is float else 'whole number'}")  # fmt: skip
    values = [kind(p) for p in parts]
    if kind is float and not all(math.isfinite(v) for v in values):
        if key != "threshold" or any(math.isnan(v) for v in values):
            raise ModelFormatError(f"{where}: field {key!r} holds a value that is not finite")
        # LightGBM writes a split that sends every number left as threshold=inf; its own dump
        # (and so CompiledForest.from_dump) clamps that to 1e300 (Common::AvoidInf)
        values = [min(max(v, -THRESHOLD_CLAMP), THRESHOLD_CLAMP) for v in values]
    return values


def _tree_fields(block: str, where: str) -> dict[str, str]:
    fields = {}
    for line in _lines(block)[1:]:
        key, sep, value = line.partition("=")
        if sep:
            if key in fields:
                raise ModelFormatError(f"{where}: field {key!r} appears twice")
            fields[key] = value
    return fields


def _check_tree(fields: dict, n_features: int, where: str) -> tuple[int, dict]:
    """(num_leaves, the arrays scoring reads) of one tree, every field checked."""
    n = _int(fields.get("num_leaves", ""), f"{where}: num_leaves")
    if not 1 <= n <= MAX_LEAVES:
        raise ModelFormatError(f"{where}: num_leaves={n} is out of range (1..{MAX_LEAVES})")
    if "num_cat" not in fields:  # (LightGBM aborts the process on a tree without it)
        raise ModelFormatError(f"{where}: field 'num_cat' is missing")
    if _int(fields["num_cat"], f"{where}: num_cat") != 0:
        raise ModelFormatError(f"{where}: categorical splits (num_cat > 0) are not supported")
    if fields.get("is_linear", "0") != "0":
        raise ModelFormatError(f"{where}: linear trees are not supported")
    arrays = {k: _numbers(fields, k, n - 1, where, int)
              for k in ("split_feature", "decision_type", "left_child", "right_child")}  # fmt: skip
    arrays["threshold"] = _numbers(fields, "threshold", n - 1, where)
    arrays["leaf_value"] = _numbers(fields, "leaf_value", n, where)
    for key in NODE_ARRAYS + LEAF_ARRAYS:  # the rest LightGBM reads: lengths must agree
        if key not in arrays and fields.get(key):
            _numbers(fields, key, n - 1 if key in NODE_ARRAYS else n, where)
    for f in arrays["split_feature"]:
        if not 0 <= f < n_features:
            raise ModelFormatError(f"{where}: split_feature {f} is not a feature index "
                                   f"(0..{n_features - 1})")  # fmt: skip
    for d in arrays["decision_type"]:
        if d & _CATEGORICAL or d & ~0b1111 or (d >> 2) & 3 == 3:
            raise ModelFormatError(f"{where}: decision_type {d} is not a numerical split")
    for key in ("left_child", "right_child"):
        for c in arrays[key]:
            if not (0 <= c < n - 1 or 0 <= -c - 1 < n):
                raise ModelFormatError(f"{where}: {key} {c} is out of range for {n} leaves")
    return n, arrays


def _walk(n: int, a: dict, before: tuple[int, int], where: str) -> TreeArrays:
    """The tree in depth-first order (``CompiledForest.from_dump``'s numbering, which counts
    nodes and leaves over the whole forest: ``before`` = those of the earlier trees), refused
    unless every node and leaf is reached exactly once from the root."""
    nodes_before, leaves_before = before
    out = TreeArrays([], [], [], [], [], [], [], 0)
    if n == 1:
        out.leaf_value.append(a["leaf_value"][0])
        out.root = -(leaves_before + 1)
        return out
    seen_nodes, seen_leaves = set(), set()
    # (original child index, (new parent, side) or None for the root), left child first
    stack: list[tuple[int, tuple[int, int] | None]] = [(0, None)]
    while stack:
        child, parent = stack.pop()
        if child >= 0:
            if child in seen_nodes:
                raise ModelFormatError(f"{where}: node {child} is reached twice (a cycle)")
            seen_nodes.add(child)
            local = len(out.feature)
            new = nodes_before + local
            d = a["decision_type"][child]
            out.feature.append(a["split_feature"][child])
            out.threshold.append(a["threshold"][child])
            out.default_left.append(bool(d & _DEFAULT_LEFT))
            out.missing.append((d >> 2) & 3)
            out.left.append(0)
            out.right.append(0)
            stack.append((a["right_child"][child], (local, 1)))
            stack.append((a["left_child"][child], (local, 0)))
        else:
            leaf = -child - 1
            if leaf in seen_leaves:
                raise ModelFormatError(f"{where}: leaf {leaf} is reached twice")
            seen_leaves.add(leaf)
            out.leaf_value.append(a["leaf_value"][leaf])
            new = -(leaves_before + len(out.leaf_value))
        if parent is None:
            out.root = new
        else:
            (out.right if parent[1] else out.left)[parent[0]] = new
    if len(seen_nodes) != n - 1 or len(seen_leaves) != n:
        raise ModelFormatError(f"{where}: {n - 1 - len(seen_nodes)} node(s) and "
                               f"{n - len(seen_leaves)} leaf (leaves) are not reached from the "
                               "root")  # fmt: skip
    return out


def _blocks(text: str, sizes: list[int]) -> list[tuple[int, str]]:
    """(tree number, text) of every tree, checked against ``tree_sizes``."""
    end = text.find("end of trees")
    if end < 0:
        raise ModelFormatError("the line 'end of trees' is missing")
    found = list(_TREE.finditer(text, 0, end))
    if len(found) != len(sizes):
        raise ModelFormatError(f"tree_sizes lists {len(sizes)} trees, the file has {len(found)}")
    out = []
    for k, match in enumerate(found):
        if int(match.group(1)) != k:
            raise ModelFormatError(f"tree {k}: numbered Tree={match.group(1)}")
        stop = found[k + 1].start() if k + 1 < len(found) else end
        block = text[match.start() : stop]
        if len(block.encode("utf-8")) != sizes[k]:
            raise ModelFormatError(f"tree {k}: tree_sizes says {sizes[k]} bytes, the tree has "
                                   f"{len(block.encode('utf-8'))}")  # fmt: skip
        out.append((k, block))
    return out


def parse_model(text: str, n_features: int) -> list[TreeArrays]:
    """Every tree of a LightGBM text model, checked (see the module docstring)."""
    checked = text.split("end of trees", 1)[0]
    if (bad := _CONTROL.search(checked)) is not None:
        line = checked.count("\n", 0, bad.start()) + 1
        raise ModelFormatError(f"line {line}: a control character {bad.group()!r} (LightGBM "
                               "reads NUL as the end and CR as a line break)")  # fmt: skip
    head = _header(text)
    _int(head["label_index"], "header: label_index")
    for key in ("num_class", "num_tree_per_iteration"):
        got = _int(head[key], f"header: {key}")
        if got != 1:
            raise ModelFormatError(f"header: {key}={got}: only binary models (1) are supported")
    top = _int(head["max_feature_idx"], "header: max_feature_idx")
    if not 0 <= top < n_features:
        raise ModelFormatError(f"header: max_feature_idx={top}: the model must read at most "
                               f"the {n_features} decision features")  # fmt: skip
    for key in ("feature_names", "feature_infos"):  # one entry per feature, as LightGBM checks
        entries = _tokens(head[key])
        if len(entries) != top + 1 or not all(entries):
            raise ModelFormatError(f"header: {key} lists {len(entries)} features (or an empty "
                                   f"one), max_feature_idx={top} says {top + 1}")  # fmt: skip
    objective = _OBJECTIVE.fullmatch(head["objective"])
    sigmoid = _float_or_nan(objective.group(1)) if objective else math.nan
    if not (math.isfinite(sigmoid) and sigmoid > 0):
        raise ModelFormatError(f"header: objective {head['objective'][:40]!r} is not "
                               "'binary sigmoid:S' with S > 0")  # fmt: skip
    if not all(_INFO.fullmatch(info) for info in _tokens(head["feature_infos"])):
        raise ModelFormatError("header: feature_infos holds an entry that is not [low:high] "
                               "or none")  # fmt: skip
    sizes = [_int(s, "header: tree_sizes") for s in _tokens(head["tree_sizes"])]
    if len(sizes) > MAX_TREES:
        raise ModelFormatError(f"header: {len(sizes)} trees, more than {MAX_TREES}")
    trees, nodes, leaves = [], 0, 0
    for k, block in _blocks(text, sizes):
        where = f"tree {k}"
        n, arrays = _check_tree(_tree_fields(block, where), top + 1, where)
        trees.append(_walk(n, arrays, (nodes, leaves), where))
        nodes, leaves = nodes + n - 1, leaves + n
    return trees
