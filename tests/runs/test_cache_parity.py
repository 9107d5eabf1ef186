"""Parity with independent cache simulators on classic cache traces.

A classic trace becomes a MemLens trace (first access = write, later accesses = requests
needing that object); replayed with ``demand_fetch=true``, MemLens' LRU must count exactly the
hits of cachetools' ``LRUCache`` and libCacheSim's LRU, and the window those of a FIFO cache.
"""

from __future__ import annotations

import numpy as np
import pytest
from memlens.policies.lru import LRU
from memlens.policies.window import SlidingWindow

from memlens.analyze.metrics import compute_metrics
from memlens.simulator import simulate
from memlens.trace.classic import classic_trace, zipf_keys

cachetools = pytest.importorskip("cachetools")


def cachetools_hits(keys, sizes, capacity, cache_cls) -> int:
    """Hits of a cachetools cache; the value stored is the key so getsizeof can size it."""
    cache = cache_cls(maxsize=capacity, getsizeof=lambda key: int(sizes[key]))
    hits = 0
    for key in keys.tolist():
        if key in cache:
            hits += 1
            cache[key]  # a hit is an access: LRU reorders, FIFO does not
        elif sizes[key] <= capacity:
            cache[key] = key
    return hits


def memlens_hits(keys, sizes, capacity, policy, engine) -> int:
    tr = classic_trace(keys, sizes)
    res = simulate(tr, policy, budget=capacity, demand_fetch=True, engine=engine)
    return compute_metrics(tr, res)["overall"]["hits"]


CASES = [
    # (seed, accesses, objects, zipf alpha, max size, capacity)
    (0, 20_000, 1_000, 0.9, 1, 100),
    (1, 20_000, 5_000, 0.7, 1, 500),
    (2, 20_000, 2_000, 1.0, 50, 4_000),
    (3, 10_000, 300, 0.5, 200, 2_000),
]


@pytest.mark.parametrize("engine", ["reference", "fast"])
@pytest.mark.parametrize("case", CASES)
def test_lru_and_fifo_match_cachetools(case, engine):
    seed, n, objects, alpha, max_size, capacity = case
    rng = np.random.default_rng(seed)
    keys = zipf_keys(n, objects, alpha, rng)
    sizes = rng.integers(1, max_size + 1, size=objects)
    expected_lru = cachetools_hits(keys, sizes, capacity, cachetools.LRUCache)
    expected_fifo = cachetools_hits(keys, sizes, capacity, cachetools.FIFOCache)
    assert memlens_hits(keys, sizes, capacity, LRU(), engine) == expected_lru
    assert memlens_hits(keys, sizes, capacity, SlidingWindow(), engine) == expected_fifo
    assert expected_lru != expected_fifo  # the cases really tell the two policies apart


def libcachesim_hits(keys, capacity, algo) -> int:
    lcs = pytest.importorskip("libcachesim")
    cache = getattr(lcs, algo)(cache_size=capacity)
    hits = 0
    for key in keys.tolist():
        req = lcs.Request(obj_id=int(key), obj_size=1)
        hits += bool(cache.get(req))
    return hits


@pytest.mark.parametrize("case", CASES[:2])
def test_unit_size_lru_and_fifo_match_libcachesim(case):
    seed, n, objects, alpha, _, capacity = case
    keys = zipf_keys(n, objects, alpha, np.random.default_rng(seed))
    sizes = np.ones(objects, dtype=np.int64)
    assert memlens_hits(keys, sizes, capacity, LRU(), "fast") == libcachesim_hits(
        keys, capacity, "LRU"
    )
    assert memlens_hits(keys, sizes, capacity, SlidingWindow(), "fast") == libcachesim_hits(
        keys, capacity, "FIFO"
    )
