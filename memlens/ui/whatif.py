"""Interventions from the page: feedback rows, and the what-if replay they allow.

Why: a person who sees that an eviction caused a miss wants to say "keep this" and see what it
would have changed.  Each intervention is one row in the feedback store (``memlens.learn.feedback``,
source ``person``), the same rows the learned scorer trains on; the what-if replay is the run
again (its own resolved config and trace) with the trace's person rows applied as pin, unpin
and annotate events (``memlens.learn.feedback.with_feedback``), and the answer is the difference of
every overall metric.
"""

from __future__ import annotations

import json
from pathlib import Path

from memlens.learn.feedback import Feedback, FeedbackStore

ACTIONS = {"pin": "keep", "unpin": "drop", "annotate": "value", "rescore": "value"}


def run_trace_info(folder: Path) -> dict:
    with open(folder / "metrics.json", encoding="utf-8") as f:
        return json.load(f)["trace"]


def feedback_row(folder: Path, where: dict, body: dict, author: str) -> Feedback:
    """The feedback row of one intervention (``where``: the item's stream, event and time, from
    the run's event log).  ``body``: ``item_id``, ``action`` (pin, unpin, annotate, rescore),
    optional ``event`` (default: the item's write), ``value`` and ``note``."""
    action = body.get("action")
    if action not in ACTIONS:
        raise ValueError(f"action must be one of {', '.join(ACTIONS)}, got {action!r}")
    value = body.get("value")
    if action == "rescore" and value is None:
        raise ValueError("rescore needs a value in [0, 1]")
    if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float))):
        raise ValueError(f"value must be a number in [0, 1], got {value!r}")
    note = body.get("note")
    if note is not None and not isinstance(note, str):
        raise ValueError("note must be text")
    if action in ("pin", "unpin"):
        value = None
    elif action == "annotate" and value is None and not note:
        raise ValueError("annotate needs a value, a note or both")
    return Feedback(source="person", trace_sha256=run_trace_info(folder)["sha256"],
                    stream=where["stream"], event_index=int(where["event"]), t=float(where["t"]),
                    item_id=str(body["item_id"]), action=ACTIONS[action],
                    value=None if value is None else float(value), note=note or None,
                    author=author)  # fmt: skip


def _settings(folder: Path):
    """The run's own settings (resolved_config.yaml), with nothing written or tracked."""
    from omegaconf import OmegaConf

    from memlens.config.schema import RunConfig, register_configs, resolve

    register_configs()
    cfg = OmegaConf.load(folder / "resolved_config.yaml")
    cfg.pop("hydra", None)
    cfg.mlflow.enabled = False
    cfg.progress = False
    cfg.events.enabled = False
    return resolve(cfg, RunConfig)


def what_if(folder: Path, store: FeedbackStore) -> dict:
    """Replay the run with the store's person rows about its trace; metric deltas."""
    from memlens.learn.feedback import with_feedback
    from memlens.runs.pipeline import load_trace, run

    settings = _settings(folder)
    trace = load_trace(settings, run_trace_info(folder)["path"])
    rows = store.rows(trace_sha256=trace.sha256, source="person")
    _, before = run(settings, trace)
    _, after = run(settings, with_feedback(trace, rows)) if rows else (None, before)
    deltas = {}
    for key, b in before.overall.items():
        a = after.overall.get(key)
        if isinstance(b, (int, float)) and isinstance(a, (int, float)) and not isinstance(b, bool):
            deltas[key] = {"before": b, "after": a, "delta": a - b}
    return {"interventions": len(rows), "metrics": deltas}
