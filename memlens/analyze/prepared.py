"""One run's event log, loaded once into an in-memory DuckDB database, split for the views.

Why: a 1,000,000-event run has a log of about four million rows.  Asking the Parquet file
directly, every view decodes those rows again (over a second each on a small machine).  Read
once into tables sorted for their lookups, a page of items or requests is a range scan that
DuckDB prunes by its zone maps, and the first paint only waits for small answers.

Tables (each column typed plainly; dictionary columns become VARCHAR):

* ``items``: one row per written item (its write row), with ``rank`` (position among the
  items of its stream); small tables are left unsorted (a scan costs milliseconds);
* ``moves``: admit, decline, evict, promote, demote, by (item, seq), with ``until_seq`` (the
  item's next move), so "where was every item at row s" is a filter, not a group-by;
* ``needs``: hit and miss rows (in file order, which is request order); ``reqs``: one row per request (needs,
  misses, whether every need hit, ``rank`` within the stream);
* ``vals``: rows carrying a value, by (item, seq); ``scored``: the items having one, ranked;
* ``times``: event -> trace time, its stream and ``local`` (the event's position among its
  stream's events: the per-stream views' axis).

The server keeps a few of these per process (:class:`PreparedCache`), keyed by the file's
path, size and modification time.
"""

from __future__ import annotations

import os
import threading
from collections import OrderedDict
from pathlib import Path

MOVE_KINDS = ("admit", "decline", "evict", "promote", "demote")
KINDS_SQL = ", ".join(f"'{k}'" for k in MOVE_KINDS)


def parquet_source(path: Path) -> str:
    return "read_parquet('" + str(path).replace("'", "''") + "')"


_TABLES = (
    """CREATE TABLE items AS
       SELECT item, item_id::VARCHAR AS item_id, stream::VARCHAR AS stream, event, t, tokens,
              item_type::VARCHAR AS item_type, text::VARCHAR AS text, derived_from,
              row_number() OVER (PARTITION BY stream ORDER BY item) - 1 AS rank
       FROM {src} WHERE kind = 'write'""",
    """CREATE TABLE moves AS
       SELECT item, seq, event, kind::VARCHAR AS kind, tier_before::VARCHAR AS tier_before,
              tier_after::VARCHAR AS tier_after, stream::VARCHAR AS stream, value_before,
              reason::VARCHAR AS reason, cause_item::VARCHAR AS cause_item,
              lead(seq) OVER (PARTITION BY item ORDER BY seq) AS until_seq,
              lead(event) OVER (PARTITION BY item ORDER BY seq) AS until_event
       FROM {src} WHERE kind IN ({kinds}){moves_filter} ORDER BY item, seq""",
    """CREATE TABLE needs AS
       SELECT request, request_id::VARCHAR AS request_id, seq, event, t, item,
              item_id::VARCHAR AS item_id, kind::VARCHAR AS kind,
              tier_before::VARCHAR AS tier_before, stream::VARCHAR AS stream
       FROM {src} WHERE kind IN ('hit', 'miss')""",
    """CREATE TABLE reqs AS
       SELECT request, any_value(request_id) AS request_id, any_value(stream) AS stream,
              min(event) AS event, count(*) AS needs, count(*) FILTER (kind = 'miss') AS misses,
              bool_and(kind = 'hit') AS ok,
              row_number() OVER (PARTITION BY any_value(stream) ORDER BY request) - 1 AS rank
       FROM needs GROUP BY request ORDER BY request""",
    """CREATE TABLE vals AS
       SELECT item, seq, event, value_after, stream::VARCHAR AS stream
       FROM {src} WHERE value_after IS NOT NULL AND NOT isnan(value_after)
       ORDER BY item, seq""",
    """CREATE TABLE scored AS
       SELECT item, any_value(stream) AS stream, min(seq) AS first,
              row_number() OVER (ORDER BY min(seq), item) - 1 AS rank_all,
              row_number() OVER (PARTITION BY any_value(stream) ORDER BY min(seq), item) - 1
                  AS rank
       FROM vals GROUP BY item ORDER BY item""",
    """CREATE TABLE times AS
       SELECT event, t, stream,
              row_number() OVER (PARTITION BY stream ORDER BY event) - 1 AS local
       FROM (SELECT event, any_value(t) AS t, any_value(stream::VARCHAR) AS stream
             FROM {src} GROUP BY event) ORDER BY event""",
)


