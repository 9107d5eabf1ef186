"""The columns of a trace that grows while an agent runs: what the live engine and ``grow`` read.

A replay reads a :class:`memlens.trace.model.Trace` whose numpy columns are fixed once loaded.
A live session appends one event at a time, so its columns are plain Python lists (appending is
O(1), and a policy's hot path indexes lists anyway).  The names are the ``Trace`` attributes
they stand for, with the same meaning and the same indices (an item's index is its position
among the record's writes, an event's its position in the record), so a policy's ``grow``
(``memlens.policy``) extends its own lists from the same-named columns here:

``ev_t``                 float per event: its trace time;
``item_tokens``, ``item_type``, ``item_stream``, ``item_cost``, ``item_text``, ``item_id``:
                         per item;
``needs_ptr``, ``needs`` per request, CSR: each need's first-listed alternative;
``groups``               need index -> all its alternatives (needs of 2+ alternatives only);
``request_items_ptr``, ``group_items``: per request, CSR over every item its needs list
                         (alternatives included), as ``Trace.request_items_ptr/group_items``.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field

from memlens.trace.model import Trace


class GrowingStrings:
    """A loaded trace's string column (packed, not a Python ``str`` per row) with the rows a
    live session appends after it: a reopened record of a million items need not decode every
    text and id up front, only the ones asked for."""

    __slots__ = ("_base", "_n", "_tail")

    def __init__(self, base: Sequence[str] = ()) -> None:
        self._base, self._n, self._tail = base, len(base), []

    def __len__(self) -> int:
        return self._n + len(self._tail)

    def __getitem__(self, i):
        if isinstance(i, slice):
            return [self[k] for k in range(*i.indices(len(self)))]
        if i < 0:
            i += len(self)
        return self._base[i] if i < self._n else self._tail[i - self._n]

    def __iter__(self) -> Iterator[str]:
        return itertools.chain(self._base, self._tail)

    def append(self, value: str) -> None:
        self._tail.append(value)


@dataclass
class LiveColumns:
    """A growing trace's columns as lists (module docstring)."""

    ev_t: list[float] = field(default_factory=list)
    ev_stream: list[int] = field(default_factory=list)
    item_tokens: list[int] = field(default_factory=list)
    item_type: list[int] = field(default_factory=list)
    item_stream: list[int] = field(default_factory=list)
    item_cost: list[float] = field(default_factory=list)
    item_text: GrowingStrings = field(default_factory=GrowingStrings)
    item_id: GrowingStrings = field(default_factory=GrowingStrings)
    needs_ptr: list[int] = field(default_factory=lambda: [0])
    needs: list[int] = field(default_factory=list)
    groups: dict[int, tuple[int, ...]] = field(default_factory=dict)
    request_items_ptr: list[int] = field(default_factory=lambda: [0])
    group_items: list[int] = field(default_factory=list)
    req_id: list[str] = field(default_factory=list)

    @classmethod
    def from_trace(cls, trace: Trace) -> LiveColumns:
        """The columns of a loaded trace (a reopened record), ready to grow."""
        return cls(
            ev_t=trace.ev_t.tolist(),
            ev_stream=trace.ev_stream.tolist(),
            item_tokens=trace.item_tokens.tolist(),
            item_type=trace.item_type.tolist(),
            item_stream=trace.item_stream.tolist(),
            item_cost=trace.item_cost.tolist(),
            item_text=GrowingStrings(trace.item_text),
            item_id=GrowingStrings(trace.item_id),
            needs_ptr=trace.needs_ptr.tolist(),
            needs=trace.needs.tolist(),
            groups=dict(trace.alternative_groups),
            request_items_ptr=trace.request_items_ptr.tolist(),
            group_items=trace.group_items.tolist(),
            req_id=list(trace.req_id),
        )

    @property
    def n_events(self) -> int:
        return len(self.ev_t)

    @property
    def n_items(self) -> int:
        return len(self.item_tokens)

    @property
    def n_requests(self) -> int:
        return len(self.needs_ptr) - 1

    def add_event(self, stream: int, t: float) -> int:
        """A new event of ``stream`` at trace time ``t``; returns its index."""
        self.ev_t.append(t)
        self.ev_stream.append(stream)
        return len(self.ev_t) - 1

    def add_item(self, ident: str, stream: int, tokens: int, type_code: int, cost: float,
                 text: str) -> int:  # fmt: skip
        """A new item (its write event is added apart); returns its index."""
        self.item_id.append(ident)
        self.item_tokens.append(tokens)
        self.item_type.append(type_code)
        self.item_stream.append(stream)
        self.item_cost.append(cost)
        self.item_text.append(text)
        return len(self.item_tokens) - 1

    def add_request(self, ident: str, groups: list[tuple[int, ...]]) -> int:
        """A new request needing ``groups`` (each a tuple of alternatives, primary first, none
        repeated); returns its index."""
        for group in groups:
            j = len(self.needs)
            self.needs.append(group[0])
            if len(group) > 1:
                self.groups[j] = group
            self.group_items.extend(group)
        self.needs_ptr.append(len(self.needs))
        self.request_items_ptr.append(len(self.group_items))
        self.req_id.append(ident)
        return len(self.needs_ptr) - 2
