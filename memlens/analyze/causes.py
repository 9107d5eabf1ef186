"""Why a need missed, followed back as far as the event log goes.

Why a module of its own: the request view shows, for each missed need, not one eviction but
the chain behind it.  The need of ``a`` missed because ``a`` was evicted (or its write was
declined); the eviction made room for the write of ``x`` (or for ``x`` fetched back after its
own miss, or pinned); ``x`` was admitted with its value, perhaps derived from ``y``; and when
``x`` came back after a miss of its own, that miss has a chain too, which is followed the same
way (each item once, at most :data:`MAX_STEPS` steps).  Every step names the item it is about,
so the page can put pin, rescore and annotate on it.  Read from the tables of
:class:`memlens.analyze.prepared.Prepared`; nothing here replays anything.
"""

from __future__ import annotations

import math

from memlens.analyze.prepared import Prepared

MAX_STEPS = 24
_OUT = ("evict", "decline")


def _q(run: Prepared, sql: str, params: list) -> list[tuple]:
    return run.cursor().execute(sql, params).fetchall()


def _num(x):
    return None if x is None or (isinstance(x, float) and math.isnan(x)) else x


def _t(run: Prepared, event: int):
    rows = _q(run, "SELECT t FROM times WHERE event = ?", [event])
    return rows[0][0] if rows else None


def _value(run: Prepared, item: int, seq: int):
    """The item's value known at log row ``seq`` (None for a policy without values)."""
    rows = _q(run, "SELECT arg_max(value_after, seq) FROM vals WHERE item = ? AND seq <= ?",
              [item, seq])  # fmt: skip
    return _num(rows[0][0]) if rows else None


def _item(run: Prepared, item_id: str):
    rows = _q(run, "SELECT item, event, derived_from FROM items WHERE item_id = ? LIMIT 1",
              [item_id])  # fmt: skip
    return rows[0] if rows else None


def _step(run: Prepared, kind: str, event: int, item: int, item_id: str, text: str,
          value=None, **extra) -> dict:  # fmt: skip
    return {"step": kind, "event": event, "t": _t(run, event), "item": item,
            "item_id": item_id, "value": _num(value), "text": text, **extra}  # fmt: skip


def _went_out(run: Prepared, item: int, item_id: str, before: int) -> tuple[dict, tuple] | None:
    """The step for the last time ``item`` left working memory before event ``before`` (its
    eviction, or its declined write), with that move's row."""
    rows = _q(run, """SELECT seq, event, kind, reason, cause_item, value_before, tier_after
                      FROM moves WHERE item = ? AND kind IN ('evict', 'decline') AND event < ?
                      ORDER BY seq DESC LIMIT 1""", [item, before])  # fmt: skip
    if not rows:
        return None
    seq, event, kind, reason, cause, value, tier = rows[0]
    if kind == "decline":
        text = f"{item_id}: its write at event {event} was declined ({reason}), to {tier}"
    else:
        why = f"{reason}: {cause}" if cause else reason
        text = f"{item_id} evicted at event {event} ({why}){_valued(value)}, to {tier}"
    return _step(run, kind, event, item, item_id, text, value, reason=reason,
                 cause_item_id=cause), rows[0]  # fmt: skip


def _valued(v) -> str:
    """``, value 0.6`` (nothing for a policy that keeps no values)."""
    v = _num(v)
    return "" if v is None else f", value {v:.4g}"


def _last_use(run: Prepared, item: int, item_id: str, before: int) -> dict:
    """When the evicted item was last needed before its eviction (what LRU-like policies rank
    by), or that it never was since its write."""
    rows = _q(run, """SELECT event, request_id FROM needs WHERE item = ? AND event < ?
                      ORDER BY seq DESC LIMIT 1""", [item, before])  # fmt: skip
    if rows:
        event, rid = rows[0]
        return _step(run, "last_use", event, item, item_id,
                     f"{item_id} last needed at event {event} (request {rid})", request_id=rid)  # fmt: skip
    wrote = _q(run, "SELECT event FROM items WHERE item = ?", [item])[0][0]
    return _step(run, "last_use", wrote, item, item_id,
                 f"{item_id} never needed since its write at event {wrote}")  # fmt: skip


def _came_in(
    run: Prepared, cause_id: str, event: int, out_seq: int
) -> tuple[list[dict], int | None]:
    """Steps for the item an eviction made room for: its admission (or fetch, or pin) at
    ``event`` with its value, and what it was derived from; and, when it came back after a
    miss of its own, the event of that miss (the chain goes on from there)."""
    found = _item(run, cause_id)
    if found is None:
        return [], None
    cause, _wrote, parents = found
    rows = _q(run, """SELECT seq, kind, reason FROM moves WHERE item = ? AND event = ?
                      AND kind IN ('admit', 'promote') ORDER BY seq LIMIT 1""", [cause, event])  # fmt: skip
    seq, kind, reason = rows[0] if rows else (out_seq, "admit", "admitted")
    value = _value(run, cause, max(seq, out_seq))
    verb = {"demand_fetch": "fetched back after a miss", "pinned": "pinned",
            "retrieval_promotion": "promoted by retrieval"}.get(reason, "written and admitted")  # fmt: skip
    steps = [_step(run, kind, event, cause, cause_id,
                   f"made room for {cause_id}, {verb} at event {event}{_valued(value)}",
                   value, reason=reason)]  # fmt: skip
    for parent_id in parents or []:
        parent = _item(run, parent_id)
        if parent is not None:
            steps.append(_step(run, "derived_from", int(parent[1]), parent[0], parent_id,
                               f"{cause_id} derived from {parent_id} (written at event "
                               f"{int(parent[1])})"))  # fmt: skip
    return steps, (event if reason == "demand_fetch" else None)


def miss_chain(run: Prepared, item: int, item_id: str, event: int) -> list[dict]:
    """The causes of the miss of ``item`` at event ``event``, nearest first."""
    steps: list[dict] = []
    seen = {item_id}
    while len(steps) < MAX_STEPS:
        out = _went_out(run, item, item_id, event)
        if out is None:
            steps.append(_step(run, "never_in", event, item, item_id,
                               f"{item_id} was not in working memory since its write"))  # fmt: skip
            break
        step, (seq, at, kind, _reason, cause_id, _v, _tier) = out
        steps.append(step)
        if kind == "decline":
            break
        steps.append(_last_use(run, item, item_id, at))
        if not cause_id or cause_id in seen:
            break
        seen.add(cause_id)
        came, fetched_at = _came_in(run, cause_id, at, seq)
        steps.extend(came)
        if fetched_at is None or not came:
            break
        item, item_id, event = came[0]["item"], cause_id, fetched_at
    return steps[:MAX_STEPS]
