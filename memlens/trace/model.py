"""The in-memory form of a trace: columnar arrays built once, read by every policy and tool.

A trace on disk is a JSON Lines event stream (see ``memlens/schema/trace-v1.schema.json`` and
``memlens.trace.io``).  Replaying millions of events through Python objects per event would be
slow and would make the cost of a replay depend on how the parser allocated things, so the
loader turns the stream into flat numpy arrays indexed by integers:

* events   ``e`` in ``0..E-1`` (file order = replay order),
* items    ``i`` in ``0..N-1`` (one per ``write``),
* requests ``r`` in ``0..R-1`` (one per ``request``), whose needs are stored in CSR form
  (``needs[needs_ptr[r]:needs_ptr[r + 1]]``), de-duplicated and in first-listed order.

A need ``j`` is a *group* of alternative items (trace format 1.1): it is served when any of
them is resident.  ``needs[j]`` is the group's first-listed alternative (its *primary*: the
item a demand fetch brings back), so ``needs`` has one entry per need whatever the format.  The
groups with two or more alternatives are the exception and are stored apart, only for them:
``alt_need`` (sorted indices into ``needs``) and, for the ``g``-th of them, the other
alternatives ``alt_items[alt_ptr[g]:alt_ptr[g + 1]]`` in listed order.  A version 1 trace has
three empty arrays there, so it costs no more memory and no code path more time than before.

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

from memlens._util.malloc import fix_mmap_threshold
from memlens.trace.packed import PackedJSON, PackedStrings, pack_json, pack_strings


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
    """A validated trace in columnar form.  Build it with ``memlens.trace.io``.

    String and meta columns are sequences: plain lists, or (from ``memlens.trace.io``) the
    compact :class:`memlens.trace.packed.PackedStrings` / :class:`memlens.trace.packed.PackedJSON`, which
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
    # need groups of 2+ alternatives (format 1.1; module docstring): empty in a version 1 trace
    alt_need: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    alt_ptr: np.ndarray = field(default_factory=lambda: np.zeros(1, np.int64))
    alt_items: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int32))

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
        """Needed references (a request needing k distinct items, or k groups of alternatives,
        makes k references)."""
        return int(self.needs.shape[0])

    @property
    def has_alternatives(self) -> bool:
        """Whether some need can be served by more than one item (format 1.1)."""
        return bool(self.alt_need.shape[0])

    def alternatives(self, j: int) -> np.ndarray:
        """The items that serve need ``j``, its primary ``needs[j]`` first (int32)."""
        g = int(np.searchsorted(self.alt_need, j))
        if g < self.alt_need.shape[0] and self.alt_need[g] == j:
            rest = self.alt_items[self.alt_ptr[g] : self.alt_ptr[g + 1]]
            return np.concatenate([self.needs[j : j + 1], rest]).astype(np.int32, copy=False)
        return self.needs[j : j + 1]

    @cached_property
    def alternative_groups(self) -> dict[int, tuple[int, ...]]:
        """Need index -> all its items (primary first), for the needs with alternatives only."""
        ptr, items, needs = self.alt_ptr.tolist(), self.alt_items.tolist(), self.needs
        return {j: (int(needs[j]), *items[ptr[g] : ptr[g + 1]])
                for g, j in enumerate(self.alt_need.tolist())}  # fmt: skip

    @cached_property
    def group_ptr(self) -> np.ndarray:
        """CSR over every need's alternatives: need ``j`` is served by
        ``group_items[group_ptr[j]:group_ptr[j + 1]]`` (primary first; int64, length n_refs+1)."""
        sizes = np.ones(self.n_references, np.int64)
        sizes[self.alt_need] += np.diff(self.alt_ptr)
        return np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)

    @cached_property
    def group_items(self) -> np.ndarray:
        """Every need's alternatives, concatenated in need order (int32; see ``group_ptr``)."""
        if not self.has_alternatives:
            return self.needs
        out = np.empty(int(self.group_ptr[-1]), np.int32)
        out[self.group_ptr[:-1]] = self.needs
        starts = self.group_ptr[self.alt_need] + 1
        sizes = np.diff(self.alt_ptr)
        pos = np.repeat(starts - self.alt_ptr[:-1], sizes) + np.arange(self.alt_items.shape[0])
        out[pos] = self.alt_items
        return out

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
        """How many requests need each item over the whole trace, as a need or one of a need's
        alternatives (int32)."""
        return np.bincount(self.group_items, minlength=self.n_items).astype(np.int32)

    @cached_property
    def need_next_use(self) -> np.ndarray:
        """For each reference, the event index of the same item's next reference (or -1).

        The classic "next use" column of cache simulation; the oracle and the false-eviction
        metric are built on it.  With alternatives, the item is the need's first-listed one and
        its next reference may be as any alternative (``group_next_use``).
        """
        if self.has_alternatives:
            return self.group_next_use[self.group_ptr[:-1]]
        return _next_use(self.needs, self.req_event[self.need_request])

    @cached_property
    def request_items_ptr(self) -> np.ndarray:
        """CSR over every item each request's needs list: request ``r`` lists
        ``group_items[request_items_ptr[r]:request_items_ptr[r + 1]]`` (alternatives included;
        an item in two of its groups twice).  For policies that count uses (int64, R + 1)."""
        if not self.has_alternatives:
            return self.needs_ptr
        return self.group_ptr[self.needs_ptr]

    @cached_property
    def group_request(self) -> np.ndarray:
        """For each entry of ``group_items``, the request it belongs to (int32)."""
        if not self.has_alternatives:
            return self.need_request
        return np.repeat(self.need_request, np.diff(self.group_ptr))

    @cached_property
    def group_next_use(self) -> np.ndarray:
        """For each entry of ``group_items``, the event index of the next later request that
        lists the same item, as a need or an alternative (or -1)."""
        if not self.has_alternatives:
            return self.need_next_use
        return _next_use(self.group_items, self.req_event[self.group_request])

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


def _next_use(items: np.ndarray, ev: np.ndarray) -> np.ndarray:
    """Per entry, the first later event among the entries of the same item (-1: none)."""
    n = items.shape[0]
    nxt = np.full(n, -1, dtype=np.int64)
    if n == 0:
        return nxt
    order = np.lexsort((ev, items))  # by item, then time
    same = items[order[1:]] == items[order[:-1]]
    nxt[order[:-1][same]] = ev[order[1:][same]]
    tie = np.flatnonzero(same & (ev[order[1:]] == ev[order[:-1]]))  # listed twice in a request
    for p in tie[::-1].tolist():  # (alternatives only) take the later entry's next use instead
        nxt[order[p]] = nxt[order[p + 1]]
    return nxt


_STRING_COLUMNS = frozenset(
    {"item_id", "item_text", "item_task", "item_session", "req_id", "req_text"}
)
_JSON_COLUMNS = frozenset({"item_meta", "req_meta"})
