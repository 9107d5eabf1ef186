"""Questions asked of one run's event log, answered by DuckDB on the server.

Why here and not in the browser: a run of a million events has a log of several million rows;
the page only ever receives aggregates or one page of items (``limit`` rows at most, capped at
:data:`MAX_LIMIT`), so the browser stays responsive whatever the run's size.  The static report
(``memlens.present.static_report``) asks the same questions, so the page and the report agree.

Every function but :func:`diff` takes a :class:`memlens.analyze.prepared.Prepared` run (the log
loaded once into sorted tables) and returns plain JSON-able values.  Tiers: ``new`` (not yet
written), ``wm`` (working memory), ``stc`` (short-term cache), ``lts`` (long-term store).
Items are paged in write order (item index), requests in request order, within the chosen
stream.
"""

from __future__ import annotations

import math
import re
from pathlib import Path

from memlens.analyze.causes import miss_chain
from memlens.analyze.prepared import KINDS_SQL, Prepared, parquet_source

MAX_LIMIT = 500  # rows of any list the page can ask for at once
_DIGITS = re.compile(r"(\d+)")


def _q(run: Prepared, sql: str, params: list | None = None) -> list[tuple]:
    return run.cursor().execute(sql, params or []).fetchall()


def _num(x):
    """NaN and None become None (JSON has no NaN)."""
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return None
    return x


def _limit(limit, default: int) -> int:
    return min(max(int(limit if limit is not None else default), 1), MAX_LIMIT)


def summary(run: Prepared) -> dict:
    """Counts by kind, items, requests, streams and the event range (computed at load)."""
    keep = ("rows", "kinds", "items", "requests", "first_event", "last_event", "scored")
    out = {k: run.info[k] for k in keep}
    out["streams"] = summary_streams(run)
    out["stream_spans"] = {k: dict(zip(("first_event", "last_event", "first_t", "last_t"), v))
                           for k, v in run.info["stream_spans"].items()}  # fmt: skip
    return out


def _page(table: str, stream: str | None, offset: int, limit: int) -> tuple[str, list]:
    """The WHERE clause of one page of ``items``/``reqs``/``scored`` rows, by rank."""
    if stream:
        return "stream = ? AND rank >= ? AND rank < ?", [stream, offset, offset + limit]
    rank = "rank_all" if table == "scored" else {"items": "item", "reqs": "request"}[table]
    return f"{rank} >= ? AND {rank} < ?", [offset, offset + limit]


def _total(run: Prepared, key: str, stream: str | None) -> int:
    counts = run.info[key]
    return int(counts.get(stream, 0) if stream else sum(counts.values()))


def natural_key(name: str) -> tuple:
    """Sort key that puts ``agent2`` before ``agent10`` (digit runs compare as numbers)."""
    return tuple((0, int(p), "") if p.isdigit() else (1, 0, p) for p in _DIGITS.split(name) if p)


def summary_streams(run: Prepared) -> list[str]:
    return sorted(run.info["streams"], key=natural_key)


def timeline(run: Prepared, stream: str | None = None, offset: int = 0, limit: int = 40) -> dict:
    """Items across the tiers over time, one page of items (in write order): segments (item,
    from event, to event, tier, and the same ends as trace time and as the event's position in
    its stream); the last segment runs to the end of the item's stream (of the run, without a
    stream)."""
    limit, offset = _limit(limit, 40), max(int(offset), 0)
    where, params = _page("items", stream, offset, limit)
    end = run.info["stream_spans"][stream][1] if stream in run.info["stream_spans"] else (
        run.info["last_event"])  # fmt: skip
    rows = _q(run, f"""
        WITH page AS (SELECT item FROM items WHERE {where})
        SELECT m.item, i.item_id, m.event, coalesce(m.until_event, ?), m.tier_after,
               a.t, b.t, a.local, b.local, m.until_event IS NULL
        FROM moves m JOIN page USING (item) JOIN items i USING (item)
             JOIN times a ON a.event = m.event
             LEFT JOIN times b ON b.event = coalesce(m.until_event, ?)
        WHERE m.item BETWEEN (SELECT min(item) FROM page) AND (SELECT max(item) FROM page)
        ORDER BY m.item, m.seq""", [*params, end, end])  # fmt: skip
    segs = [{"item": i, "item_id": iid, "start": e, "end": u, "tier": tier, "t_start": ta,
             "t_end": ta if tb is None else tb, "local_start": la,
             "local_end": la if lb is None else lb}
            for i, iid, e, u, tier, ta, tb, la, lb, last in rows if last or u > e]  # fmt: skip
    return {"total_items": _total(run, "items_by_stream", stream), "offset": offset,
            "limit": limit, "segments": segs, "last_event": end}  # fmt: skip


