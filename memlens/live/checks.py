"""Checks of the manager's arguments, before anything is recorded: each error names the field.

The trace loader would refuse the same values in the record (``memlens.trace.io``); checking
them here first keeps a bad call from ever reaching the record, so a record always loads.
"""

from __future__ import annotations

import orjson

from memlens.trace.limits import (
    MAX_DEPTH,
    MAX_MAGNITUDE,
    MAX_TOKENS,
    depth_error,
    finite_number,
    shown,
)
from memlens.trace.model import TYPE_CODE


def text(value, field: str) -> str:
    if not isinstance(value, str):
        raise ValueError(f"{field}: must be a string, got {shown(value)}")
    return value


def stream(value) -> str:
    if not isinstance(value, str) or not value:
        raise ValueError(f"stream: must be a non-empty string, got {shown(value)}")
    return value


def item_type(value) -> int:
    code = TYPE_CODE.get(value) if isinstance(value, str) else None
    if code is None:
        raise ValueError(f"type: must be one of {', '.join(TYPE_CODE)}, got {shown(value)}")
    return code


def tokens(value) -> int:
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int) or not 0 < value <= MAX_TOKENS:
        raise ValueError(f"tokens: must be a positive integer (at most {MAX_TOKENS}), "
                         f"got {shown(value)}")  # fmt: skip
    return value


def cost(value) -> float:
    number = finite_number(value, MAX_MAGNITUDE)
    if number is None or number < 0:
        raise ValueError(f"cost: must be a non-negative number (at most {MAX_MAGNITUDE:g}), "
                         f"got {shown(value)}")  # fmt: skip
    return number


def meta(value) -> dict:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise ValueError(f"meta: must be a mapping, got {shown(value)}")
    if value and depth_error({"meta": value}) is not None:  # as the event will nest it
        raise ValueError(f"meta: nested deeper than {MAX_DEPTH} levels")
    try:
        orjson.dumps(value)
    except (orjson.JSONEncodeError, TypeError) as exc:
        raise ValueError(f"meta: not representable as JSON: {exc}") from None
    return value


def annotation(value, note) -> tuple[float | None, str | None]:
    if value is None and note is None:
        raise ValueError("value: annotate needs a value and/or a note")
    if value is not None:
        number = finite_number(value, 1.0)
        if number is None or not 0.0 <= number <= 1.0:
            raise ValueError(f"value: must be a number in [0, 1], got {shown(value)}")
        value = number
    if note is not None:
        text(note, "note")
    return value, note
