"""How MemLens's Parquet files are encoded: the writer options every table shares.

The encodings change how a file is stored, never what it holds (a table reads back equal):
dictionaries only for columns of few distinct values (on ids and event numbers the encoding
costs time and saves nothing), deltas for integer columns whose values ascend (event numbers:
``moves.parquet`` 11.1 -> 8.1 MB), and min/max statistics for numeric columns only, which a
range query (``event BETWEEN ...``) can use to skip row groups; those of text columns were a
fifth of writing the moves and 0.3 s of the event log's 1.0 s for 2.6M rows (issue 34).
"""

from __future__ import annotations


def writer_options(schema, dictionary: tuple[str, ...] | None, ascending: tuple[str, ...] = ()):
    """``pyarrow.parquet.ParquetWriter`` options for a table of ``schema``: ``dictionary``, the
    columns to dictionary-encode (None: all); ``ascending``, the integer columns stored as
    deltas (never dictionary-encoded ones)."""
    import pyarrow as pa

    numeric = [
        f.name for f in schema if pa.types.is_integer(f.type) or pa.types.is_floating(f.type)
    ]
    options = {"use_dictionary": True if dictionary is None else list(dictionary),
               "write_statistics": numeric}  # fmt: skip
    if ascending:
        if dictionary is None or set(ascending) & set(dictionary):
            raise ValueError("an ascending column is delta-encoded, not dictionary-encoded")
        options["column_encoding"] = dict.fromkeys(ascending, "DELTA_BINARY_PACKED")
    return options