def _bin_range(run: Prepared, stream: str | None) -> tuple[str, int, int]:
    """(the column binned, its first value, one past its last): a stream's views bin its own
    events (``times.local``), the run's view the global event index."""
    span = run.info["stream_spans"].get(stream) if stream else None
    if span is None:
        return "v.event", run.info["first_event"], run.info["last_event"] + 1
    n = _q(run, "SELECT count(*) FROM times WHERE stream = ?", [stream])[0][0]
    return "tm.local", 0, max(int(n), 1)


def heatmap(run: Prepared, stream: str | None = None, offset: int = 0, limit: int = 30,
            bins: int = 40) -> dict:  # fmt: skip
    """Value per item x time bin (the last value recorded in the bin, carried forward), for a
    page of scored items ordered by their first value.  Empty for policies without values.
    With a stream the bins divide that stream's own events (so rows are not flattened by the
    other streams' events); ``bins_t`` is the trace time where each bin starts."""
    limit, offset, bins = _limit(limit, 30), max(int(offset), 0), min(max(int(bins), 1), 400)
    col, lo, hi = _bin_range(run, stream)
    where, params = _page("scored", stream, offset, limit)
    rows = _q(run, f"""
        WITH page AS (SELECT item, first FROM scored WHERE {where})
        SELECT v.item, any_value(i.item_id), min(p.first),
               least(CAST(floor(({col} - ?) * ? / ?) AS BIGINT), ? - 1) AS bin,
               arg_max(v.value_after, v.seq)
        FROM vals v JOIN page p USING (item) JOIN items i USING (item)
             JOIN times tm ON tm.event = v.event
        WHERE v.item BETWEEN (SELECT min(item) FROM page) AND (SELECT max(item) FROM page)
        GROUP BY v.item, bin ORDER BY 3, 1, 4""", [*params, lo, bins, hi - lo, bins])  # fmt: skip
    items: dict[int, str] = {}
    cells: dict[int, dict[int, float]] = {}
    for item, iid, _first, b, v in rows:
        items[item] = iid
        cells.setdefault(item, {})[int(b)] = v
    z = []
    for item in items:
        row, last = [], None
        for b in range(bins):
            last = cells[item].get(b, last)
            row.append(_num(last))
        z.append(row)
    edges = [lo + (hi - lo) * b / bins for b in range(bins)]
    return {"total_items": _total(run, "scored_by_stream", stream), "offset": offset,
            "items": list(items.values()), "item_index": list(items), "bins": edges,
            "bins_t": _edge_times(run, stream, edges), "axis": "local" if col != "v.event"
            else "event", "z": z}  # fmt: skip


def _edge_times(run: Prepared, stream: str | None, edges: list[float]) -> list:
    """Trace time at each bin edge (of the first event at or after it; in the stream, if any)."""
    at = [math.ceil(x) for x in edges]
    col, where, params = ("local", "stream = ?", [stream]) if stream else ("event", "TRUE", [])
    rows = dict(_q(run, f"SELECT {col}, t FROM times WHERE {where} AND {col} IN (SELECT unnest(?))",
                   [*params, at]))  # fmt: skip
    return [_num(rows.get(x)) for x in at]


