"""Compact columns of strings and JSON objects that read like Python lists.

A trace of fifty million events cannot hold one Python ``str`` (about 60 bytes) per id and per
text and one ``dict`` (64 bytes even when empty) per meta: that alone is several hundred bytes
per event.  The trace therefore stores those columns packed:

* :class:`PackedStrings`: every string UTF-8 encoded, end to end, in one ``uint8`` buffer, with
  ``int64`` offsets (string ``i`` is ``data[offsets[i]:offsets[i + 1]]``).  The buffers may be
  ``numpy.memmap`` views of a file, so a column nobody reads (the texts, in a window or LRU
  replay) never occupies memory;
* :class:`PackedJSON`: only the non-empty objects, as JSON text, with the rows they belong to;
  every other row reads as a fresh ``{}``.

Both are read-only :class:`collections.abc.Sequence` objects: ``len``, indexing (a slice gives
a list), iteration, ``in``, ``index``, ``==`` with a list and ``+`` with a list behave as they do
on the list they replace, so code written for lists keeps working.  A string or an object is
decoded when it is read; nothing is cached.

:class:`StringsBuilder` appends strings one at a time (to memory, or to a spill file) and
freezes them into a :class:`PackedStrings`.
"""

from __future__ import annotations

import itertools
import operator
import os
import tempfile
from array import array
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

import numpy as np
import orjson

_CHUNK = 1 << 15  # strings decoded per step when iterating
_FLUSH_BYTES = 1 << 20  # a spilled column writes its buffer out at this size


def _check_offsets(offsets: np.ndarray, size: int, what: str) -> None:
    if offsets.ndim != 1 or offsets.shape[0] < 1 or offsets[0] != 0 or offsets[-1] != size:
        raise ValueError(f"{what}: offsets must start at 0 and end at the data size {size}")
    if offsets.shape[0] > 1 and bool((np.diff(offsets) < 0).any()):
        raise ValueError(f"{what}: offsets must not decrease")


class _ListLike(Sequence):
    """What a packed column shares with the list it stands for: ``+`` with a list (or a column
    of its own kind) gives a list, and ``==`` with a list compares item by item."""

    @staticmethod
    def _built(builder, values: Iterable):
        """``values`` appended one at a time to ``builder``, then built (a column's ``from_*``)."""
        for v in values:
            builder.append(v)
        return builder.build()

    def _equals_list(self, other: list) -> bool:
        return len(other) == len(self) and all(a == b for a, b in zip(self, other))

    def __add__(self, other):
        if isinstance(other, (list, type(self))):
            return list(self) + list(other)
        return NotImplemented

    def __radd__(self, other):
        if isinstance(other, list):
            return other + list(self)
        return NotImplemented


class PackedStrings(_ListLike):
    """A read-only list of strings stored as one UTF-8 buffer plus offsets (module docstring)."""

    __slots__ = ("_view", "data", "offsets")
    __hash__ = None  # like a list: equal to lists, so not hashable

    def __init__(self, data: np.ndarray | bytes, offsets: np.ndarray, check: bool = True):
        data = np.frombuffer(data, dtype=np.uint8) if isinstance(data, (bytes, bytearray)) else data
        if not isinstance(data, np.ndarray) or data.dtype != np.uint8 or data.ndim != 1:
            raise ValueError("PackedStrings: data must be a 1-d uint8 array")
        offsets = np.asarray(offsets)
        if offsets.dtype.kind not in "iu":
            raise ValueError("PackedStrings: offsets must be integers")
        offsets = offsets.astype(np.int64, copy=False)
        if check:  # reads every offset: skipped for columns built here (a map stays unread)
            _check_offsets(offsets, data.shape[0], "PackedStrings")
        elif offsets.ndim != 1 or offsets.shape[0] < 1:
            raise ValueError("PackedStrings: offsets must be a non-empty 1-d array")
        self.data, self.offsets = data, offsets
        self._view = memoryview(data) if data.shape[0] else memoryview(b"")

    @classmethod
    def from_strings(cls, values: Iterable[str]) -> PackedStrings:
        return cls._built(StringsBuilder(), values)

    # ------------------------------------------------------------------ list API
    def __len__(self) -> int:
        return self.offsets.shape[0] - 1

    def __getitem__(self, i):
        if isinstance(i, slice):
            return [self[k] for k in range(*i.indices(len(self)))]
        i = operator.index(i)
        n = len(self)
        if i < 0:
            i += n
        if not 0 <= i < n:
            raise IndexError("PackedStrings index out of range")
        b = self.offsets
        return str(self._view[b[i] : b[i + 1]], "utf-8")

    def __iter__(self) -> Iterator[str]:
        return map(bytes.decode, self.iter_bytes())  # UTF-8, bytes.decode's default

    def iter_bytes(self) -> Iterator[bytes]:
        """Each string's UTF-8 bytes, undecoded (deduplicating or hashing needs no ``str``)."""
        n = len(self)
        for lo in range(0, n, _CHUNK):
            hi = min(n, lo + _CHUNK)
            bounds = self.offsets[lo : hi + 1].tolist()
            base = bounds[0]
            raw = self._view[base : bounds[-1]].tobytes()
            for a, b in itertools.pairwise(bounds):
                yield raw[a - base : b - base]

    def __eq__(self, other: object) -> bool:
        if isinstance(other, PackedStrings):
            return bool(
                np.array_equal(self.offsets, other.offsets)
                and np.array_equal(self.data, other.data)
            )
        if isinstance(other, list):
            return self._equals_list(other)
        return NotImplemented

    def __repr__(self) -> str:
        head = ", ".join(repr(s) for s in self[:3])
        return f"PackedStrings([{head}{', ...' if len(self) > 3 else ''}], n={len(self)})"

    def __reduce__(self):  # copy and pickle as the two arrays (np.asarray loads a memmap)
        return PackedStrings, (np.asarray(self.data), np.asarray(self.offsets))

    def tolist(self) -> list[str]:
        return list(self)

    @property
    def nbytes(self) -> int:
        return int(self.data.nbytes + self.offsets.nbytes)


