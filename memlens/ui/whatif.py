"""Interventions from the page: feedback rows, and the what-if replay they allow.

Why: a person who sees that an eviction caused a miss wants to say "keep this" and see what it
would have changed.  Each intervention is one row in the feedback store (``memlens.learn.feedback``,
source ``person``), the same rows the learned scorer trains on; the what-if replay is the run
again (its own resolved config and trace) with the trace's person rows applied as pin, unpin
and annotate events (``memlens.learn.feedback.with_feedback``), and the answer is the difference of
every overall metric.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from memlens.learn.feedback import Feedback
from memlens.ui.runs import (
    RunAccessError,
    RunFileError,
    contained,
    first_line,
    read_metrics,
    run_file,
)

ACTIONS = {"pin": "keep", "unpin": "drop", "annotate": "value", "rescore": "value"}


def run_trace_info(folder: Path) -> dict:
    """The ``trace`` block of a run's metrics.json (path, sha256, ...), shape-checked."""
    trace = read_metrics(folder).get("trace", {})
    if not isinstance(trace.get("sha256"), str):
        raise RunFileError(f"{folder.name}/metrics.json: field 'trace.sha256' is missing")
    return trace


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


#: The largest ``resolved_config.yaml`` read back (a resolved config is a few kilobytes).
MAX_CONFIG_BYTES = 1 << 20


def _load_config(path: Path, where: str):
    """A run's resolved config as a DictConfig, refused when too large, not YAML, not a
    mapping, or holding an interpolation (a resolved config has none; ``${oc.env:...}`` in a
    planted one would read the server's environment)."""
    import yaml
    from omegaconf import DictConfig, OmegaConf
    from omegaconf.errors import OmegaConfBaseException

    if path.stat().st_size > MAX_CONFIG_BYTES:
        raise RunFileError(f"{where}: larger than {MAX_CONFIG_BYTES >> 10} KiB")
    try:
        cfg = OmegaConf.load(path)
    except (yaml.YAMLError, OmegaConfBaseException, UnicodeDecodeError, RecursionError) as exc:
        raise RunFileError(f"{where}: not a config ({first_line(exc, 160)})") from None
    if not isinstance(cfg, DictConfig):
        raise RunFileError(f"{where}: not a mapping of settings")
    for key, value in _strings(OmegaConf.to_container(cfg, resolve=False)):
        if "${" in value:
            raise RunFileError(f"{where}: {key} holds an interpolation ({value[:80]!r}); a "
                               "resolved config has none")  # fmt: skip
    return cfg


def _strings(node, path: str = ""):
    """(dotted key, value) of every string in a plain container."""
    if isinstance(node, dict):
        for k, v in node.items():
            yield from _strings(v, f"{path}.{k}" if path else str(k))
    elif isinstance(node, list):
        for i, v in enumerate(node):
            yield from _strings(v, f"{path}[{i}]")
    elif isinstance(node, str):
        yield path, node


def _settings(folder: Path, root: Path, roots: list[Path]):
    """The run's own settings (resolved_config.yaml, under the root), checked as data: a
    registered policy only (``memlens.config.registry``), caches in their default places, the
    files it names under ``roots``, and nothing written or tracked."""
    from omegaconf import OmegaConf
    from omegaconf.errors import OmegaConfBaseException

    from memlens.config.registry import check_config
    from memlens.config.schema import RunConfig, register_configs, resolve

    name = folder.relative_to(root).as_posix() or "."
    where = f"run {name}: resolved_config.yaml"
    cfg = _load_config(run_file(root, name, "resolved_config.yaml"), where)
    cfg.pop("hydra", None)
    cfg.pop("trace_limits", None)  # the page's own (default) limits, not the folder's
    check_config(cfg, where)
    for key, value in (("mlflow.enabled", False), ("progress", False), ("events.enabled", False),
                       ("oracle.cache_dir", None), ("embeddings.cache_dir", None)):  # fmt: skip
        OmegaConf.update(cfg, key, value, force_add=True)
    register_configs()
    try:
        settings = resolve(cfg, RunConfig)
    except (OmegaConfBaseException, ValueError, TypeError, KeyError) as exc:
        raise RunFileError(f"{where}: {first_line(exc)}") from None
    if not (isinstance(settings.policy, dict) and "_target_" in settings.policy):
        raise RunFileError(f"{where}: 'policy' must be a policy config with its _target_")
    _check_named_files(settings, roots, where)
    return settings


