"""Small builders for hand-written traces in tests: re-exported from ``memlens.testing``."""

from __future__ import annotations

from memlens.testing import annotate, pin, random_events, rq, trace, traces, unpin, w

__all__ = ["annotate", "pin", "random_events", "rq", "trace", "traces", "unpin", "w"]
