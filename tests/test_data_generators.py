"""Synthetic archetypes: validity, determinism, knobs doing what they say, laziness, CLI."""

from __future__ import annotations

import itertools
from collections import Counter

import numpy as np
import pytest
from memlens.datasets.archetypes import ARCHETYPES, generate
from memlens.datasets.stats import evidence_age_tokens

from memlens.datacli import main as data_main
from memlens.trace import PIN, UNPIN
from memlens.trace_io import load_trace, trace_from_events

SMALL = {"streams": 13, "events_per_stream": 300, "concurrency": 3}
EVENTS = 13 * 300


@pytest.mark.parametrize("name", sorted(ARCHETYPES))
def test_valid_and_deterministic(name):
    a = list(generate(name, seed=1, **SMALL))
    assert a == list(generate(name, seed=1, **SMALL))
    assert a != list(generate(name, seed=2, **SMALL))
    trace = trace_from_events(a)  # needs point at earlier writes of the same stream
    assert trace.n_events == EVENTS  # no pins here, so no closing unpins either
    assert trace.n_requests > 0.1 * trace.n_events and trace.n_references >= trace.n_requests
    assert trace.n_streams >= SMALL["streams"] // 2


@pytest.mark.parametrize("name", sorted(ARCHETYPES))
def test_pins_are_simulated_and_released(name):
    trace = trace_from_events(generate(name, seed=3, pin_rate=1.0, **SMALL))
    pins, unpins = (trace.ev_kind == PIN).sum(), (trace.ev_kind == UNPIN).sum()
    assert pins > 0 and pins == unpins
    assert (trace.ev_kind != UNPIN).sum() == EVENTS
    none = trace_from_events(generate(name, seed=3, pin_rate=0.0, **SMALL))
    assert (none.ev_kind == PIN).sum() == 0


@pytest.mark.parametrize("name", sorted(ARCHETYPES))
def test_long_range_share_makes_needs_older(name):
    ages = []
    for share in (0.0, 1.0):
        trace = trace_from_events(generate(name, seed=4, long_range_share=share, **SMALL))
        ages.append(np.median(evidence_age_tokens(trace)))
    assert ages[1] > ages[0]


def test_token_scale_and_sigma():
    base = trace_from_events(generate("support", seed=0, **SMALL))
    big = trace_from_events(generate("support", seed=0, token_scale=3.0, **SMALL))
    flat = trace_from_events(generate("support", seed=0, token_sigma=0.0, **SMALL))
    assert 2.5 < big.item_tokens.mean() / base.item_tokens.mean() < 3.5
    for ty in np.unique(flat.item_type):  # sigma 0: one size per kind of item
        roles = Counter(m.get("role") for m, t in zip(flat.item_meta, flat.item_type) if t == ty)
        sizes = {int(x) for x, t in zip(flat.item_tokens, flat.item_type) if t == ty}
        assert len(sizes) <= len(roles)


def _read_share_of_top_file(skew: float) -> float:
    trace = trace_from_events(generate("coding", seed=6, reuse_skew=skew, **SMALL))
    files = Counter((trace.item_stream[i], m["file"]) for i, m in enumerate(trace.item_meta)
                    if m.get("role") == "read")  # fmt: skip
    per_stream: dict = {}
    for (s, _), c in files.items():
        per_stream.setdefault(s, []).append(c)
    return float(np.mean([max(v) / sum(v) for v in per_stream.values()]))


def test_reuse_skew_concentrates_reads():
    assert _read_share_of_top_file(2.0) > 2 * _read_share_of_top_file(0.0)


def test_coding_edits_supersede_reads():
    trace = trace_from_events(generate("coding", seed=7, **SMALL))
    last_version: dict = {}  # (stream, file) -> item of its latest read or edit
    checked = 0
    for e in range(trace.n_events):
        k, ref = trace.ev_kind[e], trace.ev_ref[e]
        if k == 0:
            meta = trace.item_meta[ref]
            if "file" in meta:
                last_version[(trace.item_stream[ref], meta["file"])] = ref
        elif k == 1:
            for i in trace.needs_of(ref):
                meta = trace.item_meta[i]
                if "file" in meta:
                    assert last_version[(trace.item_stream[i], meta["file"])] == i
                    checked += 1
    assert checked > 100


def test_support_constraints_needed_throughout():
    trace = trace_from_events(generate("support", seed=8, long_range_share=0.5, **SMALL))
    roles = [trace.item_meta[i].get("role") for i in trace.needs]
    assert roles.count("constraint") > 0.2 * len(roles)
    assert "chit-chat" not in roles  # noise is never needed


def test_analysis_key_numbers_needed_late():
    trace = trace_from_events(generate("analysis", seed=9, **SMALL))
    age = evidence_age_tokens(trace)
    key = np.array([trace.item_meta[i].get("role") == "key-output" for i in trace.needs])
    assert key.sum() > 50
    assert np.median(age[key]) > 3 * np.median(age[~key])


def test_generation_is_lazy():
    # ten billion events: only what is consumed is ever made (bounded memory by construction)
    head = list(itertools.islice(generate("analysis", seed=0, streams=10**8), 1000))
    assert len(head) == 1000


def test_bad_knobs():
    with pytest.raises(ValueError, match="unknown knob"):
        list(generate("coding", files=3, constraints=2))
    with pytest.raises(ValueError, match="long_range_share"):
        generate("support", long_range_share=1.5)
    with pytest.raises(ValueError, match="streams must be an integer"):
        generate("analysis", streams=2.5)
    with pytest.raises(ValueError, match="unknown archetype"):
        generate("nope")


def test_archetype_size_is_streams_times_events_per_stream():
    """``events=E, length=L`` of the old API is ``streams=E/L, events_per_stream=L``: the same
    trace, byte for byte (the default, 25 x 400, is the old default of 10,000 events)."""
    trace = trace_from_events(generate("support", seed=0))
    assert trace.n_events == 25 * 400 and 20 <= trace.n_streams <= 40


def test_cli_generate(tmp_path, capsys):
    out = tmp_path / "g.jsonl.gz"
    argv = [
        "generate",
        "archetype=coding",
        "seed=3",
        f"out={out}",
        "streams=2",
        "events_per_stream=250",
    ]
    assert data_main(argv) == 0
    trace = load_trace(out)
    assert trace.header["generator"] == "coding" and trace.n_events == 500
    assert trace.header["params"]["seed"] == 3
    bad = tmp_path / "bad.jsonl.gz"
    assert data_main(["generate", "archetype=coding", f"out={bad}", "colour=blue"]) == 2
    assert "colour" in capsys.readouterr().err and not bad.exists()


@pytest.mark.slow
def test_memory_stays_flat_as_events_grow(tmp_path):
    """Peak RSS for 2,000,000 events is within a few MiB of that for 20,000 (fresh processes)."""
    import subprocess
    import sys

    child = (
        "import sys; from memlens.datasets.archetypes import generate; "
        "from memlens.trace_io import write_trace; "
        "write_trace(sys.argv[2], generate('analysis', seed=0, streams=int(sys.argv[1]) // 400)); "
        "print(next(int(l.split()[1]) for l in open('/proc/self/status') if l.startswith('VmHWM')))"
    )
    rss = []
    for n in (20_000, 2_000_000):
        out = tmp_path / f"{n}.jsonl"
        res = subprocess.run([sys.executable, "-c", child, str(n), str(out)], capture_output=True,
                             text=True, check=True)  # fmt: skip
        rss.append(int(res.stdout))
        out.unlink()
    assert rss[1] - rss[0] < 16 * 1024, rss  # KiB
