"""The compiled bulk reader: a block of trace lines at a time, validated in bulk.

Owns: the reader that vouches for a whole block or gives up (``parse``), the numba scanner of
the common line forms (``scan``) and the compiled whole-trace rules (``rules``).  Whatever it
gives up on, ``memlens.trace.io.load_trace`` hands to the exact reader (``memlens.trace.jsonl``),
so every error message is the exact reader's.

May import: ``memlens.trace`` (model, limits, lines, packed, idtable) and ``memlens._util``;
never ``memlens.trace.io`` or ``memlens.trace.jsonl`` (they sit above it).
"""
