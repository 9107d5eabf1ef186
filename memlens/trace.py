"""The in-memory form of a trace: columnar arrays built once, read by every policy and tool.

A trace on disk is a JSON Lines event stream (see ``memlens/schema/trace-v1.schema.json`` and
``memlens.trace_io``).  Replaying millions of events through Python objects per event would be
slow and would make the cost of a replay depend on how the parser allocated things, so the
loader turns the stream into flat numpy arrays indexed by integers:

* events   ``e`` in ``0..E-1`` (file order = replay order),
* items    ``i`` in ``0..N-1`` (one per ``write``),
* requests ``r`` in ``0..R-1`` (one per ``request``), whose needs are stored in CSR form
  (``needs[needs_ptr[r]:needs_ptr[r + 1]]``), de-duplicated and in first-listed order.

Everything a policy may legitimately look at (tokens, type, cost, time, text) is here; the
ground truth (``needs``) is here too, but only the offline oracle and the metrics may read it
ahead of time.  Online policies learn needs through ``Policy.observe``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, fields
from enum import IntEnum
from functools import cached_property

import numpy as np

from memlens.heap import fix_mmap_threshold
from memlens.packed import PackedJSON, PackedStrings, pack_json, pack_strings


class EventKind(IntEnum):
    """The kind of an event (``Trace.ev_kind``); usable as a constant in numba kernels."""

    WRITE = 0
    REQUEST = 1
    PIN = 2
    UNPIN = 3
    ANNOTATE = 4


# The members' values under their older names, as plain ints for hot loops: ``EventKind.X`` is
# an attribute lookup on the enum class (~0.1 us in CPython 3.11), exact ints compare fastest,
# and numpy converts a list of them four times faster than a list of enum members.
WRITE, REQUEST, PIN, UNPIN, ANNOTATE = map(int, EventKind)
EVENT_KINDS = tuple(k.name.lower() for k in EventKind)
ITEM_TYPES = ("user_input", "llm_thought", "tool_result", "agent_state")
TYPE_CODE = {name: code for code, name in enumerate(ITEM_TYPES)}


@dataclass(eq=False)
class Trace:
    """A validated trace in columnar form.  Build it with ``memlens.trace_io``.

    String and meta columns are sequences: plain lists, or (from ``memlens.trace_io``) the
    compact :class:`memlens.packed.PackedStrings` / :class:`memlens.packed.PackedJSON`, which
    read like lists (``trace.item_id[i]``, ``trace.item_id == [...]``, iteration).  Nothing here
    holds a Python object per event, so a trace costs about 100 bytes per event.
    """

    source: str
    sha256: str
    header: dict
    stream_names: list[str]
    # events
    ev_kind: np.ndarray  # int8, one of WRITE..ANNOTATE
    ev_stream: np.ndarray  # int32
    ev_ref: np.ndarray  # int32: item index (write/pin/unpin/annotate) or request index
    ev_t: np.ndarray  # float64
    ev_line: np.ndarray  # int32 (int64 from older builders), 1-based line in the source file
    # items
    item_id: Sequence[str]
    item_tokens: np.ndarray  # int64 (> 0)
    item_type: np.ndarray  # int8, index into ITEM_TYPES
    item_stream: np.ndarray  # int32
    item_t: np.ndarray  # float64
    item_cost: np.ndarray  # float64
    item_event: np.ndarray  # int64, event index of the write
    item_text: Sequence[str]
    item_task: Sequence[str]
    item_session: Sequence[str]
    item_meta: Sequence[dict]
    # requests
    req_id: Sequence[str]
    req_stream: np.ndarray  # int32
    req_t: np.ndarray  # float64
    req_event: np.ndarray  # int64
    req_text: Sequence[str]
    req_meta: Sequence[dict]
    needs_ptr: np.ndarray  # int64, length R + 1
    needs: np.ndarray  # int32 item indices
    # annotations: event index -> (value or None, note or None)
    annotations: dict[int, tuple[float | None, str | None]] = field(default_factory=dict)
    event_meta: dict[int, dict] = field(default_factory=dict)

    # ------------------------------------------------------------------ sizes
    @property
    def n_events(self) -> int:
        return int(self.ev_kind.shape[0])

    @property
    def n_items(self) -> int:
        return int(self.item_tokens.shape[0])

    @property
    def n_requests(self) -> int:
        return int(self.req_stream.shape[0])

    @property
    def n_streams(self) -> int:
        return len(self.stream_names)

    @property
    def n_references(self) -> int:
        """Needed references (a request needing k distinct items makes k references)."""
        return int(self.needs.shape[0])

    # ------------------------------------------------------------ derived data
    @cached_property
    def item_index(self) -> dict[str, int]:
        """Item id -> item index (built on first use: a dict costs ~100 bytes per item)."""
        return {item_id: i for i, item_id in enumerate(self.item_id)}

    @cached_property
    def req_needs_count(self) -> np.ndarray:
        return np.diff(self.needs_ptr).astype(np.int64)

    @cached_property
    def need_request(self) -> np.ndarray:
        """For each needed reference, the request it belongs to (int32, like ``needs``)."""
        return np.repeat(np.arange(self.n_requests, dtype=np.int32), self.req_needs_count)

    @cached_property
    def item_n_uses(self) -> np.ndarray:
        """How many requests need each item over the whole trace (int32)."""
        return np.bincount(self.needs, minlength=self.n_items).astype(np.int32)

    @cached_property
    def need_next_use(self) -> np.ndarray:
        """For each reference, the event index of the same item's next reference (or -1).

        The classic "next use" column of cache simulation; the oracle and the false-eviction
        metric are built on it.
        """
        n = self.n_references
        nxt = np.full(n, -1, dtype=np.int64)
        if n == 0:
            return nxt
        ev = self.req_event[self.need_request]
        order = np.lexsort((ev, self.needs))  # by item, then time
        same = self.needs[order[1:]] == self.needs[order[:-1]]
        nxt[order[:-1][same]] = ev[order[1:][same]]
        return nxt

    @cached_property
    def stream_events(self) -> list[np.ndarray]:
        """Event indices of each stream, in replay order."""
        order = np.argsort(self.ev_stream, kind="stable")
        bounds = np.searchsorted(self.ev_stream[order], np.arange(self.n_streams + 1))
        return [order[bounds[s] : bounds[s + 1]] for s in range(self.n_streams)]

    def needs_of(self, r: int) -> np.ndarray:
        return self.needs[self.needs_ptr[r] : self.needs_ptr[r + 1]]

    def tokens_by_type(self) -> dict[str, int]:
        sums = np.bincount(self.item_type, weights=self.item_tokens, minlength=len(ITEM_TYPES))
        return {name: int(sums[k]) for k, name in enumerate(ITEM_TYPES)}

    def pin_keys(self) -> tuple:
        """What the pins of this trace are, for caches keyed by (trace, pins)."""
        mask = (self.ev_kind == PIN) | (self.ev_kind == UNPIN)
        return tuple(zip(np.flatnonzero(mask).tolist(), self.ev_ref[mask].tolist()))

    # ------------------------------------------------------- safe serialisation
    def to_arrays(self) -> tuple[dict[str, np.ndarray], dict]:
        """The trace as plain numeric arrays plus JSON-able metadata (no Python objects).

        This is the contract between the trace and any cache that stores it: every array is a
        numeric numpy array (a string column is ``<name>.data`` UTF-8 bytes plus
        ``<name>.offsets``; a meta column is ``<name>.rows``, the rows with a non-empty object,
        plus their JSON texts as ``<name>.data`` / ``<name>.offsets``), and the metadata is
        JSON, so a cache can store both in a format that cannot execute code on load.  Packed
        columns are handed over as they are (no copy).  ``Trace.from_arrays(*trace.to_arrays(),
        source)`` gives back an equal trace.
        """
        arrays: dict[str, np.ndarray] = {}
        meta: dict = {
            "sha256": self.sha256,
            "header": self.header,
            "stream_names": self.stream_names,
        }
        for f in fields(self):
            value = getattr(self, f.name)
            if isinstance(value, np.ndarray):
                arrays[f.name] = value
            elif f.name in _STRING_COLUMNS:
                packed = pack_strings(value)
                arrays[f"{f.name}.data"], arrays[f"{f.name}.offsets"] = packed.data, packed.offsets
            elif f.name in _JSON_COLUMNS:
                packed = pack_json(value)
                arrays[f"{f.name}.rows"] = packed.rows
                arrays[f"{f.name}.data"] = packed.values.data
                arrays[f"{f.name}.offsets"] = packed.values.offsets
                meta[f"{f.name}.n"] = packed.n
        meta["annotations"] = [[e, v, n] for e, (v, n) in self.annotations.items()]
        meta["event_meta"] = [[e, m] for e, m in self.event_meta.items()]
        return arrays, meta

    @classmethod
    def from_arrays(cls, arrays: dict[str, np.ndarray], meta: dict, source: str) -> Trace:
        """Inverse of :meth:`to_arrays` (arrays are used as given: a memory map stays one);
        raises ``KeyError``/``ValueError`` on a foreign input."""
        fix_mmap_threshold()  # a large trace's arrays must not leave holes in the heap
        kwargs: dict = {"source": source}
        for f in fields(cls):
            if f.name in _STRING_COLUMNS:
                kwargs[f.name] = PackedStrings(
                    arrays[f"{f.name}.data"], arrays[f"{f.name}.offsets"]
                )
            elif f.name in _JSON_COLUMNS:
                texts = PackedStrings(arrays[f"{f.name}.data"], arrays[f"{f.name}.offsets"])
                kwargs[f.name] = PackedJSON(
                    int(meta[f"{f.name}.n"]), arrays[f"{f.name}.rows"], texts
                )
            elif f.name in arrays:
                kwargs[f.name] = arrays[f.name]
        kwargs.update(
            sha256=meta["sha256"], header=meta["header"], stream_names=meta["stream_names"]
        )
        kwargs["annotations"] = {int(e): (v, n) for e, v, n in meta["annotations"]}
        kwargs["event_meta"] = {int(e): m for e, m in meta["event_meta"]}
        return cls(**kwargs)


_STRING_COLUMNS = frozenset(
    {"item_id", "item_text", "item_task", "item_session", "req_id", "req_text"}
)
_JSON_COLUMNS = frozenset({"item_meta", "req_meta"})
