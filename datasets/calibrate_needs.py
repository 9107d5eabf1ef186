"""A derivation method's threshold set by calibration on labelled needs, for a target precision.

A threshold tuned by eye to one dataset is a threshold tuned to that dataset.  Here each method
has one threshold (its *grid*, strict to loose), and :func:`calibrate` derives the needs of a
labelled trace (human evidence, or LongMemEval's ``has_answer`` turns) at every value and keeps
the loosest whose precision still meets the target: the most recall a user can have while
"a derived need is right" holds as often as they asked.  The result names the labelled trace,
the target and the precision/recall reached, and goes into the derived trace's header
(``needs.calibration``); the full curve is returned for the precision-recall table.
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
}


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
    key, _ = GRIDS[settings.method]
    points = curve(events, settings)
    ok = [(v, s) for v, s in points if s["precision"] is not None and s["precision"] >= target]
    v, s = ok[-1] if ok else max(points, key=lambda p: p[1]["precision"] or 0.0)
    met = "met" if ok else "NOT met (the most precise value kept)"
    record = (f"{source}: target precision {target:g} {met}: {key}={v} (precision "
              f"{s['precision']:.3f}, recall {s['recall']:.3f})")  # fmt: skip
    return dataclasses.replace(settings, **{key: v}, calibration=record), points
