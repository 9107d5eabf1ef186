"""The oracle's per-stream helpers compiled with numba (issue 34) against the numpy and Python
code they replaced, written again here: ``schedule_load_ok``, the chain heads and depths, and
the chain-form to gap-form values (bit for bit: the same float additions in the same order)."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from memlens.oracle.bounds import _chains, _gap_values
from memlens.oracle.model import build_model, schedule_load_ok
from memlens.testing import random_events
from memlens.trace.io import trace_from_events


def _load_ok_before(model, selected) -> bool:
    sel = np.asarray(selected, dtype=bool)
    if model.n_gaps == 0:
        return True
    nested = model.prev >= 0
    if np.any(sel & nested & ~sel[np.maximum(model.prev, 0)]):
        return False
    diff = np.zeros(model.points.shape[0] + 1, dtype=np.int64)
    np.add.at(diff, model.k_start[sel], model.size[sel])
    np.add.at(diff, model.k_end[sel], -model.size[sel])
    load = np.cumsum(diff)[:-1]
    return bool(np.all(load <= model.capacity))


def _chains_before(model):
    G = model.n_gaps
    head = np.arange(G, dtype=np.int64)
    depth = np.ones(G, dtype=np.int64)
    prev = model.prev.tolist()
    for g in range(G):
        p = prev[g]
        if p >= 0:
            head[g] = head[p]
            depth[g] = depth[p] + 1
    return head, depth


def _gap_values_before(d, prev):
    y = np.clip(d, 0.0, 1.0)
    prev_l = prev.tolist()
    for g in range(y.shape[0] - 1, -1, -1):
        if prev_l[g] >= 0:
            y[prev_l[g]] += y[g]
    return np.clip(y, 0.0, 1.0)


@settings(max_examples=80, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), budget=st.integers(5, 80), demand_fetch=st.booleans(),
       n_events=st.integers(5, 150))  # fmt: skip
def test_compiled_helpers_equal_the_code_they_replaced(seed, budget, demand_fetch, n_events):
    rng = np.random.default_rng(seed)
    tr = trace_from_events(random_events(rng, n_events, 2))
    for s in range(tr.n_streams):
        model = build_model(tr, s, budget, demand_fetch)
        G = model.n_gaps
        for selected in (np.ones(G, bool), np.zeros(G, bool), rng.random(G) < 0.5,
                         rng.random(G) < 0.2):  # fmt: skip
            assert schedule_load_ok(model, selected) == _load_ok_before(model, selected)
        head, depth = _chains(model)
        want_head, want_depth = _chains_before(model)
        np.testing.assert_array_equal(head, want_head)
        np.testing.assert_array_equal(depth, want_depth)
        d = rng.random(G) * 1.2 - 0.1
        assert _gap_values(d, model.prev).tobytes() == _gap_values_before(d, model.prev).tobytes()
