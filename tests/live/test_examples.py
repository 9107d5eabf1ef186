"""Every agent loop in examples/ runs as the README shows it, offline (its scripted model, no
``OPENAI_BASE_URL``): it exits cleanly, the counts it prints are what a replay of its record
gives, the model was never shown more than the budget, and the OpenTelemetry export imports."""

from __future__ import annotations

import ast
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from memlens.live.replay import replay_record
from memlens.trace.io import load_trace
from memlens.trace.model import ITEM_TYPES

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
BUDGET, STEPS = 120, 12
#: example -> the module its adapter needs (skipped without it)
NEEDS = {"live_loop.py": None, "openai_agents_loop.py": "agents",
         "langgraph_loop.py": "langgraph", "otel_loop.py": "opentelemetry.sdk"}  # fmt: skip


def run_example(name: str, where: Path, *extra: str) -> tuple[str, Path]:
    """The example's output and record, run in ``where`` with the scripted model."""
    if NEEDS[name]:
        pytest.importorskip(NEEDS[name])
    env = {k: v for k, v in os.environ.items() if k != "OPENAI_BASE_URL"}
    record = where / "record.jsonl"
    proc = subprocess.run([sys.executable, str(EXAMPLES / name), "--record", str(record),
                           "--steps", str(STEPS), "--budget", str(BUDGET), *extra],
                          cwd=where, env=env, capture_output=True, text=True)  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    return proc.stdout, record


def printed_counts(out: str) -> dict:
    return ast.literal_eval(re.search(r"steps=\d+: (\{[^}]*\})", out).group(1))


def replayed_counts(record: Path) -> dict:
    res = replay_record(record)
    hits = int(res.need_hit.sum())
    return {"hits": hits, "misses": int(res.need_hit.shape[0]) - hits,
            "evictions": int(res.evictions.sum())}  # fmt: skip


@pytest.mark.parametrize("name", sorted(NEEDS))
def test_the_printed_counts_are_the_records_replay(name, tmp_path):
    out, record = run_example(name, tmp_path)
    counts = printed_counts(out)
    assert counts == replayed_counts(record)
    assert counts["hits"] + counts["misses"] > STEPS  # each step needed earlier memories
    assert counts["misses"] > 0 and counts["evictions"] > 0  # the budget binds
    shown = re.search(r"max_shown_tokens=(\d+)", out)
    if name != "live_loop.py":  # the bare loop does not report it
        assert 0 < int(shown.group(1)) <= BUDGET


def test_the_otel_export_imports_to_a_trace_of_the_conversation(tmp_path):
    spans = tmp_path / "spans.json"
    run_example("otel_loop.py", tmp_path, "--otlp", str(spans))
    out = tmp_path / "imported.jsonl"
    proc = subprocess.run([sys.executable, "-m", "memlens", "data", "import", "otel", str(spans),
                           f"out={out}"], capture_output=True, text=True)  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    trace = load_trace(out)  # validated as it loads
    types = [ITEM_TYPES[k] for k in trace.item_type]
    # each step's chat spans: the tool call and the answer (assistant), its execute_tool span:
    # the tool's answer; one request per step (the importer's, needs derived from the texts)
    assert types.count("tool_result") == STEPS and types.count("llm_thought") == 2 * STEPS
    assert trace.n_requests == STEPS
