"""The bulk parser's compiled whole-trace rules (memlens.trace.bulk.rules) against plain Python."""

from __future__ import annotations

import math

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from memlens.trace.bulk import rules as trace_rules


def packed(strings: list[str]) -> tuple[np.ndarray, np.ndarray]:
    raw = [s.encode() for s in strings]
    offsets = np.zeros(len(raw) + 1, np.int64)
    np.cumsum([len(r) for r in raw], out=offsets[1:])
    return np.frombuffer(b"".join(raw), np.uint8), offsets


IDS = st.lists(st.sampled_from(["a", "b", "ab", "", "é", "w1", "w10", "r1", "x" * 20]), max_size=8)


@given(items=IDS, requests=IDS, needs=IDS, targets=IDS)
def test_resolve_ids_as_a_dict_does(items, requests, needs, targets):
    got = trace_rules.resolve_ids(packed(items), packed(requests), [packed(needs), packed(targets)])
    ids = items + requests
    if len(set(ids)) < len(ids):
        assert got is None  # an id defined twice
        return
    index = {s: k for k, s in enumerate(items)}
    if not all(s in index for s in needs + targets):
        assert got is None  # unknown, or a request's
        return
    assert got is not None
    assert got[0].tolist() == [index[s] for s in needs]
    assert got[1].tolist() == [index[s] for s in targets]


@given(events=st.lists(st.tuples(st.integers(0, 2), st.none() | st.sampled_from([-1.0, 0.0, 2.5, 3])),
                       max_size=12))  # fmt: skip
def test_event_times_as_the_exact_parser_takes_them(events):
    stream = np.array([s for s, _ in events], np.int32)
    t = np.array([math.nan if x is None else x for _, x in events], np.float64)
    last: dict[int, float] = {}
    expected: list[float] | None = []
    for s, x in events:
        if x is None:
            expected.append(last.get(s, 0.0))
        elif x < last.get(s, -math.inf):
            expected = None
            break
        else:
            last[s] = float(x)
            expected.append(float(x))
    got = trace_rules.event_times(t, stream, 3)
    assert (got is None) == (expected is None)
    if got is not None:
        assert got.tolist() == expected
