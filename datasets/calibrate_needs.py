"""A derivation method's threshold set by calibration on labelled needs, for a target precision.

A threshold tuned by eye to one dataset is a threshold tuned to that dataset.  Here each method
has one threshold (its *grid*, strict to loose), and :func:`calibrate` derives the needs of a
labelled trace (human evidence, or LongMemEval's ``has_answer`` turns) at every value and keeps
the loosest whose precision still meets the target: the most recall a user can have while
"a derived need is right" holds as often as they asked.  The result names the labelled trace,
the target and the precision/recall reached, and goes into the derived trace's header
(``needs.calibration``); the full curve is returned for the precision-recall table.

``fusion`` has seven knobs (:data:`FUSION_KNOBS`): they are set together by coordinate
search, each in turn over its values with the others held, twice round, keeping the setting
with the most recall whose precision meets the target (the most precise when none does).  Its
curve (:data:`GRIDS`) runs over one knob, ``fusion_part_ratio``, the others at their defaults.
"""

from __future__ import annotations

import dataclasses

from .needs_derivation import NeedsSettings
from .rederive import derive_events
from .score_needs import score_events

GRIDS: dict[str, tuple[str, tuple]] = {
    "bm25": ("bm25_ratio", (1.0, 0.95, 0.9, 0.85, 0.8, 0.75, 0.7, 0.65, 0.6, 0.5)),
    "overlap": ("overlap_top_k", (1, 2, 3, 4, 5)),
    "embedding": ("embedding_threshold", (0.6, 0.5, 0.4, 0.35, 0.3, 0.25, 0.2, 0.15, 0.1)),
    "fusion": ("fusion_part_ratio", (1.0, 0.8, 0.6, 0.4, 0.3, 0.2, 0.1)),
}
FUSION_KNOBS: dict[str, tuple] = {
    "fusion_bm25_b": (0.75, 0.4, 0.2),
    "fusion_bm25_k1": (1.5, 0.9),
    "fusion_answer_weight": (1.0, 2.0, 3.0, 4.0),
    "fusion_embedding_weight": (0.0, 0.25, 0.5),
    "fusion_echo_window": (0, 1, 3),
    "fusion_part_ratio": (1.0, 0.6, 0.4, 0.2, 0.1),
    "fusion_ratio": (1.0, 0.95, 0.9, 0.8),
}
ROUNDS = 2


def _scores(events: list[dict], settings: NeedsSettings) -> dict:
    derived, _ = derive_events(events, settings, keep_empty=True)
    return score_events(derived, events).overall.scores()


def better(a: dict, b: dict, target: float) -> bool:
    """Whether scores ``a`` beat ``b`` for ``target`` precision: meeting it beats missing it;
    among those meeting it, more recall (then precision); among the rest, more precision."""

    def key(s: dict) -> tuple:
        p, r = s["precision"] or 0.0, s["recall"] or 0.0
        return (1, r, p) if p >= target else (0, p, r)

    return key(a) > key(b)


def search(events: list[dict], settings: NeedsSettings, knobs: dict[str, tuple], target: float,
           rounds: int = ROUNDS, scorer=_scores) -> tuple[NeedsSettings, dict, int]:  # fmt: skip
    """Coordinate search over ``knobs`` from ``settings``: ``(best settings, its scores, the
    number of settings scored)``.  Deterministic: knobs in order, values in order, a tie keeps
    the earlier setting."""
    seen: dict[tuple, dict] = {}

    def score(s: NeedsSettings) -> dict:
        key = tuple(getattr(s, k) for k in knobs)
        if key not in seen:
            seen[key] = scorer(events, s)
        return seen[key]

    best, best_s = settings, score(settings)
    for _ in range(rounds):
        for knob, values in knobs.items():
            for v in values:
                s = dataclasses.replace(best, **{knob: v})
                if better(score(s), best_s, target):
                    best, best_s = s, score(s)
    return best, best_s, len(seen)


def curve(events: list[dict], settings: NeedsSettings) -> list[tuple[object, dict]]:
    """``(threshold, scores)`` at every value of the method's grid, strict to loose."""
    key, values = GRIDS[settings.method]
    out = []
    for v in values:
        s = dataclasses.replace(settings, **{key: v})
        derived, _ = derive_events(events, s, keep_empty=True)
        out.append((v, score_events(derived, events).overall.scores()))
    return out


def calibrate(events: list[dict], settings: NeedsSettings, target: float,
              source: str) -> tuple[NeedsSettings, list[tuple[object, dict]]]:  # fmt: skip
    """``settings`` with its threshold calibrated on ``events`` (labelled) for ``target``
    precision, and the curve.  When no value reaches the target, the most precise is kept
    and the calibration record says so."""
    if settings.method not in GRIDS:
        raise ValueError(f"needs.method={settings.method} has no threshold to calibrate "
                         f"(methods with one: {', '.join(GRIDS)})")  # fmt: skip
    if settings.method == "fusion":
        return calibrate_fusion(events, settings, target, source)
    key, _ = GRIDS[settings.method]
    points = curve(events, settings)
    ok = [(v, s) for v, s in points if s["precision"] is not None and s["precision"] >= target]
    v, s = ok[-1] if ok else max(points, key=lambda p: p[1]["precision"] or 0.0)
    met = "met" if ok else "NOT met (the most precise value kept)"
    record = (f"{source}: target precision {target:g} {met}: {key}={v} (precision "
              f"{s['precision']:.3f}, recall {s['recall']:.3f})")  # fmt: skip
    return dataclasses.replace(settings, **{key: v}, calibration=record), points


def calibrate_fusion(events: list[dict], settings: NeedsSettings, target: float,
                     source: str) -> tuple[NeedsSettings, list[tuple[object, dict]]]:  # fmt: skip
    """``fusion``'s knobs set together by :func:`search`; the curve is that of the result."""
    best, s, n = search(events, settings, FUSION_KNOBS, target)
    met = "met" if (s["precision"] or 0.0) >= target else "NOT met (the most precise kept)"
    chosen = ", ".join(f"{k}={getattr(best, k)}" for k in FUSION_KNOBS)
    record = (f"{source}: target precision {target:g} {met}: {chosen} (precision "
              f"{s['precision']:.3f}, recall {s['recall']:.3f}; {n} settings scored)")  # fmt: skip
    return dataclasses.replace(best, calibration=record), [(chosen, s)]
