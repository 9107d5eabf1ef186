"""The oracle's disk cache gives back what it stored: bounds, and plans made when read."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from memlens.oracle import cache
from memlens.oracle.result import OracleResult, StreamBound

plans = st.lists(st.lists(st.tuples(st.integers(0, 10**6), st.integers(0, 10**6)), max_size=5),
                 max_size=6)  # fmt: skip


def _result(per_stream: list[list[tuple[int, int]]]) -> OracleResult:
    streams = [StreamBound(2, 1, 3, "exact", "exact", 0, 0.01) for _ in per_stream]
    arrays = [np.array(p, dtype=np.int64).reshape(-1, 2) for p in per_stream]
    return OracleResult(budget=64, demand_fetch=False, streams=streams, plans=arrays, wall_s=0.5)


@settings(max_examples=30, deadline=None)
@given(plans)
def test_a_stored_result_reads_back_whole(tmp_path_factory, per_stream):
    folder = tmp_path_factory.mktemp("oracle")
    stored = _result(per_stream)
    cache.store(str(folder), "k", stored)
    back = cache.load(str(folder), "k")
    assert back.from_cache and back.streams == stored.streams and back.budget == 64
    assert len(back.plans) == len(stored.plans)
    for got, want in zip(back.plans, stored.plans, strict=True):  # each made when read
        assert got.dtype == np.int64 and np.array_equal(got, want) and got.shape == want.shape
    for s in range(-len(stored.plans), len(stored.plans)):
        assert np.array_equal(back.plans[s], stored.plans[s])
    assert [p.tolist() for p in back.plans[1:3]] == [p.tolist() for p in stored.plans[1:3]]


def test_a_stored_plan_out_of_range_is_an_index_error(tmp_path):
    cache.store(str(tmp_path), "k", _result([[(1, 2)], []]))
    back = cache.load(str(tmp_path), "k")
    assert back.plans[1].shape == (0, 2)
    for s in (2, -3):
        with pytest.raises(IndexError):
            back.plans[s]


bounds = st.tuples(st.integers(0, 10**6), st.integers(0, 10**6), st.integers(0, 10**6),
                   st.sampled_from(["exact", "lp", "milp", "relaxed"]),
                   st.sampled_from(["exact", "belady"]), st.integers(0, 50),
                   st.floats(0, 1e3, allow_nan=False), st.integers(1, 9))  # fmt: skip


@given(bounds)
def test_a_stream_bound_s_dict_is_dataclasses_own(values):
    """``as_dict`` (every field by name, no copies) is ``dataclasses.asdict``: the keys, their
    order and the values the cache's metadata and the per-stream rows write."""
    import dataclasses

    bound = StreamBound(*values)
    got = bound.as_dict()
    assert list(got.items()) == list(dataclasses.asdict(bound).items())
