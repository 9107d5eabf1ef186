"""``report.html``'s three views, answered from the event log's columns while the run holds them.

Why: ``simulate`` writes ``events.parquet`` and then ``report.html`` from it.  Answering the
report's three questions through ``memlens.analyze.prepared`` meant reading the file just
written back into DuckDB and building every table of the page (items with their text, needs,
times: some four million rows on 5,800 streams) to show 40 items, 30 value rows and 20
requests: 1.5 s of a 9 s run (issue 34).  Here the same answers come from the numpy columns of
``memlens.analyze.eventlog.build_event_log``, in a few vector passes.

Each function returns what its namesake in ``memlens.analyze.queries`` returns for the run-wide
view (no stream, offset 0) and the fields ``memlens.present.static_report`` draws;
``tests/analyze/test_logviews.py`` holds the two to the same HTML on generated runs of every
kind of policy.  The page (``memlens ui``) keeps the DuckDB tables: it pages, filters by
stream and asks many more questions.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import numpy as np

from memlens.analyze.eventlog import KINDS, TIERS

_MOVES = np.array([KINDS.index(k) for k in ("admit", "decline", "evict", "promote", "demote")])
_HIT, _MISS, _WRITE = KINDS.index("hit"), KINDS.index("miss"), KINDS.index("write")


@dataclass
class EventLog:
    """One run's event log columns (``build_event_log``) and its trace's string tables."""

    cols: dict[str, np.ndarray]
    trace: object

    @cached_property
    def first_event(self) -> int:
        return int(self.cols["event"].min()) if len(self.cols["event"]) else 0

    @cached_property
    def last_event(self) -> int:
        return int(self.cols["event"].max()) if len(self.cols["event"]) else 0

    def stream_name(self, row: int) -> str:
        """The row's stream: its item's, else its request's (``eventlog.event_table``)."""
        item, req = int(self.cols["item"][row]), int(self.cols["request"][row])
        code = self.trace.item_stream[item] if item >= 0 else self.trace.req_stream[req]
        return str(self.trace.stream_names[int(code)])


def timeline(log: EventLog, limit: int = 40) -> dict:
    """The first ``limit`` items' segments across the tiers (``queries.timeline``)."""
    kind, item, event = log.cols["kind"], log.cols["item"], log.cols["event"]
    total = int(np.count_nonzero(kind == _WRITE))
    rows = np.flatnonzero(np.isin(kind, _MOVES) & (item >= 0) & (item < limit))
    rows = rows[np.lexsort((rows, item[rows]))]  # by (item, seq)
    its, evs, tiers = item[rows], event[rows], log.cols["tier_after"][rows]
    last = np.append(its[1:] != its[:-1], True)  # no later move of the same item
    ends = np.where(last, log.last_event, np.append(evs[1:], 0))
    segments = [{"item": int(i), "item_id": str(log.trace.item_id[int(i)]), "start": int(e),
                 "end": int(u), "tier": TIERS[int(t)]}
                for i, e, u, t, z in zip(its, evs, ends, tiers, last) if z or u > e]  # fmt: skip
    return {"total_items": total, "segments": segments, "last_event": log.last_event}


def heatmap(log: EventLog, limit: int = 30, bins: int = 40) -> dict:
    """Value per item x event bin for the first ``limit`` scored items (``queries.heatmap``):
    the last value recorded in each bin, carried forward."""
    value, item = log.cols["value_after"], log.cols["item"]
    rows = np.flatnonzero(~np.isnan(value) & (item >= 0))
    scored, first = np.unique(item[rows], return_index=True)  # first: the item's first row
    page = scored[np.argsort(rows[first], kind="stable")][:limit]  # by their first value's seq
    lo, hi = log.first_event, log.last_event + 1
    z, ids = [], []
    for it in page.tolist():
        mine = rows[item[rows] == it]
        b = np.minimum(np.floor((log.cols["event"][mine] - lo) * bins / (hi - lo)), bins - 1)
        cells = {int(k): float(v) for k, v in zip(b, value[mine])}  # rows in seq order: last wins
        row, current = [], None
        for k in range(bins):
            current = cells.get(k, current)
            row.append(current)
        z.append(row)
        ids.append(str(log.trace.item_id[it]))
    return {"total_items": int(scored.size), "items": ids, "item_index": page.tolist(), "z": z}


def requests_page(log: EventLog, limit: int = 20) -> dict:
    """The requests with the most misses (``queries.requests_page``, worst first)."""
    kind, req = log.cols["kind"], log.cols["request"]
    rows = np.flatnonzero((kind == _HIT) | (kind == _MISS))
    if not rows.size:
        return {"total": 0, "rows": []}
    order = rows[np.argsort(req[rows], kind="stable")]
    reqs, start = np.unique(req[order], return_index=True)
    needs = np.diff(np.append(start, order.size))
    misses = np.add.reduceat((kind[order] == _MISS).astype(np.int64), start)
    events = np.minimum.reduceat(log.cols["event"][order], start)
    worst = np.lexsort((reqs, -misses))[:limit]
    out = [{"request": int(reqs[k]), "request_id": str(log.trace.req_id[int(reqs[k])]),
            "stream": log.stream_name(int(order[start[k]])), "event": int(events[k]),
            "needs": int(needs[k]), "misses": int(misses[k])} for k in worst]  # fmt: skip
    return {"total": int(reqs.size), "rows": out}
