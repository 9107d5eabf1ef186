"""A page session's interventions: one per item and action, undoable, scoped for the what-if.

Why: a person debugging a run pins, rescores and annotates while reading the causes of a
miss, and then asks "what would my changes do?".  Three rules make that answer readable:

* one intervention per (trace, item, action): pinning (or unpinning) an item already pinned
  adds nothing (the answer names the existing row), nor does repeating the same rescore or
  annotation (same value, note and event); a different value is a new row, applied after
  the earlier ones (so the newest value is the one a replay uses), and undo takes it back;
* every intervention of this page session can be undone (its row is deleted from the store);
* the what-if applies either this session's interventions (``scope=session``, the default)
  or every person row about the trace (``scope=all``: colleagues' and earlier sessions' too).

The store is the shared feedback store (``memlens.learn.feedback``); which rows a browser
session added is kept by the server (:class:`SessionRows`), so it lasts as long as the server.
"""

from __future__ import annotations

import threading

from memlens.learn.feedback import Feedback, FeedbackStore

SCOPES = ("session", "all")


class SessionRows:
    """Which feedback row ids each browser session added (thread-safe)."""

    def __init__(self) -> None:
        self._ids: dict[str, list[int]] = {}
        self.lock = threading.Lock()  # held across check-then-write of one intervention

    def ids(self, session: str) -> list[int]:
        return list(self._ids.get(session, ()))

    def add(self, session: str, row_id: int) -> None:
        self._ids.setdefault(session, []).append(row_id)

    def drop(self, row_ids) -> None:
        gone = set(row_ids)
        for ids in self._ids.values():
            ids[:] = [i for i in ids if i not in gone]


def same_target(a: Feedback, b: Feedback) -> bool:
    """Does ``b`` say what ``a`` says: a keep or drop of the same item of the same trace, or
    the same value and note at the same event?"""
    if (a.trace_sha256, a.item_id, a.action) != (b.trace_sha256, b.item_id, b.action):
        return False
    return a.action != "value" or (a.value, a.note, a.event_index) == (b.value, b.note,
                                                                        b.event_index)  # fmt: skip


def intervene(store: FeedbackStore, sessions: SessionRows, session: str, row: Feedback) -> dict:
    """Store ``row`` unless the trace already has a person row saying the same: then nothing
    is added and the existing row is named (``existing``)."""
    with sessions.lock:
        same = [(i, r) for i, r in store.entries(row.trace_sha256, "person") if same_target(r, row)]
        if same:
            return {"added": 0, "id": same[0][0], "existing": True,
                    "event_index": same[0][1].event_index, "action": row.action}  # fmt: skip
        new_id = store.insert(row)
        sessions.add(session, new_id)
    return {"added": 1, "id": new_id, "existing": False, "event_index": row.event_index,
            "action": row.action}  # fmt: skip


def undo(store: FeedbackStore, sessions: SessionRows, session: str, trace_sha256: str,
         row_id: int | None = None) -> dict:  # fmt: skip
    """Delete one person row of this trace: ``row_id``, or this session's latest one."""
    with sessions.lock:
        mine = [i for i in sessions.ids(session)
                if i in {k for k, _r in store.entries(trace_sha256, "person")}]  # fmt: skip
        if row_id is None:
            if not mine:
                raise ValueError(
                    "nothing to undo: this session added no intervention to this trace"
                )
            row_id = mine[-1]
        elif row_id not in {k for k, _r in store.entries(trace_sha256, "person")}:
            raise KeyError(f"intervention {row_id}: no such person row about this run's trace")
        removed = store.remove([row_id])
        sessions.drop([row_id])
    return {"removed": removed, "id": row_id}


def scoped_rows(store: FeedbackStore, sessions: SessionRows, session: str, trace_sha256: str,
                scope: str) -> list[tuple[int, Feedback]]:  # fmt: skip
    """(id, row) of the person rows a what-if applies: this session's, or all of them."""
    if scope not in SCOPES:
        raise ValueError(f"scope must be one of {', '.join(SCOPES)}, got {scope!r}")
    rows = store.entries(trace_sha256, "person") if store.path.exists() else []
    if scope == "all":
        return rows
    mine = set(sessions.ids(session))
    return [(i, r) for i, r in rows if i in mine]
