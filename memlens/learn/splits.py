"""A user's own train/test split for ``memlens train``: a YAML file, or one trace by stream.

Why: the bundled splits (``conf/split/``) cover the bundled datasets; someone training on their
own logs has a trace and, perhaps, an opinion about which streams are held out.  Two forms:

* ``memlens train split=path/to/split.yaml``: a file with the keys of a bundled split (``name``,
  ``description``, ``train``, ``test``; each entry a ``trace`` or ``archetype`` with optional
  ``streams`` or ``tasks``); a relative ``trace`` is read from beside the file;
* ``memlens train split=path/to/trace.jsonl``: that trace split by stream, a seeded
  ``split.test_share`` of its streams (at least one, never all) testing.

The command rewrites the first into ``split=file split.file=...`` and the second into
``split=auto split.auto_trace=...`` (``conf/split/file.yaml``, ``auto.yaml``), so Hydra's
grammar and ``--cfg job`` see ordinary settings.  A bad file is an error naming it, the entry
and the field, before any work starts.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

SPLIT_SUFFIXES = (".yaml", ".yml")
TRACE_SUFFIXES = (".jsonl", ".jsonl.gz", ".json", ".parquet")
ENTRY_KEYS = ("trace", "archetype", "seed", "generated_streams", "events_per_stream", "streams",
              "tasks")  # fmt: skip


def split_argument(argv: list[str]) -> list[str]:
    """``split=<a YAML file>`` -> ``split=file split.file=<it>`` (a missing one too: reading
    it says so, naming it); ``split=<a trace file>`` ->
    ``split=auto split.auto_trace=<it>``; anything else unchanged (a bundled split's name)."""
    out = []
    for arg in argv:
        key, _, value = arg.partition("=")
        path = Path(value)
        if key == "split" and value.endswith(SPLIT_SUFFIXES):  # no bundled name ends so
            out += ["split=file", f"split.file={path.resolve() if path.is_file() else value}"]
        elif key == "split" and value.endswith(TRACE_SUFFIXES) and path.is_file():
            out += ["split=auto", f"split.auto_trace={path.resolve()}"]
        else:
            out.append(arg)
    return out


def read_split_file(path: str, entry_type):
    """(name, description, train, test) of a split file, each entry an ``entry_type``
    (``memlens.learn.train.TraceSel``, passed in: that module imports this one); a
    :class:`ValueError` naming the file, the entry and the field otherwise."""
    import yaml
    from omegaconf import OmegaConf

    where = Path(path)
    try:
        raw = OmegaConf.to_container(OmegaConf.load(where), resolve=True)
    except (OSError, yaml.YAMLError, ValueError) as exc:
        raise ValueError(
            f"split file {where}: cannot be read ({str(exc).splitlines()[0]})"
        ) from None
    if not isinstance(raw, dict):
        raise ValueError(f"split file {where}: not a mapping (keys: name, train, test)")
    unknown = sorted(set(raw) - {"name", "description", "train", "test"})
    if unknown:
        raise ValueError(f"split file {where}: unknown key {unknown[0]!r} (name, description, "
                         "train, test)")  # fmt: skip
    sides = {}
    for side in ("train", "test"):
        entries = raw.get(side) or []
        if not isinstance(entries, list):
            raise ValueError(f"split file {where}: {side} must be a list of entries")
        sides[side] = [_entry(where, side, k, e, entry_type) for k, e in enumerate(entries)]
    if not sides["train"]:
        raise ValueError(f"split file {where}: train lists no trace")
    return (
        str(raw.get("name") or where.stem),
        str(raw.get("description") or ""),
        sides["train"],
        sides["test"],
    )


def _entry(where: Path, side: str, k: int, entry, cls):
    at = f"split file {where}: {side}[{k}]"
    if not isinstance(entry, dict):
        raise ValueError(f"{at}: an entry is a mapping (trace: ..., streams: [...])")
    unknown = sorted(set(entry) - set(ENTRY_KEYS))
    if unknown:
        raise ValueError(f"{at}: unknown field {unknown[0]!r} ({', '.join(ENTRY_KEYS)})")
    entry = dict(entry)
    if isinstance(entry.get("trace"), str):
        trace = Path(entry["trace"])
        entry["trace"] = str(trace if trace.is_absolute() else (where.parent / trace).resolve())
        if not Path(entry["trace"]).is_file():
            raise ValueError(f"{at}: field 'trace': no such file {entry['trace']}")
    for key in ("streams", "tasks"):
        if key in entry and not (isinstance(entry[key], list) and all(isinstance(s, str)
                                                                      for s in entry[key])):  # fmt: skip
            raise ValueError(f"{at}: field {key!r} must be a list of names")
    try:
        return cls(**entry)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"{at}: {exc}") from None


def split_by_stream(trace_path: str, test_share: float, seed: int, entry_type):
    """(train, test) entries (``entry_type``) of one trace: a seeded ``test_share`` of its
    streams tests."""
    from memlens.trace.cache import load_trace_cached

    if not 0 < test_share < 1:
        raise ValueError(f"split.test_share must be between 0 and 1, got {test_share}")
    if not Path(trace_path).is_file():
        raise ValueError(f"split.auto_trace: no such file {trace_path}")
    names = list(load_trace_cached(trace_path).stream_names)
    if len(names) < 2:
        raise ValueError(f"split.auto_trace {trace_path}: one stream only; a split by stream "
                         "needs two or more")  # fmt: skip
    n_test = min(max(int(round(test_share * len(names))), 1), len(names) - 1)
    held = set(np.random.default_rng(seed).permutation(len(names))[:n_test].tolist())
    test = [n for k, n in enumerate(names) if k in held]
    train = [n for k, n in enumerate(names) if k not in held]
    return ([entry_type(trace=trace_path, streams=train)],
            [entry_type(trace=trace_path, streams=test)])  # fmt: skip
