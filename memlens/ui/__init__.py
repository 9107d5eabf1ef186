"""``memlens ui``: the local analytics page (server, DuckDB queries, static assets)."""