def _check_named_files(settings, roots: list[Path], where: str) -> None:
    """Files a run's settings name (a learned model, an embeddings corpus or model) lie under
    ``roots``; a model from an MLflow registry is refused (the page contacts no server)."""
    model = settings.policy.get("model") if isinstance(settings.policy, dict) else None
    if isinstance(model, str) and model != "default":
        if model.startswith("models:/"):
            raise RunAccessError(f"{where}: policy.model {model}: the page loads models from "
                                 "files only")  # fmt: skip
        contained(model, roots, f"{where}: policy.model")
        contained(str(Path(model).with_suffix(".json")), roots, f"{where}: policy.model sidecar")
    emb = settings.embeddings
    if emb.corpus is not None:
        contained(emb.corpus, roots, f"{where}: embeddings.corpus")
    if emb.kind == "sentence" and emb.model:
        contained(emb.model, roots, f"{where}: embeddings.model")


def what_if(folder: Path, rows: list[Feedback], root: Path | None = None,
            trace_roots: tuple[Path, ...] = (), changed_limit: int = 200) -> dict:  # fmt: skip
    """Replay the run with ``rows`` (person rows about its trace) applied; what changed.

    The answer: every metric before, after and their difference, with the difference's paired
    bootstrap interval over streams (the same replicates for both replays, as ``memlens
    compare`` pairs policies; no interval below ``stats.min_streams`` streams), and the
    requests whose outcome changed (``gained``: every need hit after but not before;
    ``lost``: the reverse), which aggregate deltas hide when a pin fixes one request and
    pushes another out.  Every file the replay reads lies under ``root`` (the page's root), the
    run's own folder, the bundled datasets or one of ``trace_roots``, symlinks resolved; the
    trace must still be the one the run replayed (its sha256)."""
    from memlens.config.store import DATA_DIR
    from memlens.learn.feedback import with_feedback
    from memlens.runs.pipeline import load_trace, run

    root = folder if root is None else root
    roots = [root, folder, DATA_DIR, *trace_roots]
    settings = _settings(folder, root, roots)
    info = run_trace_info(folder)
    path = contained(str(info.get("path", "")), roots, f"run {folder.name}: trace")
    trace = load_trace(settings, str(path))
    if trace.sha256 != info["sha256"]:
        raise RunFileError(f"run {folder.name}: the trace at {path} is not the one it replayed "
                           "(its sha256 differs from metrics.json's)")  # fmt: skip
    done_before, before = run(settings, trace)
    done_after, after = run(settings, with_feedback(trace, rows)) if rows else (done_before,
                                                                               before)  # fmt: skip
    changed = changed_requests(trace, done_before.result, done_after.result)
    return {"interventions": len(rows), "metrics": metric_deltas(before, after, settings.stats),
            "changed_total": len(changed), "gained": sum(c["gained"] for c in changed),
            "lost": sum(not c["gained"] for c in changed), "changed": changed[:changed_limit],
            "streams": len(trace.stream_names), "min_streams": settings.stats.min_streams}  # fmt: skip


def metric_deltas(before, after, stats) -> dict:
    """Each numeric overall metric: before, after, delta, and (for metrics that decompose over
    streams) the paired interval of the delta (``interval``: low, high or a ``note``)."""
    from memlens.analyze.stats import difference

    deltas = {}
    for key, b in before.overall.items():
        a = after.overall.get(key)
        if isinstance(b, (int, float)) and isinstance(a, (int, float)) and not isinstance(b, bool):
            deltas[key] = {"before": b, "after": a, "delta": a - b}
            if key in before.stream_parts and key in after.stream_parts:
                iv = difference(after.stream_parts[key], before.stream_parts[key], stats)
                deltas[key]["interval"] = iv.to_dict()
    return deltas


def request_outcomes(trace, result) -> np.ndarray:
    """Per request: did every need hit (what ``request_success`` counts)."""
    from memlens.analyze.metrics import request_hits

    return request_hits(trace, result) == np.asarray(trace.req_needs_count)


def changed_requests(trace, before, after) -> list[dict]:
    """The requests whose outcome differs between two replays of ``trace`` (feedback events
    add no request, so request k is the same request in both), in trace order."""
    a, b = request_outcomes(trace, before), request_outcomes(trace, after)
    return [{"request": int(k), "request_id": trace.req_id[k],
             "stream": trace.stream_names[int(trace.req_stream[k])],
             "event": int(trace.req_event[k]), "t": float(trace.req_t[k]), "gained": bool(b[k])}
            for k in np.flatnonzero(a != b).tolist()]  # fmt: skip