def graph(run: Prepared, stream: str | None = None, offset: int = 0, limit: int = 20) -> dict:
    """Requests -> the items they needed (hit or missed, with the item's tier just before the
    request), for a page of requests, and the derivation edges (``derived_from``) touching
    those items; every node carries its stream and trace time (the write's, the request's),
    so the page can lay the graph out on a time axis by stream."""
    limit, offset = _limit(limit, 20), max(int(offset), 0)
    where, params = _page("reqs", stream, offset, limit)
    rows = _q(run, f"""
        WITH page AS (SELECT request FROM reqs WHERE {where})
        SELECT n.request, n.request_id, n.event, n.item, n.item_id, n.kind, n.t, n.stream,
               n.tier_before, i.t, i.event
        FROM needs n JOIN page USING (request) JOIN items i USING (item)
        WHERE n.request BETWEEN (SELECT min(request) FROM page) AND (SELECT max(request) FROM page)
        ORDER BY n.request, n.seq""", params)  # fmt: skip
    requests, items, edges = {}, {}, []
    for r, rid, e, i, iid, kind, t, st, tier, it, ie in rows:
        requests.setdefault(r, {"request": r, "request_id": rid, "event": e, "t": t, "stream": st})
        items[i] = {"item": i, "item_id": iid, "t": it, "event": ie, "stream": st, "tier": tier}
        edges.append({"request": r, "item": i, "hit": kind == "hit", "tier": tier})
    derived = _derived_edges(run, list(items))
    missing = [d[end] for d in derived for end in ("parent", "child") if d[end] not in items]
    for i, iid, t, e, st in _q(run, """SELECT item, item_id, t, event, stream FROM items
                                       WHERE item IN (SELECT unnest(?))""", [missing]):  # fmt: skip
        items[i] = {"item": i, "item_id": iid, "t": t, "event": e, "stream": st, "tier": None}
    return {"total_requests": _total(run, "requests_by_stream", stream), "offset": offset,
            "requests": list(requests.values()), "items": list(items.values()),
            "edges": edges, "derived": derived}  # fmt: skip


def item_view(run: Prepared, item_id: str, limit: int = 100) -> dict:
    """One item: its write (stream, event, time, tokens, text), its moves across the tiers and
    the requests that needed it (hit or miss), each at most ``limit`` rows."""
    rows = _q(run, """SELECT item, stream, event, t, tokens, item_type, text, derived_from
                      FROM items WHERE item_id = ? LIMIT 1""", [item_id])  # fmt: skip
    if not rows:
        raise KeyError(f"item {item_id!r}: no such item in this run")
    item, stream, event, t, tokens, kind, text, parents = rows[0]
    moves = _q(run, """SELECT m.event, tm.t, m.kind, m.tier_before, m.tier_after, m.reason,
                              m.cause_item
                       FROM moves m JOIN times tm USING (event) WHERE m.item = ?
                       ORDER BY m.seq LIMIT ?""", [item, _limit(limit, 100)])  # fmt: skip
    needs = _q(run, """SELECT request, request_id, event, t, kind, tier_before FROM needs
                       WHERE item = ? ORDER BY seq LIMIT ?""", [item, _limit(limit, 100)])  # fmt: skip
    mk = ("event", "t", "kind", "tier_before", "tier_after", "reason", "cause_item_id")
    nk = ("request", "request_id", "event", "t", "kind", "tier")
    return {"item": item, "item_id": item_id, "stream": stream, "event": event, "t": t,
            "tokens": tokens, "item_type": kind, "text": text, "derived_from": parents or [],
            "moves": [dict(zip(mk, m)) for m in moves],
            "needs": [dict(zip(nk, n)) for n in needs]}  # fmt: skip


def _derived_edges(run: Prepared, items: list[int]) -> list[dict]:
    """Derivation edges (parent -> child) touching ``items``, at most :data:`MAX_LIMIT`."""
    if not items:
        return []
    rows = _q(run, f"""
        WITH d AS (SELECT item AS child, item_id AS child_id, unnest(derived_from) AS parent_id
                   FROM items WHERE derived_from IS NOT NULL)
        SELECT i.item, d.parent_id, d.child, d.child_id FROM d JOIN items i ON i.item_id = d.parent_id
        WHERE d.child IN (SELECT unnest(?)) OR i.item IN (SELECT unnest(?))
        ORDER BY d.child, i.item LIMIT {MAX_LIMIT}""", [items, items])  # fmt: skip
    return [{"parent": p, "parent_id": pid, "child": c, "child_id": cid}
            for p, pid, c, cid in rows]  # fmt: skip


