"""Generated agent traces shared by the speed benchmarks (issue 16), made once and kept on disk.

``agent_trace_path(events)`` writes ``memlens data generate archetype=agent streams=4
events_per_stream=events/4 seed=0`` to ``$MEMLENS_BENCH_DIR`` (default
``/tmp/memlens-bench``) the first time and returns the path afterwards: generating a
million events is pure Python and takes about 20 s, so every benchmark reuses the file.
"""

from __future__ import annotations

import os
from pathlib import Path

from memlens.datasets.archetypes import generate

from memlens.trace.io import write_trace

STREAMS = 4


def bench_dir() -> Path:
    path = Path(os.environ.get("MEMLENS_BENCH_DIR", "/tmp/memlens-bench"))
    path.mkdir(parents=True, exist_ok=True)
    return path


def agent_trace_path(events: int, gz: bool = True, seed: int = 0) -> Path:
    """The generated agent trace of about ``events`` events (written if missing)."""
    per = max(1, events // STREAMS)
    path = bench_dir() / f"agent_{STREAMS * per}_s{seed}.jsonl{'.gz' if gz else ''}"
    if not path.exists():
        header = {"generator": "agent", "params": {"streams": STREAMS, "events_per_stream": per,
                                                   "seed": seed}}  # fmt: skip
        events_iter = generate("agent", streams=STREAMS, events_per_stream=per, seed=seed)
        write_trace(path, events_iter, header=header)
    return path
