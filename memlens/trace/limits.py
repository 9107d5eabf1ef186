"""The trace format's limits and versions, in one place: the header versions, the fields of each
event kind, the largest numbers and deepest nesting accepted, and the checks of a value against
them.  Both readers (the exact one, ``memlens.trace.io``, and the bulk one,
``memlens.trace.bulk``) import them from here, so they cannot disagree.
"""

from __future__ import annotations

import math

from memlens.trace.model import EVENT_KINDS

FORMAT_VERSION = 1
#: The format that allows alternatives in ``needs`` (written as this string in the header).
ALTERNATIVES_VERSION = "1.1"
FORMAT_VERSION_1 = "1"  # the builder's name for version 1 (headers may say 1 or "1")
#: Header ``version`` values accepted, and the format each one means.
VERSIONS = {1: "1", "1": "1", 1.1: "1.1", "1.1": "1.1"}
WRITE_FIELDS = frozenset(
    {"event", "id", "tokens", "type", "stream", "t", "text", "cost", "task", "session", "meta"}
)
REQUEST_FIELDS = frozenset({"event", "id", "needs", "stream", "t", "text", "meta"})
TARGET_FIELDS = frozenset({"event", "target", "stream", "t", "meta", "value", "note"})
KIND_CODE = {name: code for code, name in enumerate(EVENT_KINDS)}
#: Largest ``tokens`` of an item: sums over millions of items must stay far inside int64.
MAX_TOKENS = 2**31 - 1
#: Largest absolute ``t`` (seconds) and ``cost`` (USD): sums and differences stay finite.
MAX_MAGNITUDE = 1e15
#: Deepest nesting of objects and lists in an event (``meta`` and unknown fields included).
MAX_DEPTH = 64
#: Most events a trace may have (event, item and request indices are int32), and its last
#: line number (``Trace.ev_line`` is int32).
MAX_EVENTS, MAX_LINE = 2**30, 2**31 - 1
#: A string column of a loaded trace that passes this many bytes spills to a temporary file.
SPILL_BYTES = 16 << 20


def finite_number(x, limit: float) -> float | None:
    """``x`` as a float if it is a real number (not a bool) of magnitude at most ``limit``."""
    if isinstance(x, bool) or not isinstance(x, (int, float)):
        return None
    try:
        f = float(x)
    except OverflowError:
        return None
    return f if math.isfinite(f) and abs(f) <= limit else None


def shown(value) -> str:
    """``repr(value)``, cut short: an error message must stay one readable line."""
    text = repr(value)
    return text if len(text) <= 80 else f"{text[:60]}... ({len(text):,} characters)"


def depth_error(obj: dict) -> tuple[str | None, str] | None:
    """(field, message) if ``obj`` nests deeper than :data:`MAX_DEPTH`, else None."""
    stack = [(v, 1, k) for k, v in obj.items()] if isinstance(obj, dict) else [(obj, 0, None)]
    while stack:
        value, depth, top = stack.pop()
        if isinstance(value, (dict, list)):
            if depth >= MAX_DEPTH:
                where = f'field "{top}"' if top is not None else "the line"
                return top, f"{where} is nested deeper than {MAX_DEPTH} levels"
            items = value.values() if isinstance(value, dict) else value
            stack.extend((v, depth + 1, top) for v in items)
    return None