def resident_at(run: Prepared, stream: str, cut_seq: int) -> list:
    """Items in working memory of ``stream`` just after log row ``cut_seq``, each with its
    tokens, text and last value known by then."""
    rows = _q(run, """
        WITH wm AS (SELECT item FROM moves WHERE stream = ? AND tier_after = 'wm' AND seq <= ?
                    AND (until_seq IS NULL OR until_seq > ?)),
        val AS (SELECT item, arg_max(value_after, seq) AS value FROM vals
                WHERE item IN (SELECT item FROM wm) AND seq <= ? GROUP BY item)
        SELECT i.item, i.item_id, i.tokens, i.text, val.value
        FROM wm JOIN items i USING (item) LEFT JOIN val USING (item) ORDER BY i.item""",
               [stream, cut_seq, cut_seq, cut_seq])  # fmt: skip
    return [{"item": i, "item_id": iid, "tokens": tok, "text": txt, "tier": "wm",
             "value": _num(v)} for i, iid, tok, txt, v in rows]  # fmt: skip


def _last_eviction(run: Prepared, item: int, event: int) -> dict | None:
    rows = _q(run, """SELECT seq, event, reason, cause_item, value_before, tier_after, stream
                      FROM moves WHERE item = ? AND kind IN ('evict', 'decline') AND event < ?
                      ORDER BY seq DESC LIMIT 1""", [item, event])  # fmt: skip
    if not rows:
        return None
    seq, e, reason, cause, value, tier, stream = rows[0]
    t = _q(run, "SELECT t FROM times WHERE event = ?", [e])[0][0]
    return {"seq": seq, "event": e, "t": t, "reason": reason, "cause_item_id": cause,
            "value": _num(value), "to_tier": tier,
            "kept_instead": resident_at(run, stream, seq)}  # fmt: skip


def requests_page(run: Prepared, stream: str | None = None, offset: int = 0, limit: int = 50,
                  worst_first: bool = True) -> dict:  # fmt: skip
    """Requests with their needs, hits and misses; worst (most misses) first by default."""
    limit, offset = _limit(limit, 50), max(int(offset), 0)
    where, params = ("WHERE stream = ?", [stream]) if stream else ("", [])
    order = "misses DESC, request" if worst_first else "request"
    rows = _q(run, f"""SELECT request, request_id, stream, event, needs, misses FROM reqs {where}
                       ORDER BY {order} LIMIT ? OFFSET ?""", [*params, limit, offset])  # fmt: skip
    keys = ("request", "request_id", "stream", "event", "needs", "misses")
    return {"total": _total(run, "requests_by_stream", stream), "offset": offset,
            "rows": [dict(zip(keys, r)) for r in rows]}  # fmt: skip


def influence(run: Prepared, request: int) -> dict:
    """One request: what was in context (tier, value), its needs hit and missed, and for each
    miss the eviction (or declined write) that put it out, why, and what was kept instead."""
    needs = _q(run, """SELECT n.item, n.item_id, n.kind, n.tier_before, n.event, n.stream,
                              n.request_id, n.t, i.text, n.seq
                       FROM needs n JOIN items i USING (item) WHERE n.request = ?
                       ORDER BY n.seq""", [int(request)])  # fmt: skip
    if not needs:
        raise KeyError(f"request {request}: no such request in this run")
    event, stream, rid, t, first_seq = (
        needs[0][4],
        needs[0][5],
        needs[0][6],
        needs[0][7],
        needs[0][9],
    )
    out = []
    for item, iid, kind, tier, *_rest, text, _seq in needs:
        row = {"item": item, "item_id": iid, "hit": kind == "hit", "tier": tier, "text": text}
        if kind == "miss":
            row["evicted"] = _last_eviction(run, item, event)
            row["chain"] = miss_chain(run, item, iid, event)
        out.append(row)
    return {"request": int(request), "request_id": rid, "event": event, "t": t, "stream": stream,
            "context": resident_at(run, stream, first_seq - 1), "needs": out}  # fmt: skip