def pack_strings(values: Sequence[str]) -> PackedStrings:
    """``values`` as a :class:`PackedStrings` (itself if it already is one)."""
    return values if isinstance(values, PackedStrings) else PackedStrings.from_strings(values)


class StringsBuilder:
    """Appends strings one by one; :meth:`build` freezes them into a :class:`PackedStrings`.

    Bytes and offsets grow in compact buffers (no Python object per string).  Once they pass
    ``spill_bytes`` (``None``: never), both move to unnamed temporary files (in
    :func:`spill_dir`) and the built column maps those files: a column nobody reads then costs
    disk, not memory.  :meth:`get` reads back a string already appended (not once spilled).
    """

    def __init__(self, spill_bytes: int | None = None):
        self._data = bytearray()
        self._offsets = array("q", [0])
        self.spill_bytes = spill_bytes
        self._files: tuple | None = None  # (data file, offsets file) once spilled
        self.size = 0  # bytes appended
        self.n = 0  # strings appended

    def append(self, value: str) -> None:
        raw = value.encode("utf-8")
        self._data += raw
        self.size += len(raw)
        self.n += 1
        self._offsets.append(self.size)
        if self.spill_bytes is not None:
            limit = self.spill_bytes if self._files is None else _FLUSH_BYTES
            if len(self._data) + 8 * len(self._offsets) > limit:
                self._spill()

    def get(self, i: int) -> str:
        off = self._offsets
        return self._data[off[i] : off[i + 1]].decode("utf-8")

    def _spill(self) -> None:
        """Move what is buffered to the spill files (keeping the last offset as the next base)."""
        if self._files is None:  # closed in build(), once mapped
            self._files = (tempfile.TemporaryFile(dir=spill_dir()),  # noqa: SIM115
                           tempfile.TemporaryFile(dir=spill_dir()))  # noqa: SIM115  # fmt: skip
        data_file, offsets_file = self._files
        data_file.write(self._data)
        self._data = bytearray()
        last = self._offsets[-1]
        offsets_file.write(self._offsets[:-1].tobytes())
        self._offsets = array("q", [last])

    def build(self) -> PackedStrings:
        if self._files is None:
            data = (
                np.frombuffer(self._data, dtype=np.uint8) if self._data else np.zeros(0, np.uint8)
            )
            offsets = np.frombuffer(self._offsets, dtype=np.int64)
            return PackedStrings(data, offsets, check=False)
        self._spill()
        self._files[1].write(self._offsets.tobytes())  # the final offset
        data = _map(self._files[0], np.uint8, self.size)
        offsets = _map(self._files[1], np.int64, self.n + 1)
        for fh in self._files:
            fh.close()  # the maps keep the (already unlinked) files alive
        self._files = None
        return PackedStrings(data, offsets, check=False)


def _map(fh, dtype, n: int) -> np.ndarray:
    fh.flush()
    if n == 0:
        return np.zeros(0, dtype)
    return np.memmap(fh, dtype=dtype, mode="r", shape=(n,))


