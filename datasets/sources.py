"""Shared plumbing for converters of third-party data: reading sources and naming what is wrong.

A converter is run on files nobody on the team wrote; when one of them is malformed the person
running it needs the file and the exact place (``[3].conversation.session_2[5].dia_id``), not a
``KeyError``.  Converters therefore read fields only through :func:`need`, which raises a
:class:`SourceError` carrying that path; the CLI turns it into exit code 2.  Converters build and
validate every event before anything is written, and the writer is atomic, so a failed
conversion leaves no output behind.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import orjson


class SourceError(ValueError):
    """A source file is malformed.  ``str(err)`` is ``file: field: message``."""

    def __init__(self, path: str | os.PathLike, field: str, message: str):
        self.path, self.field, self.message = str(path), field, message
        super().__init__(f"{path}: {field}: {message}" if field else f"{path}: {message}")


def load_json(path: str | os.PathLike):
    """Parse a JSON source file, raising :class:`SourceError` (with position) if it is not JSON."""
    path = Path(path)
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise SourceError(path, "", f"cannot read source: {exc.strerror or exc}") from None
    try:
        return orjson.loads(data)
    except orjson.JSONDecodeError as exc:
        raise SourceError(path, "", f"malformed JSON: {exc}") from None


def load_json_list(path: str | os.PathLike, what: str) -> list:
    """A JSON source whose root must be a list of ``what`` (conversations, trajectories)."""
    data = load_json(path)
    if not isinstance(data, list):
        raise SourceError(
            Path(path), "<root>", f"expected a list of {what}, got {type(data).__name__}"
        )
    return data


def sha256_file(path: str | os.PathLike) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


_KIND_NAMES = {str: "a string", list: "a list", dict: "an object", int: "an integer"}


def need(path, obj, key, where: str, kind: type | tuple[type, ...] | None = None):
    """``obj[key]``, or a :class:`SourceError` naming ``where.key`` if missing or of wrong type."""
    field = f"{where}.{key}" if where else str(key)
    if not isinstance(obj, dict):
        raise SourceError(path, where or "<root>", f"expected an object, got {type(obj).__name__}")
    if key not in obj:
        raise SourceError(path, field, "missing field")
    value = obj[key]
    if kind is not None and (not isinstance(value, kind) or isinstance(value, bool)):
        kinds = kind if isinstance(kind, tuple) else (kind,)
        expected = " or ".join(_KIND_NAMES.get(k, k.__name__) for k in kinds)
        raise SourceError(path, field, f"expected {expected}, got {type(value).__name__}")
    return value