class Prepared:
    """A run's event log as the tables above (built once; read by many threads)."""

    def __init__(self, path: Path, threads: int = 2, moves_below: int | None = None) -> None:
        """``moves_below``: keep in ``moves`` only the items whose index is below it, for a
        caller that reads no other items' moves (``report.html``'s first page of the
        timeline): the moves table is the dearest to build (a window over every move of the
        run, 40% of the build on 5,800 streams; issue 34)."""
        import duckdb

        self.path = Path(path)
        self.db = duckdb.connect(":memory:")
        self.db.execute(f"SET threads TO {int(threads)}")
        src = parquet_source(self.path)
        only = "" if moves_below is None else f" AND item < {int(moves_below)}"
        for sql in _TABLES:
            self.db.execute(sql.format(src=src, kinds=KINDS_SQL, moves_filter=only))
        self.info = self._summary()

    def cursor(self):
        """A connection to the same database for one thread (DuckDB's thread-safe way)."""
        return self.db.cursor()

    def _summary(self) -> dict:
        db = self.db
        kinds = dict(db.execute(f"""SELECT kind::VARCHAR, count(*) FROM {parquet_source(self.path)}
                                    GROUP BY 1 ORDER BY 1""").fetchall())  # fmt: skip
        lo, hi = db.execute("SELECT min(event), max(event) FROM times").fetchone()
        streams = [
            r[0] for r in db.execute("SELECT DISTINCT stream FROM items ORDER BY 1").fetchall()
        ]
        per_stream = dict(db.execute("SELECT stream, count(*) FROM items GROUP BY 1").fetchall())
        req_stream = dict(db.execute("SELECT stream, count(*) FROM reqs GROUP BY 1").fetchall())
        scored = dict(db.execute("SELECT stream, count(*) FROM scored GROUP BY 1").fetchall())
        spans = {s: (lo_e, hi_e, lo_t, hi_t) for s, lo_e, hi_e, lo_t, hi_t in db.execute(
            "SELECT stream, min(event), max(event), min(t), max(t) FROM times GROUP BY 1").fetchall()}  # fmt: skip
        return {"rows": sum(kinds.values()), "kinds": kinds, "items": sum(per_stream.values()),
                "requests": sum(req_stream.values()), "first_event": lo or 0,
                "last_event": hi or 0, "streams": streams, "scored": bool(scored),
                "items_by_stream": per_stream, "requests_by_stream": req_stream,
                "scored_by_stream": scored, "stream_spans": spans}  # fmt: skip


class PreparedCache:
    """The last few prepared runs of this process, each built once even when several
    requests ask for it at the same time."""

    def __init__(self, size: int = 4) -> None:
        self.size = size
        self.lock = threading.Lock()
        self.runs: OrderedDict[tuple, Prepared] = OrderedDict()
        self.building: dict[tuple, threading.Lock] = {}

    def get(self, path: Path) -> Prepared:
        st = os.stat(path)
        key = (str(path), st.st_size, st.st_mtime_ns)
        with self.lock:
            if key in self.runs:
                self.runs.move_to_end(key)
                return self.runs[key]
            build_lock = self.building.setdefault(key, threading.Lock())
        with build_lock:
            with self.lock:
                if key in self.runs:
                    return self.runs[key]
            prepared = Prepared(path)
            with self.lock:
                self.runs[key] = prepared
                self.building.pop(key, None)
                while len(self.runs) > self.size:
                    self.runs.popitem(last=False)
            return prepared
