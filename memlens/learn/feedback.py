"""Feedback on items: one row type, one store that training reads and every source writes.

Three sources say something about whether an item is worth keeping:

* ``trace``: the pins, unpins and annotations a trace already carries (a person's word,
  recorded while the agent ran): :func:`feedback_from_trace`;
* ``simulated``: a simulated expert watching the replay (``memlens.learn.simulated_user``);
* ``person``: someone using the analytics page (a later issue), through the same API.

Each :class:`Feedback` row says who gave it (``source``, ``author``), when (``trace_sha256``,
``stream``, ``event_index``, ``t``), about which item (``item_id``) and what (``action``:
``keep`` = pin/promote, ``drop`` = unpin/demote, ``value`` = an annotation, with a value in
[0, 1] and/or a note).  A note-only annotation is a ``value`` row whose ``value`` is None and
whose ``note`` is set: it keeps the person's words without inventing a number; readers that
want labels skip rows whose value is None.

When: feedback at ``event_index`` e takes effect right after event e of the trace has been
replayed (a trace's own pin at event e *is* event e).  :func:`with_feedback` puts rows into a
trace as pin/unpin/annotate events at exactly that place, so any policy can be replayed with a
person's or the simulated user's interventions.

The store is one SQLite file (WAL mode, a busy timeout, each ``add`` one ``BEGIN IMMEDIATE``
transaction) so that many processes can write at once without losing a row; its schema is
versioned with ``PRAGMA user_version`` and documented in ``docs/how-to/feedback-and-training.md``.
"""

from __future__ import annotations

import math
import os
import re
import sqlite3
from collections.abc import Iterable, Iterator
from contextlib import closing, contextmanager
from dataclasses import dataclass, fields
from pathlib import Path

import numpy as np

from memlens.trace.io import trace_from_events
from memlens.trace.model import ANNOTATE, ITEM_TYPES, PIN, REQUEST, UNPIN, WRITE, Trace

SOURCES = ("trace", "simulated", "person")
ACTIONS = ("keep", "drop", "value")
SCHEMA_VERSION = 1
BUSY_TIMEOUT_S = 60.0
_SHA256 = re.compile(r"[0-9a-f]{64}")


class FeedbackError(ValueError):
    """A feedback row is invalid; ``field`` names the offending field."""

    def __init__(self, field: str, message: str):
        self.field = field
        super().__init__(message)


@dataclass(frozen=True)
class Feedback:
    """One piece of feedback about one item (validated on construction)."""

    source: str  # who: one of SOURCES
    trace_sha256: str  # which trace (Trace.sha256)
    stream: str  # stream name
    event_index: int  # replay-order event index at which the feedback is given (0-based)
    t: float  # trace time of that event
    item_id: str  # the item it is about
    action: str  # one of ACTIONS
    value: float | None = None
    note: str | None = None
    author: str | None = None  # a person's name / the simulated user's config hash

    def __post_init__(self) -> None:
        for name, v in _checked(self).items():
            object.__setattr__(self, name, v)


def _bad(field: str, message: str) -> FeedbackError:
    return FeedbackError(field, f'field "{field}" {message}')


def _checked(row: Feedback) -> dict:
    """The row's fields normalised (numpy scalars to Python), or a :class:`FeedbackError`."""
    if row.source not in SOURCES:
        raise _bad("source", f"must be one of {', '.join(SOURCES)}, got {row.source!r}")
    if not isinstance(row.trace_sha256, str) or not _SHA256.fullmatch(row.trace_sha256):
        raise _bad("trace_sha256", f"must be 64 lowercase hex digits, got {row.trace_sha256!r}")
    if not isinstance(row.stream, str):
        raise _bad("stream", f"must be a string, got {row.stream!r}")
    ev = row.event_index
    if isinstance(ev, bool) or not isinstance(ev, (int, np.integer)) or ev < 0:
        raise _bad("event_index", f"must be an integer >= 0, got {ev!r}")
    t = row.t
    if isinstance(t, bool) or not isinstance(t, (int, float, np.number)) or not math.isfinite(t):
        raise _bad("t", f"must be a finite number, got {t!r}")
    if not isinstance(row.item_id, str) or not row.item_id:
        raise _bad("item_id", f"must be a non-empty string, got {row.item_id!r}")
    if row.action not in ACTIONS:
        raise _bad("action", f"must be one of {', '.join(ACTIONS)}, got {row.action!r}")
    value = row.value
    if value is not None:
        if isinstance(value, bool) or not isinstance(value, (int, float, np.number)):
            raise _bad("value", f"must be a number in [0, 1] or null, got {value!r}")
        if not 0.0 <= value <= 1.0:
            raise _bad("value", f"must be a number in [0, 1] or null, got {value!r}")
        if row.action != "value":
            raise _bad("value", f'is only for action "value", not {row.action!r}')
        value = float(value)
    for name in ("note", "author"):
        if getattr(row, name) is not None and not isinstance(getattr(row, name), str):
            raise _bad(name, f"must be a string or null, got {getattr(row, name)!r}")
    if row.action == "value" and value is None and row.note is None:
        raise _bad("value", 'action "value" needs a value and/or a note')
    return {"event_index": int(ev), "t": float(t), "value": value}


