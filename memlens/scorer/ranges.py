"""Does a trace ask the bundled model about features it never saw in training?

Why: the bundled model (``memlens/models/default_learned.txt``) was trained on tau-bench,
LoCoMo and generated traces.  On someone's own logs a feature can fall outside every value it
was trained on (far longer items, far older ones); the trees then score such points as their
outermost leaf, an extrapolation nobody measured.  LightGBM writes each feature's training
range into the model text (``feature_infos=[min:max] ...``; ``none`` for a feature never
split on), so the check needs no extra file: the replay compares the ranges of its own decision
points' features with those and, for the bundled model, warns once per process, saying how to
train on one's own logs.
"""

from __future__ import annotations

import re
import sys

import numba
import numpy as np

from memlens.scorer.decision_features import FEATURE_NAMES

_INFO = re.compile(r"^feature_infos=(.*)$", re.MULTILINE)
_RANGE = re.compile(r"\[([^:\]]+):([^\]]+)\]")
_warned: list[str] = []  # the bundled model's warning, once per process
MARGIN = 0.05  # share of a feature's training range a value may pass its edge by


def training_ranges(model_text: str) -> dict[int, tuple[float, float]]:
    """Feature index -> (min, max) seen in training, from the model text's ``feature_infos``
    (features marked ``none``, or a text without the line, have no range)."""
    found = _INFO.search(model_text)
    if found is None:
        return {}
    out = {}
    for k, info in enumerate(found.group(1).split()):
        m = _RANGE.fullmatch(info)
        if m is not None:
            out[k] = (float(m.group(1)), float(m.group(2)))
    return out


@numba.njit(cache=True, nogil=True)
def _finite_ranges(X, cols, lo, hi):  # pragma: no cover - compiled
    """``lo[j]`` / ``hi[j]``: lowered / raised to the least / greatest finite value of column
    ``cols[j]`` of ``X``."""
    for r in range(X.shape[0]):
        for j in range(cols.shape[0]):
            v = X[r, cols[j]]
            if np.isfinite(v):
                if v < lo[j]:
                    lo[j] = v
                if v > hi[j]:
                    hi[j] = v


class RangeTracker:
    """The running min and max of every feature column over the blocks a replay scores."""

    def __init__(self, n_features: int) -> None:
        self.lo = np.full(n_features, np.inf)
        self.hi = np.full(n_features, -np.inf)

    def add(self, X: np.ndarray, columns: list[int] | None = None) -> None:
        """Take in a block of feature rows (NaN and infinities are not values: skipped), or
        only its ``columns`` (the same block again with only those changed: a budget's)."""
        if not len(X):
            return
        cols = np.arange(X.shape[1]) if columns is None else np.asarray(columns, np.int64)
        lo, hi = self.lo[cols], self.hi[cols]
        # one compiled pass reading only ``columns`` (two masked copies of the block took
        # 0.9 s of the learned scorer's 10 s preparation on a 5,800-stream trace, issue 34)
        _finite_ranges(np.asarray(X, np.float64), cols, lo, hi)
        self.lo[cols], self.hi[cols] = lo, hi

    def outside(self, ranges: dict[int, tuple[float, float]]) -> list[str]:
        """Names of the features whose values here leave their training range by more than
        :data:`MARGIN` of its width (a hair past the edge is not an extrapolation worth a
        warning: the bundled trace's own rule_static tops the range by 0.001)."""
        names = []
        for k, (lo, hi) in sorted(ranges.items()):
            slack = MARGIN * (hi - lo) + 1e-9 * max(1.0, abs(lo), abs(hi))
            if k < len(self.lo) and (self.lo[k] < lo - slack or self.hi[k] > hi + slack):
                names.append(FEATURE_NAMES[k] if k < len(FEATURE_NAMES) else f"feature {k}")
        return names


def warn_bundled_outside(names: list[str], trace_source: str) -> bool:
    """Print the bundled model's warning (once per process); whether it was printed now."""
    if not names or _warned or trace_source.startswith("<"):  # "<warm-up>": the kernel's own
        return False
    shown = ", ".join(names[:6]) + (f" and {len(names) - 6} more" if len(names) > 6 else "")
    text = (f"warning: the bundled learned model never saw values like these in training "
            f"({shown}, on {trace_source}); its scores there extrapolate.  Train one on your "
            "own logs: memlens train split=path/to/trace.jsonl label.kind=hindsight "
            "(docs/how-to/feedback-and-training.md)")  # fmt: skip
    _warned.append(text)
    print(text, file=sys.stderr)
    return True