def diff(path_a: Path, path_b: Path, offset: int = 0, limit: int = 50) -> dict:
    """Two runs of one trace (their Parquet files, read directly): the first move where they
    differ, and the requests one hits (every need present) and the other misses."""
    import duckdb

    db = duckdb.connect(":memory:")
    a, b = parquet_source(path_a), parquet_source(path_b)
    limit, offset = _limit(limit, 50), max(int(offset), 0)
    kinds = KINDS_SQL.replace(", 'demote'", "")
    moves = f"""SELECT row_number() OVER (ORDER BY seq) AS k, event, item, item_id::VARCHAR AS id,
                       kind::VARCHAR AS kind FROM {{}} WHERE kind IN ({kinds})"""
    first = db.execute(f"""
        SELECT coalesce(x.k, y.k), x.event, x.id, x.kind, y.event, y.id, y.kind
        FROM ({moves.format(a)}) x FULL JOIN ({moves.format(b)}) y ON x.k = y.k
        WHERE x.k IS NULL OR y.k IS NULL OR x.event <> y.event OR x.item <> y.item
           OR x.kind <> y.kind
        ORDER BY 1 LIMIT 1""").fetchall()  # fmt: skip
    diverge = None
    if first:
        k, ea, ia, ka, eb, ib, kb = first[0]
        diverge = {"move": k, "a": {"event": ea, "item_id": ia, "kind": ka},
                   "b": {"event": eb, "item_id": ib, "kind": kb}}  # fmt: skip
    per = """SELECT request, any_value(request_id::VARCHAR) AS rid, min(event) AS event,
                    bool_and(kind = 'hit') AS ok FROM {} WHERE kind IN ('hit', 'miss')
             GROUP BY request"""
    base = f"""SELECT x.request, x.rid, x.event, x.ok AS a_ok, y.ok AS b_ok
               FROM ({per.format(a)}) x JOIN ({per.format(b)}) y USING (request)
               WHERE x.ok <> y.ok"""
    total = db.execute(f"SELECT count(*) FROM ({base})").fetchone()[0]
    rows = db.execute(f"{base} ORDER BY event LIMIT ? OFFSET ?", [limit, offset]).fetchall()
    keys = ("request", "request_id", "event", "a_hits", "b_hits")
    return {"first_divergence": diverge, "total": total, "offset": offset,
            "rows": [dict(zip(keys, r)) for r in rows],
            "over_time": _diff_bins(db, a, base)}  # fmt: skip


def _diff_bins(db, source: str, base: str, bins: int = 40) -> list[dict]:
    """Where the two runs' request outcomes differ over the run: per bin of global event
    index, how many requests only A hits entirely and how many only B does."""
    lo, hi = db.execute(f"SELECT min(event), max(event) + 1 FROM {source}").fetchone()
    if lo is None:
        return []
    width = max((hi - lo) / bins, 1.0)
    got = db.execute(f"""SELECT CAST(floor((event - ?) / ?) AS BIGINT) AS b,
                                count(*) FILTER (a_ok), count(*) FILTER (b_ok)
                         FROM ({base}) GROUP BY b""", [lo, width]).fetchall()  # fmt: skip
    counts = {int(b): (int(x), int(y)) for b, x, y in got}
    n = min(bins, int(math.ceil((hi - lo) / width)))
    return [{"start": lo + k * width, "end": min(lo + (k + 1) * width, hi),
             "a_only": counts.get(k, (0, 0))[0], "b_only": counts.get(k, (0, 0))[1]}
            for k in range(n)]  # fmt: skip


def item_at(run: Prepared, item_id: str) -> dict:
    """An item's stream and write event (what a feedback row needs)."""
    rows = _q(run, "SELECT item, stream, event, t FROM items WHERE item_id = ? LIMIT 1",
              [item_id])  # fmt: skip
    if not rows:
        raise KeyError(f"item {item_id!r}: no such item in this run")
    item, stream, event, t = rows[0]
    return {"item": item, "stream": stream, "event": event, "t": t}


def event_time(run: Prepared, event: int) -> float | None:
    rows = _q(run, "SELECT t FROM times WHERE event = ?", [int(event)])
    return rows[0][0] if rows else None
