"""Atomic file output: write to a temporary file beside the target, then rename.

Every result MemLens writes (traces, metrics, tables) goes through here so that an interrupted
or failed run never leaves a truncated file where a complete one was, and never half-replaces
an earlier result.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import orjson


@contextlib.contextmanager
def atomic_path(path: str | os.PathLike) -> Iterator[Path]:
    """Yield a temporary path in the target's directory; rename it onto ``path`` on success."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.close(fd)
    umask = os.umask(0)
    os.umask(umask)
    os.chmod(tmp, 0o666 & ~umask)  # mkstemp creates 0600; results should be readable like any file
    try:
        yield Path(tmp)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


def write_text(path: str | os.PathLike, text: str) -> None:
    with atomic_path(path) as tmp:
        tmp.write_text(text, encoding="utf-8")


def write_json(path: str | os.PathLike, obj, flat_lists: bool = False) -> None:
    """``obj`` as indented JSON.  ``flat_lists``: every list of plain values on one line
    (:func:`dumps_flat_lists`): the same document, written many times faster when it holds
    long number lists (a run's per-stream parts over thousands of streams)."""
    text = dumps_flat_lists(obj) if flat_lists else json.dumps(obj, indent=2, allow_nan=False)
    write_text(path, text + "\n")


_FLAT = json.JSONEncoder(allow_nan=False, separators=(", ", ": "))
_SCALARS = (str, int, float, bool, type(None))


def dumps_flat_lists(obj, level: int = 0) -> str:
    """``json.dumps(obj, indent=2)`` but with each list of scalars on one line (a list whose
    first item is a scalar), and each nested dictionary of scalars on one line too (a stream's
    row of metrics: thousands of them in a run over many streams; top-level sections such as
    ``overall`` keep a line per key, for people reading the file).

    With ``indent`` set, Python's ``json`` encodes in pure Python, a line per number: on a
    compare over 5,800 streams, 100 MB and most of the command's writing time (issue 34).  Lists
    of scalars go through a C encoder instead (:func:`_scalar_list`); dictionaries and lists of
    containers keep their indentation.  Every number reads back as the number ``json.dumps``
    writes, so the parsed document is identical."""
    pad, inner = "  " * level, "  " * (level + 1)
    if isinstance(obj, dict):
        if not obj:
            return "{}"
        if level >= 1 and (rows := _rows_text(obj, level)) is not None:
            return rows
        if level >= 2 and all(isinstance(v, _SCALARS) for v in obj.values()):
            return _FLAT.encode(obj)
        items = [f"{inner}{json.dumps(str(k))}: {dumps_flat_lists(v, level + 1)}"
                 for k, v in obj.items()]  # fmt: skip
        return "{\n" + ",\n".join(items) + f"\n{pad}}}"
    if _is_vector(obj):  # a list of numbers, as ``tolist`` gives
        return _number_array(obj)
    if isinstance(obj, (list, tuple)):
        if not obj or isinstance(obj[0], _SCALARS):  # (a container further on: one line too)
            return _scalar_list(obj)
        items = [f"{inner}{dumps_flat_lists(v, level + 1)}" for v in obj]
        return "[\n" + ",\n".join(items) + f"\n{pad}]"
    return _FLAT.encode(obj)


def _rows_text(obj: dict, level: int) -> str | None:
    """What :func:`dumps_flat_lists` writes for ``obj``, through one orjson call, where ``obj``
    is a row (level 2 and deeper: a dictionary of scalars, on one line) or a table of rows
    (level 1 and deeper: a dictionary whose values are all rows, a line each, such as a run's
    5,800 streams: most of a ``simulate``'s metrics.json, five times faster this way).

    orjson writes compactly; its text is spaced as ``_FLAT`` spaces (``":`` and ``,"``) and
    broken into lines between rows (``}, "``).  A string holding those marks would be broken
    too, so the text is read back and kept only if it is the same document; None (``json``
    writes it) for anything else: a list or deeper value, NaN (orjson writes null), a type
    orjson refuses, or a character beyond ASCII (``json`` escapes it, orjson does not)."""
    row = level >= 2 and not any(isinstance(v, dict) for v in obj.values())
    if not row and (level < 1 or not all(type(v) is dict for v in obj.values())):
        return None
    try:
        raw = orjson.dumps(obj)
    except TypeError:  # a non-str key, a numpy scalar, an integer beyond 64 bits
        return None
    if b"[" in raw or not raw.isascii() or b"\x7f" in raw:  # json escapes DEL, orjson not
        return None
    if raw.count(b"{") != (1 if row else 1 + len(obj)):
        return None
    text = raw.replace(b'":', b'": ').replace(b',"', b', "')
    if not row:
        inner = b"\n" + b"  " * (level + 1)
        rows = text[1:-1].replace(b'}, "', b"}," + inner + b'"')
        text = b"{" + inner + rows + b"\n" + b"  " * level + b"}"
    return text.decode() if orjson.loads(text) == obj else None


def _is_vector(obj) -> bool:
    """Whether ``obj`` is a 1-d numpy array (numpy is not imported for it: this module is)."""
    numpy = sys.modules.get("numpy")
    return numpy is not None and isinstance(obj, numpy.ndarray) and obj.ndim == 1


def _number_array(values) -> str:
    """A 1-d array as :func:`_scalar_list` writes its ``tolist()``: orjson reads the array's
    own buffer (two and a half times faster, no Python float made per number), and writes
    each number as it writes the Python number (both shortest round-trip forms); any other
    array, or one holding NaN or infinity, goes through ``tolist``."""
    kind, size = values.dtype.kind, values.dtype.itemsize
    if (kind == "f" and size == 8) or kind in "iub":  # float32: orjson writes its own digits
        try:
            raw = orjson.dumps(values, option=orjson.OPT_SERIALIZE_NUMPY)
        except TypeError:  # a dtype orjson does not take (orjson.JSONEncodeError)
            raw = b'"'
        if b"null" not in raw and b'"' not in raw:
            return raw.replace(b",", b", ").decode()
    return _scalar_list(values.tolist())


def _scalar_list(items: list | tuple) -> str:
    """A list on one line, as ``_FLAT`` writes it.  A list of numbers (the per-stream parts:
    7 million of them in a compare over 5,800 streams) goes through orjson, five times faster
    than ``json``'s C encoder at writing floats; both write a float's shortest round-trip
    form (orjson ``0.00001`` where ``json`` writes ``1e-05``: the same number read back).
    Anything orjson would write differently from ``_FLAT`` falls back to it: a string (orjson
    leaves non-ASCII unescaped), ``None``, and NaN or infinity (orjson writes ``null`` for
    them; ``_FLAT`` refuses them, as before), or a type orjson refuses."""
    try:
        raw = orjson.dumps(items)
    except TypeError:  # e.g. an integer beyond 64 bits, numpy scalars (orjson.JSONEncodeError)
        return _FLAT.encode(items)
    if b'"' in raw or b"null" in raw:
        return _FLAT.encode(items)
    return raw.replace(b",", b", ").decode()
