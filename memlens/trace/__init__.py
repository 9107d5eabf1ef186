"""Traces: the model, reading and writing, and what is derived from a trace alone.

Owns: the in-memory columnar model (``model``), the limits and format versions of the JSON
Lines format (``limits``), the exact line-by-line reader and the writer (``jsonl``), safe line
reading (``lines``), loading with the bulk reader first and the exact one as fallback (``io``),
the compiled bulk reader (``bulk/``), packed string columns and id tables (``packed``,
``idtable``), the parsed-trace cache (``cache``), synthetic generators (``generate``), classic
cache traces (``classic``), token counting (``tokenizer``), content features (``features``) and
words as scikit-learn's vectorisers find them (``words``).

May import: ``memlens._util`` only.  Nothing here knows about policies, replays or runs.

``memlens.trace.Trace`` and the event-kind constants are re-exported here (a public path);
inside MemLens, modules import them from ``memlens.trace.model``.
"""

from memlens.trace.model import (
    ANNOTATE,
    EVENT_KINDS,
    ITEM_TYPES,
    PIN,
    REQUEST,
    TYPE_CODE,
    UNPIN,
    WRITE,
    EventKind,
    Trace,
)

__all__ = [
    "ANNOTATE",
    "EVENT_KINDS",
    "ITEM_TYPES",
    "PIN",
    "REQUEST",
    "TYPE_CODE",
    "UNPIN",
    "WRITE",
    "EventKind",
    "Trace",
]
