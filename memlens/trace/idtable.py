"""A string-id -> integer table for the trace parser, without a Python object per id.

Validating a trace means resolving every ``needs`` entry and every pin target to an earlier
write, and refusing a duplicate id, in file order.  A ``dict`` of every id does that, but costs
about 100 bytes per id (the key ``str``, the value ``int``, the slot), which for tens of millions
of events is gigabytes.  This table keeps two arrays of slots, 8 bytes per slot (11 to 21 bytes
per id): each used slot holds 32 bits of the id's hash and its value (``int32``); the id strings
themselves are not stored here but read back through ``key_of(value)`` (the parser's packed id
column) to confirm a match, so ids whose hashes collide are still told apart.

Open addressing with linear probing and no wrap-around (a slot run may go past the nominal
capacity into a tail; the last slot is always empty, so every probe ends).  When the table is
three quarters full it is rebuilt at twice the capacity in one vectorised step: sorted by home
slot, the k-th entry lands at ``max(home_k, position_{k-1} + 1)``, a running maximum.

Hashes are Python's ``hash(str)``: randomised per process, which is fine for a table that lives
only while one file is parsed.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

_TAIL = 64  # spare slots past the capacity for runs that cross its end
_MAX_LOAD = 0.75
_MAX_VALUE = 2**31 - 1


class IdTable:
    """Maps id strings to ints in ``0 .. 2**31 - 2`` (see the module docstring)."""

    def __init__(self, key_of: Callable[[int], str], capacity: int = 1 << 12):
        self.key_of = key_of
        self.n = 0
        self._alloc(capacity, np.zeros(0, np.uint32), np.zeros(0, np.int32))

    def _alloc(self, capacity: int, hashes: np.ndarray, values: np.ndarray) -> None:
        """Lay ``hashes``/``values`` out in fresh slot arrays of ``capacity`` (+ tail)."""
        mask = capacity - 1
        home = (hashes & mask).astype(np.int64)
        order = np.argsort(home, kind="stable")
        k = np.arange(order.shape[0], dtype=np.int64)
        pos = k + np.maximum.accumulate(home[order] - k) if order.shape[0] else k
        del home, k
        size = max(capacity, int(pos[-1]) + 1 if pos.shape[0] else 0) + _TAIL
        slot_h = np.zeros(size, np.uint32)
        slot_v = np.full(size, -1, np.int32)
        slot_h[pos] = hashes[order]
        slot_v[pos] = values[order]
        self.capacity, self._mask = capacity, mask
        self._h_arr, self._v_arr = slot_h, slot_v
        # memoryviews: reading one slot from Python is ~3x faster than indexing numpy
        self._h, self._v = memoryview(slot_h), memoryview(slot_v)

    def find(self, key: str) -> tuple[int, int, int]:
        """``(value, slot, hash)``: ``value`` is -1 if ``key`` is absent, and then ``slot`` is
        where :meth:`insert` puts it (valid until the next insert)."""
        h = hash(key) & 0xFFFFFFFF
        slot = h & self._mask
        slot_h, slot_v, key_of = self._h, self._v, self.key_of
        while True:
            v = slot_v[slot]
            if v < 0:
                return -1, slot, h
            if slot_h[slot] == h and key_of(v) == key:
                return v, slot, h
            slot += 1

    def get(self, key: str) -> int:
        return self.find(key)[0]

    def insert(self, slot: int, h: int, value: int) -> None:
        """Store ``value`` for the key that :meth:`find` just reported absent at ``slot``."""
        if not 0 <= value < _MAX_VALUE:
            raise ValueError(f"IdTable values must be in [0, {_MAX_VALUE}), got {value}")
        self._h[slot] = h
        self._v[slot] = value
        self.n += 1
        if self.n > _MAX_LOAD * self.capacity or slot >= self._v_arr.shape[0] - 2:
            self._grow()

    def _grow(self) -> None:
        used = self._v_arr >= 0
        hashes, values = self._h_arr[used], self._v_arr[used]
        del used
        self._h = self._v = None  # release the exported buffers before dropping the arrays
        self._h_arr = self._v_arr = None
        self._alloc(self.capacity * 2, hashes, values)

    @property
    def nbytes(self) -> int:
        return int(self._h_arr.nbytes + self._v_arr.nbytes)
