"""The trace format's limits and versions, in one place: the header versions, the fields of each
event kind, the largest numbers and deepest nesting accepted, and the checks of a value against
them.  Both readers (the exact one, ``memlens.trace.io``, and the bulk one,
``memlens.trace.bulk``) import them from here, so they cannot disagree.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

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
#: Most blank (empty or whitespace-only) lines a trace may have: a gzip of gigabytes of
#: newlines (a few megabytes on disk) would otherwise be read a line at a time for minutes.
MAX_BLANK_LINES = 1_000_000
#: Most bytes a gzip trace may decompress to per byte read of the file.  Real traces compress
#: 5 to 10 times; a gzip bomb about 1,000 times.  Checked once
#: :data:`RATIO_CHECK_BYTES` have been decompressed, so a small file is never refused for it.
MAX_DECOMPRESSION_RATIO = 200.0
RATIO_CHECK_BYTES = 64 << 20


@dataclass
class TraceLimits:
    """``trace_limits:`` how much a trace file may make the reader do (``memlens.trace.lines``;
    the longest line is ``max_line_bytes``, a reader argument): the most blank lines and the
    largest decompression ratio.  Each stops the read with one error line naming the file, the
    line and the setting, in bounded time."""

    max_blank_lines: int = MAX_BLANK_LINES  # blank lines in the whole file
    max_decompression_ratio: float = MAX_DECOMPRESSION_RATIO  # gzip: bytes out per byte in

    def __post_init__(self) -> None:
        value = self.max_blank_lines
        if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < 2**62:
            raise ValueError(f"trace_limits.max_blank_lines must be an integer >= 0, "
                             f"got {value!r}")  # fmt: skip
        ratio = self.max_decompression_ratio
        if isinstance(ratio, bool) or not isinstance(ratio, (int, float)) or not (
                math.isfinite(ratio) and ratio >= 1):  # fmt: skip
            raise ValueError("trace_limits.max_decompression_ratio must be a finite number "
                             f">= 1, got {ratio!r}")  # fmt: skip


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