# ----------------------------------------------------------------------- the store
COLUMNS = tuple(f.name for f in fields(Feedback))
_CREATE = """
CREATE TABLE IF NOT EXISTS feedback (
    id           INTEGER PRIMARY KEY AUTOINCREMENT,
    source       TEXT    NOT NULL CHECK (source IN ('trace', 'simulated', 'person')),
    trace_sha256 TEXT    NOT NULL,
    stream       TEXT    NOT NULL,
    event_index  INTEGER NOT NULL CHECK (event_index >= 0),
    t            REAL    NOT NULL,
    item_id      TEXT    NOT NULL,
    action       TEXT    NOT NULL CHECK (action IN ('keep', 'drop', 'value')),
    value        REAL    CHECK (value IS NULL OR (value >= 0.0 AND value <= 1.0)),
    note         TEXT,
    author       TEXT
);
CREATE INDEX IF NOT EXISTS feedback_order ON feedback (trace_sha256, event_index, id);
"""


class FeedbackStore:
    """Feedback rows in one SQLite file, safe under concurrent writers (threads or processes).

    Every call opens its own connection (so a store object can be shared by threads and
    survives a fork), waits up to ``BUSY_TIMEOUT_S`` for the write lock, and commits each
    ``add`` as one transaction: all its rows or none.
    """

    def __init__(self, path: str | os.PathLike):
        self.path = Path(path)
        if self.path.is_dir():
            raise FeedbackError("store", f"feedback store {self.path} is a directory")
        with self._connect() as db:
            _init_schema(db, self.path)

    @contextmanager
    def _connect(self) -> Iterator[sqlite3.Connection]:
        try:
            db = sqlite3.connect(self.path, timeout=BUSY_TIMEOUT_S, isolation_level=None)
        except sqlite3.Error as exc:
            raise OSError(f"cannot open feedback store {self.path}: {exc}") from None
        with closing(db):
            db.execute(f"PRAGMA busy_timeout = {int(BUSY_TIMEOUT_S * 1000)}")
            yield db

    def add(self, rows: Iterable[Feedback]) -> int:
        """Validate and append ``rows`` (all or none); returns how many were added."""
        values = []
        for k, row in enumerate(rows):
            if not isinstance(row, Feedback):
                raise FeedbackError("row", f"feedback row {k}: not a Feedback, got {row!r}")
            try:
                norm = _checked(row)  # a row altered after construction is still checked
            except FeedbackError as exc:
                raise FeedbackError(exc.field, f"feedback row {k}: {exc}") from None
            values.append(tuple(norm[c] if c in norm else getattr(row, c) for c in COLUMNS))
        if not values:
            return 0
        sql = (
            f"INSERT INTO feedback ({', '.join(COLUMNS)}) VALUES ({', '.join('?' * len(COLUMNS))})"
        )
        with self._connect() as db:
            db.execute("BEGIN IMMEDIATE")
            try:
                db.executemany(sql, values)
            except BaseException:
                db.execute("ROLLBACK")
                raise
            db.execute("COMMIT")
        return len(values)

    def insert(self, row: Feedback) -> int:
        """Append one row (checked as :meth:`add` checks it); returns its id (the page's undo
        removes it by that id)."""
        if not isinstance(row, Feedback):
            raise FeedbackError("row", f"feedback row 0: not a Feedback, got {row!r}")
        norm = _checked(row)
        values = tuple(norm[c] if c in norm else getattr(row, c) for c in COLUMNS)
        sql = (
            f"INSERT INTO feedback ({', '.join(COLUMNS)}) VALUES ({', '.join('?' * len(COLUMNS))})"
        )
        with self._connect() as db:
            db.execute("BEGIN IMMEDIATE")
            try:
                new_id = db.execute(sql, values).lastrowid
            except BaseException:
                db.execute("ROLLBACK")
                raise
            db.execute("COMMIT")
        return int(new_id)

    def rows(self, trace_sha256: str | None = None, source: str | None = None) -> list[Feedback]:
        """The rows (optionally of one trace and/or one source), ordered by trace, event
        index, then insertion."""
        return [row for _id, row in self.entries(trace_sha256, source)]

    def remove(self, ids: Iterable[int]) -> int:
        """Delete the rows with these ids (an undo on the page); returns how many were."""
        ids = [int(i) for i in ids]
        if not ids:
            return 0
        with self._connect() as db:
            db.execute("BEGIN IMMEDIATE")
            gone = db.execute(f"DELETE FROM feedback WHERE id IN ({', '.join('?' * len(ids))})",
                              ids).rowcount  # fmt: skip
            db.execute("COMMIT")
        return int(gone)

    def entries(self, trace_sha256: str | None = None, source: str | None = None
                ) -> list[tuple[int, Feedback]]:  # fmt: skip
        """(row id, row) pairs, as :meth:`rows` orders them: the id is what :meth:`remove`
        takes."""
        where, args = [], []
        if trace_sha256 is not None:
            where.append("trace_sha256 = ?")
            args.append(trace_sha256)
        if source is not None:
            if source not in SOURCES:
                raise _bad("source", f"must be one of {', '.join(SOURCES)}, got {source!r}")
            where.append("source = ?")
            args.append(source)
        sql = f"SELECT id, {', '.join(COLUMNS)} FROM feedback"
        if where:
            sql += " WHERE " + " AND ".join(where)
        sql += " ORDER BY trace_sha256, event_index, id"
        with self._connect() as db:
            return [(int(r[0]), Feedback(*r[1:])) for r in db.execute(sql, args)]

    def __len__(self) -> int:
        with self._connect() as db:
            return int(db.execute("SELECT COUNT(*) FROM feedback").fetchone()[0])


