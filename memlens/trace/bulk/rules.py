"""The whole-trace rules of the bulk parser, compiled: event times, and ids.

The bulk parser (``memlens.trace.bulk.parse``) checks the rules that span events once, on arrays,
after the last block.  Two are single passes best compiled:

* time: within a stream a given time never goes backwards, and a missing one (NaN: JSON has
  none) takes its stream's last given time, or 0 before any, exactly as the exact parser's
  ``_Builder._time`` does event by event (the numpy version sorted the events by stream);
* ids: no id defined twice, and each need or target the id of a write (:func:`resolve_ids`,
  one hash table, in place of Arrow's ``dictionary_encode``: the longest of the final checks,
  and pyarrow's import, are gone from the first load).
"""

from __future__ import annotations

import numba
import numpy as np


@numba.njit(cache=True, nogil=True, _nrt=False)
def _fill_times(t, stream, last, out):
    for e in range(t.shape[0]):
        s = stream[e]
        x = t[e]
        if np.isnan(x):
            out[e] = last[s] if last[s] > -np.inf else 0.0
        elif x < last[s]:
            return False
        else:
            last[s] = x
            out[e] = x
    return True


def event_times(t: np.ndarray, stream: np.ndarray, n_streams: int) -> np.ndarray | None:
    """Every event's time (``t``: float64, NaN where not given; ``stream``: each event's
    stream index), or ``None`` if a given time goes backwards within its stream."""
    out = np.empty(t.shape[0], np.float64)
    last = np.full(max(1, n_streams), -np.inf)
    ok = _fill_times(np.ascontiguousarray(t, np.float64), np.ascontiguousarray(stream, np.int32),
                     last, out)  # fmt: skip
    return out if ok else None


# ------------------------------------------------------------------------------ ids
_FNV_BASIS, _FNV_PRIME = -3750763034362895579, 1099511628211  # FNV-1a (as int64: products wrap)


@numba.njit(cache=True, nogil=True, _nrt=False, inline="always")
def _hash(data, start, stop):
    h = np.int64(_FNV_BASIS)
    for k in range(start, stop):
        h = (h ^ data[k]) * _FNV_PRIME
    return h


@numba.njit(cache=True, nogil=True, _nrt=False, inline="always")
def _equal(a, a0, a1, b, b0, b1):
    if a1 - a0 != b1 - b0:
        return False
    for k in range(a1 - a0):
        if a[a0 + k] != b[b0 + k]:
            return False
    return True


@numba.njit(cache=True, nogil=True, _nrt=False)
def _find(data, off, j, item_data, item_off, req_data, req_off, table, hashes, h):
    """The slot of id ``data[off[j]:off[j + 1]]`` (hash ``h``) in ``table``: the slot that
    holds it, or the empty slot where it would go."""
    n_items = item_off.shape[0] - 1
    mask = table.shape[0] - 1
    slot = h & mask
    while table[slot] >= 0:
        k = table[slot]
        if hashes[k] == h:
            if k < n_items:
                same = _equal(data, off[j], off[j + 1], item_data, item_off[k], item_off[k + 1])
            else:
                r = k - n_items
                same = _equal(data, off[j], off[j + 1], req_data, req_off[r], req_off[r + 1])
            if same:
                return slot
        slot = (slot + 1) & mask
    return slot


@numba.njit(cache=True, nogil=True, _nrt=False)
def _insert_ids(item_data, item_off, req_data, req_off, table, hashes):
    """Put every id (writes' then requests') in ``table``; False at an id seen before."""
    n_items = item_off.shape[0] - 1
    for k in range(n_items + req_off.shape[0] - 1):
        data, off, j = (item_data, item_off, k) if k < n_items else (req_data, req_off, k - n_items)
        h = _hash(data, off[j], off[j + 1])
        slot = _find(data, off, j, item_data, item_off, req_data, req_off, table, hashes, h)
        if table[slot] >= 0:
            return False
        table[slot] = k
        hashes[k] = h
    return True


@numba.njit(cache=True, nogil=True, _nrt=False)
def _look_up(data, off, item_data, item_off, req_data, req_off, table, hashes, out):
    """Each wanted id's item; False at one that is no write's id."""
    n_items = item_off.shape[0] - 1
    for j in range(off.shape[0] - 1):
        h = _hash(data, off[j], off[j + 1])
        k = table[_find(data, off, j, item_data, item_off, req_data, req_off, table, hashes, h)]
        if k < 0 or k >= n_items:
            return False
        out[j] = k
    return True


def resolve_ids(items: tuple[np.ndarray, np.ndarray], requests: tuple[np.ndarray, np.ndarray],
                wanted: list[tuple[np.ndarray, np.ndarray]]) -> list[np.ndarray] | None:  # fmt: skip
    """The item index of each id of each of ``wanted``, ``None`` if some id is defined twice
    (by writes and requests) or a wanted one is no write's.  Each argument is a packed string
    column: its UTF-8 bytes (uint8) and offsets (int64).  One open-addressing hash table over
    every id (FNV-1a, stored hashes compared before the bytes)."""
    (item_data, item_off), (req_data, req_off) = items, requests
    n = item_off.shape[0] + req_off.shape[0] - 2
    table = np.full(1 << max(4, (2 * n).bit_length()), -1, np.int32)
    hashes = np.empty(max(1, n), np.int64)
    if not _insert_ids(item_data, item_off, req_data, req_off, table, hashes):
        return None
    out = []
    for data, off in wanted:
        found = np.empty(off.shape[0] - 1, np.int64)
        if not _look_up(data, off, item_data, item_off, req_data, req_off, table, hashes, found):
            return None
        out.append(found)
    return out