class PackedJSON(_ListLike):
    """A read-only list of JSON objects (dicts) that stores only the non-empty ones.

    ``rows`` (sorted ``int64``) are the rows holding an object; ``values`` their JSON texts.
    Reading any other row gives a new empty dict.
    """

    __slots__ = ("n", "rows", "values")
    __hash__ = None

    def __init__(self, n: int, rows: np.ndarray, values: PackedStrings):
        rows = np.asarray(rows)
        if rows.dtype.kind not in "iu" or rows.ndim != 1 or rows.shape[0] != len(values):
            raise ValueError("PackedJSON: rows must be integers, one per value")
        rows = rows.astype(np.int64, copy=False)
        if rows.shape[0] and (rows[0] < 0 or rows[-1] >= n or bool((np.diff(rows) <= 0).any())):
            raise ValueError("PackedJSON: rows must be increasing and within the column")
        self.n, self.rows, self.values = int(n), rows, values

    @classmethod
    def from_dicts(cls, values: Iterable[dict]) -> PackedJSON:
        return cls._built(JSONBuilder(), values)

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i):
        if isinstance(i, slice):
            return [self[k] for k in range(*i.indices(self.n))]
        i = operator.index(i)
        if i < 0:
            i += self.n
        if not 0 <= i < self.n:
            raise IndexError("PackedJSON index out of range")
        k = int(np.searchsorted(self.rows, i))
        if k < self.rows.shape[0] and self.rows[k] == i:
            return orjson.loads(self.values[k])
        return {}

    def __iter__(self) -> Iterator[dict]:
        rows = self.rows.tolist()
        k = 0
        values = iter(self.values)
        for i in range(self.n):
            if k < len(rows) and rows[k] == i:
                k += 1
                yield orjson.loads(next(values))
            else:
                yield {}

    def __eq__(self, other: object) -> bool:
        if isinstance(other, PackedJSON):
            return (self.n == other.n and np.array_equal(self.rows, other.rows)
                    and self.values == other.values)  # fmt: skip
        if isinstance(other, list):
            return self._equals_list(other)
        return NotImplemented

    def __repr__(self) -> str:
        return f"PackedJSON(n={self.n}, non_empty={self.rows.shape[0]})"

    def __reduce__(self):
        return PackedJSON, (self.n, np.asarray(self.rows), self.values)

    def tolist(self) -> list[dict]:
        return list(self)


def pack_json(values: Sequence[dict]) -> PackedJSON:
    """``values`` as a :class:`PackedJSON` (itself if it already is one)."""
    return values if isinstance(values, PackedJSON) else PackedJSON.from_dicts(values)


class JSONBuilder:
    """Appends objects (dicts, or their JSON text) row by row; empty ones cost nothing."""

    def __init__(self, spill_bytes: int | None = None):
        self.n = 0
        self.rows = array("q")
        self.values = StringsBuilder(spill_bytes)

    def append(self, value: dict[str, Any] | None) -> None:
        if value:
            self.append_json(orjson.dumps(value).decode("utf-8"))
        else:
            self.n += 1

    def append_json(self, text: str) -> None:
        self.rows.append(self.n)
        self.values.append(text)
        self.n += 1

    def build(self) -> PackedJSON:
        return PackedJSON(self.n, np.frombuffer(self.rows, dtype=np.int64), self.values.build())


def spill_dir() -> str | None:
    """Where spilled columns go: ``$MEMLENS_SPILL_DIR`` if set, else the temporary folder."""
    return os.environ.get("MEMLENS_SPILL_DIR") or None


# ------------------------------------------------------------------ gathered views
def _arrow_strings(values: Sequence[str], lo: int = 0, hi: int | None = None):
    """``values[lo:hi]`` as an Arrow array of type ``large_string`` (no copy when packed)."""
    import pyarrow as pa

    hi = len(values) if hi is None else hi
    if not isinstance(values, PackedStrings):
        return pa.array(list(values[lo:hi]), type=pa.large_string())
    off = values.offsets[lo : hi + 1]
    base = int(off[0]) if off.shape[0] else 0
    end = int(off[-1]) if off.shape[0] else 0
    return pa.LargeStringArray.from_buffers(
        hi - lo, pa.py_buffer(np.ascontiguousarray(off - base if base else off)),
        pa.py_buffer(np.ascontiguousarray(values.data[base:end])),
    )  # fmt: skip


def _small(array):
    """A ``large_string`` Arrow array as ``string`` (what ``pyarrow`` makes of Python strs)."""
    import pyarrow as pa

    return array.cast(pa.string()) if array.nbytes < 2**31 - 1 else array