def _init_schema(db: sqlite3.Connection, path: Path) -> None:
    """Create the schema (once, under the write lock) or check that the file holds ours."""
    try:
        if db.execute("PRAGMA journal_mode").fetchone()[0].lower() != "wal":
            db.execute("PRAGMA journal_mode = WAL")
        db.execute("BEGIN IMMEDIATE")
        try:
            version = db.execute("PRAGMA user_version").fetchone()[0]
            tables = {r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type='table'")}
            if version == 0 and not tables - {"sqlite_sequence"}:  # a new, empty file
                for stmt in filter(str.strip, _CREATE.split(";")):
                    db.execute(stmt)
                db.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
                version, tables = SCHEMA_VERSION, tables | {"feedback"}
        except BaseException:
            db.execute("ROLLBACK")
            raise
        db.execute("COMMIT")
    except sqlite3.DatabaseError as exc:
        raise FeedbackError("store", f"{path}: not a feedback store ({exc})") from None
    if version != SCHEMA_VERSION or "feedback" not in tables:
        raise FeedbackError(
            "store",
            f"{path}: feedback schema version {version}, this MemLens reads {SCHEMA_VERSION}",
        )


# ------------------------------------------------------------- traces and feedback
_ACTION_OF_KIND = {PIN: "keep", UNPIN: "drop", ANNOTATE: "value"}
_KIND_OF_ACTION = {"keep": "pin", "drop": "unpin", "value": "annotate"}


def feedback_from_trace(trace: Trace) -> list[Feedback]:
    """The pins (``keep``), unpins (``drop``) and annotations (``value``) a trace carries, as
    ``source="trace"`` rows at their own event index; an annotation's value and note are kept
    (a note-only annotation gives ``value=None``); ``author`` is the event's ``meta.author``
    when that is a string."""
    out = []
    for e in np.flatnonzero(np.isin(trace.ev_kind, list(_ACTION_OF_KIND))).tolist():
        kind, item = int(trace.ev_kind[e]), int(trace.ev_ref[e])
        value, note = trace.annotations.get(e, (None, None))
        author = trace.event_meta.get(e, {}).get("author")
        out.append(Feedback(
            source="trace", trace_sha256=trace.sha256,
            stream=trace.stream_names[int(trace.ev_stream[e])], event_index=e,
            t=float(trace.ev_t[e]), item_id=trace.item_id[item], action=_ACTION_OF_KIND[kind],
            value=value, note=note, author=author if isinstance(author, str) else None,
        ))  # fmt: skip
    return out


def trace_events(trace: Trace) -> list[dict]:
    """The trace as event dicts in replay order (header first, if it has one), such that
    ``trace_from_events(trace_events(tr))`` has the same columns as ``tr``.  Unknown fields
    of the original lines come back inside ``meta``, so the text (and hash) may differ."""
    events: list[dict] = [dict(trace.header)] if trace.header else []
    names, ids = trace.stream_names, trace.item_id
    for e, (kind, ref, s, t) in enumerate(zip(trace.ev_kind.tolist(), trace.ev_ref.tolist(),
                                              trace.ev_stream.tolist(), trace.ev_t.tolist())):  # fmt: skip
        if kind == WRITE:
            ev = {"event": "write", "id": ids[ref], "tokens": int(trace.item_tokens[ref]),
                  "type": ITEM_TYPES[int(trace.item_type[ref])], "stream": names[s], "t": t,
                  "text": trace.item_text[ref], "cost": float(trace.item_cost[ref]),
                  "task": trace.item_task[ref], "session": trace.item_session[ref],
                  "meta": trace.item_meta[ref]}  # fmt: skip
        elif kind == REQUEST:
            needs = [ids[i] if len(g) == 1 else [ids[a] for a in g]  # alternatives (1.1)
                     for i, g in ((int(trace.needs[j]), trace.alternatives(j).tolist())
                                  for j in range(trace.needs_ptr[ref], trace.needs_ptr[ref + 1]))]  # fmt: skip
            ev = {"event": "request", "id": trace.req_id[ref], "needs": needs, "stream": names[s],
                  "t": t, "text": trace.req_text[ref], "meta": trace.req_meta[ref]}  # fmt: skip
        else:
            ev = {"event": _KIND_OF_ACTION[_ACTION_OF_KIND[kind]], "target": ids[ref],
                  "stream": names[s], "t": t, "meta": trace.event_meta.get(e, {})}  # fmt: skip
            value, note = trace.annotations.get(e, (None, None))
            ev.update({k: v for k, v in (("value", value), ("note", note)) if v is not None})
        events.append(ev)
    return events


def _check_against(trace: Trace, row: Feedback, k: int) -> None:
    """``row`` can be placed in ``trace``: same trace, an existing event, its item written
    by then, in the stream it names."""

    def bad(field: str, message: str) -> FeedbackError:
        return FeedbackError(field, f'feedback row {k}: field "{field}" {message}')

    if row.trace_sha256 != trace.sha256:
        raise bad("trace_sha256", f"is {row.trace_sha256}, not this trace's {trace.sha256}")
    if row.event_index >= trace.n_events:
        raise bad("event_index", f"is {row.event_index}; the trace has {trace.n_events} events")
    item = trace.item_index.get(row.item_id)
    if item is None:
        raise bad("item_id", f"{row.item_id!r} is not an item of this trace")
    if int(trace.item_event[item]) > row.event_index:
        raise bad("event_index", f"{row.event_index} is before {row.item_id!r} is written "
                                 f"(event {int(trace.item_event[item])})")  # fmt: skip
    if trace.stream_names[int(trace.item_stream[item])] != row.stream:
        raise bad("stream", f"{row.stream!r} is not the stream of {row.item_id!r}")


def with_feedback(trace: Trace, rows: Iterable[Feedback]) -> Trace:
    """A new trace: ``trace`` with each row as a pin (keep), unpin (drop) or annotate (value)
    event right after event ``row.event_index`` (rows at the same index in the given order).

    The new events carry no ``t`` (they take their stream's clock) and ``meta.source`` (and
    ``meta.author`` when set; a keep/drop row's note goes to ``meta.note``).  The result is a
    different trace, so its ``sha256`` is the hash of the new event lines (those
    :func:`feedback_events` gives, as ``write_trace`` writes them), not ``trace.sha256``; rows
    must be about ``trace`` itself (a :class:`FeedbackError` otherwise).
    """
    return trace_from_events(feedback_events(trace, rows), source=f"{trace.source}+feedback")


def feedback_events(trace: Trace, rows: Iterable[Feedback]) -> list[dict]:
    """The event dicts of :func:`with_feedback`'s trace (what ``feedback apply`` writes)."""
    rows = list(rows)
    for k, row in enumerate(rows):
        _check_against(trace, row, k)
    at: dict[int, list[Feedback]] = {}
    for row in rows:
        at.setdefault(row.event_index, []).append(row)
    base = trace_events(trace)
    offset = 1 if trace.header else 0
    events = base[:offset]
    for e, ev in enumerate(base[offset:]):
        events.append(ev)
        for row in at.get(e, ()):
            meta = {"source": row.source}
            keys = ("author",) if row.action == "value" else ("author", "note")
            meta.update({k: getattr(row, k) for k in keys if getattr(row, k) is not None})
            new = {"event": _KIND_OF_ACTION[row.action], "target": row.item_id,
                   "stream": row.stream, "meta": meta}  # fmt: skip
            if row.action == "value":
                new.update({k: getattr(row, k) for k in ("value", "note")
                            if getattr(row, k) is not None})  # fmt: skip
            events.append(new)
    return events
