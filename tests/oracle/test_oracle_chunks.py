"""A budget's streams solved in chunks, in any order, give exactly the one-piece solve (issue 34)."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from memlens.datasets.archetypes import generate

from memlens.oracle import OracleSettings, batch, clear_memo, solve
from memlens.oracle.solve import _MEMO
from memlens.trace.io import load_trace, write_trace


def _agent_trace(tmp_path_factory, streams: int, events_per_stream: int, seed: int):
    """(path, loaded trace) of a generated agent trace."""
    path = tmp_path_factory.mktemp("chunks") / f"agent{streams}.jsonl"
    write_trace(path, generate("agent", streams=streams, events_per_stream=events_per_stream,
                               seed=seed), header={"generator": "agent"})  # fmt: skip
    return str(path), load_trace(str(path))


@pytest.fixture(scope="module")
def many_streams(tmp_path_factory):
    return _agent_trace(tmp_path_factory, 10, 30, 11)


def test_chunks_cover_every_stream_once():
    for n_streams in (0, 1, 5, 37):
        for workers in (1, 2, 3):
            got = batch.chunks(n_streams, workers)
            covered = [s for lo, hi in got for s in range(lo, hi)]
            assert covered == list(range(n_streams))
            assert len(got) == (1 if workers == 1 or n_streams <= 1 else
                                min(n_streams, workers * batch.CHUNKS_PER_WORKER))  # fmt: skip


def test_chunks_keep_the_oracle_batch_windows_whole():
    for n_streams in (0, 1, 5, 37, 200):
        for workers in (1, 2, 3):
            for window in (1, 3, 64):
                got = batch.chunks(n_streams, workers, window)
                assert [s for lo, hi in got for s in range(lo, hi)] == list(range(n_streams))
                assert all(lo % window == 0 for lo, _ in got)
                assert all(hi % window == 0 or hi == n_streams for _, hi in got)
    assert batch.chunks(200, 2, 64) == [(0, 64), (64, 128), (128, 192), (192, 200)]


def test_chunked_presolve_equals_one_piece(many_streams, tmp_path, monkeypatch):
    """With small LPs batched three streams a window (so a chunk holds one or two windows)."""
    path, trace = many_streams
    settings = OracleSettings(cache_dir=str(tmp_path / "oracle"), batch_streams=3)

    def out_of_order(fn, tasks, n_workers, progress=None, label=""):
        tasks = list(tasks)
        for i in reversed(range(len(tasks))):  # the last chunk first
            yield i, fn(tasks[i])

    monkeypatch.setattr(batch, "run_parallel", out_of_order)
    clear_memo()
    assert batch.presolve({path: trace}, False, [512, 2048], False, settings, 3) == 2
    assert len(_MEMO) == 2
    chunked = [solve(trace, b, False, settings) for b in (512, 2048)]  # from the memo
    clear_memo()
    whole = [solve(trace, b, False, OracleSettings(cache=False, batch_streams=3))
             for b in (512, 2048)]  # fmt: skip
    clear_memo()
    for a, b in zip(chunked, whole, strict=True):
        assert [dataclasses.replace(s, solve_s=0.0) for s in a.streams] == [
            dataclasses.replace(s, solve_s=0.0) for s in b.streams
        ]
        for pa, pb in zip(a.plans, b.plans, strict=True):
            np.testing.assert_array_equal(pa, pb)


@pytest.fixture(scope="module")
def more_streams(tmp_path_factory):
    return _agent_trace(tmp_path_factory, 40, 150, 34)


def test_the_integer_programs_pieces_keep_each_proof_window_whole(more_streams, tmp_path,
                                                                  monkeypatch):  # fmt: skip
    """The second round's pieces (``close_gaps`` batches its LP proofs by proof window) never
    split a proof window, and the result is the one-piece solve's."""
    from memlens.oracle.proofs import proof_window

    path, trace = more_streams
    settings = OracleSettings(
        cache_dir=str(tmp_path / "oracle"), batch_streams=1, exact_max_states=0
    )
    window = proof_window(settings.batch_streams)
    assert window < trace.n_streams  # more than one proof window
    pieces = []

    def recorded(fn, tasks, n_workers, progress=None, label=""):
        for i, task in enumerate(tasks):
            if fn is batch._close_chunk:
                pieces.append(task[5])
            yield i, fn(task)

    monkeypatch.setattr(batch, "run_parallel", recorded)
    clear_memo()
    batch.presolve({path: trace}, False, [256], False, settings, 2)
    chunked = solve(trace, 256, False, settings)
    clear_memo()
    whole = solve(
        trace, 256, False, OracleSettings(cache=False, batch_streams=1, exact_max_states=0)
    )
    clear_memo()
    assert len(pieces) >= 2
    owners = [{s // window for s in p} for p in pieces]
    assert all(not (a & b) for i, a in enumerate(owners) for b in owners[i + 1 :])
    assert [dataclasses.replace(s, solve_s=0.0) for s in chunked.streams] == [
        dataclasses.replace(s, solve_s=0.0) for s in whole.streams
    ]