class TakenStrings(Sequence):
    """``values[index[k]]`` for every ``k``: a gathered string column, never materialised.

    Reads like a list of strings; :meth:`arrow` gives rows ``lo:hi`` as an Arrow ``string``
    array (gathered in C++), which is how the Parquet writers take it a row group at a time.
    """

    __hash__ = None

    def __init__(self, values: Sequence[str], index: np.ndarray):
        self.values, self.index = values, np.asarray(index)
        self._source = None  # the values as one Arrow array, made on first use

    def __len__(self) -> int:
        return int(self.index.shape[0])

    def __getitem__(self, k):
        if isinstance(k, slice):
            return [self.values[i] for i in self.index[k].tolist()]
        return self.values[int(self.index[k])]

    def __iter__(self) -> Iterator[str]:
        for lo in range(0, len(self), _CHUNK):
            yield from self[lo : lo + _CHUNK]

    def __eq__(self, other: object) -> bool:
        if isinstance(other, (list, TakenStrings)):
            return len(other) == len(self) and all(a == b for a, b in zip(self, other))
        return NotImplemented

    def tolist(self) -> list[str]:
        return list(self)

    def arrow(self, lo: int = 0, hi: int | None = None):
        return self.gather(self.index[lo:hi])

    def coded(self, lo: int = 0, hi: int | None = None):
        """Rows ``lo:hi`` as an Arrow dictionary array over all of ``values`` (the codes are
        ``index``; nothing gathered): a column of a few names, e.g. the tiers of the move log,
        which the Parquet writer then stores as its dictionary without hashing a string per
        row (``memlens.runs.writers.write_parquet``)."""
        import pyarrow as pa

        codes = pa.array(self.index[lo:hi].astype(np.int32, copy=False))
        return pa.DictionaryArray.from_arrays(codes, self._arrow_values())

    def _arrow_values(self):
        """The values as one Arrow array, made once (no copy when packed)."""
        if self._source is None:
            self._source = _arrow_strings(self.values)
        return self._source

    def gather(self, index: np.ndarray):
        """``values[index]`` as an Arrow ``string`` array (gathered in C++)."""
        import pyarrow as pa
        import pyarrow.compute as pc

        return _small(pc.take(self._arrow_values(), pa.array(index)))


class StringLists(Sequence):
    """Row ``r`` is the list ``values[index[j]]`` for ``j`` in ``ptr[r]:ptr[r + 1]`` (CSR),
    keeping only the ``j`` where ``bool(keep[j]) == keep_if`` when ``keep`` is given: per-request
    id lists (all needs, hits, misses) without a Python list per request or a copy of the
    index.  :meth:`arrow` gives Arrow ``list<string>`` rows."""

    __hash__ = None

    def __init__(self, values: Sequence[str], index: np.ndarray, ptr: np.ndarray,
                 keep: np.ndarray | None = None, keep_if: bool = True):  # fmt: skip
        self.values, self.index, self.ptr = values, np.asarray(index), np.asarray(ptr)
        self.keep, self.keep_if = keep, keep_if
        self._taken = TakenStrings(values, self.index)

    def __len__(self) -> int:
        return int(self.ptr.shape[0]) - 1

    def _kept(self, a: int, b: int) -> np.ndarray | None:
        """Which of the entries ``a:b`` are kept (None: all)."""
        if self.keep is None:
            return None
        kept = self.keep[a:b].astype(bool)
        return kept if self.keep_if else ~kept

    def __getitem__(self, r):
        if isinstance(r, slice):
            return [self[k] for k in range(*r.indices(len(self)))]
        r = operator.index(r)
        r += len(self) if r < 0 else 0
        if not 0 <= r < len(self):
            raise IndexError("StringLists index out of range")
        a, b = int(self.ptr[r]), int(self.ptr[r + 1])
        index, kept = self.index[a:b], self._kept(a, b)
        return [self.values[i] for i in (index if kept is None else index[kept]).tolist()]

    def __eq__(self, other: object) -> bool:
        if isinstance(other, (list, StringLists)):
            return len(other) == len(self) and all(a == b for a, b in zip(self, other))
        return NotImplemented

    def tolist(self) -> list[list[str]]:
        return list(self)

    def arrow(self, lo: int = 0, hi: int | None = None):
        import pyarrow as pa

        hi = len(self) if hi is None else min(hi, len(self))
        ptr = self.ptr[lo : hi + 1]
        a, b = int(ptr[0]), int(ptr[-1])
        kept = self._kept(a, b)
        if kept is None:
            flat, offsets = self._taken.gather(self.index[a:b]), ptr - a
        else:
            flat = self._taken.gather(self.index[a:b][kept])
            offsets = np.concatenate([[0], np.cumsum(kept)])[ptr - a]
        return pa.ListArray.from_arrays(pa.array(offsets.astype(np.int32)), flat)


def arrow_rows(column, lo: int, hi: int):
    """Rows ``lo:hi`` of a table column (numpy array, list, or a column of this module) as an
    Arrow array of the type ``pyarrow.table`` would give the whole column."""
    import pyarrow as pa

    if isinstance(column, PackedStrings):
        return _small(_arrow_strings(column, lo, min(hi, len(column))))
    if hasattr(column, "arrow"):
        return column.arrow(lo, min(hi, len(column)))
    if isinstance(column, list):
        return pa.array(column[lo:hi])
    return pa.array(np.asarray(column)[lo:hi])
