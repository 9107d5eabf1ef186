"""Classic cache traces (a sequence of object keys) as MemLens traces.

This is the bridge to forty years of cache research: each object's first access becomes a
``write`` and every later access a ``request`` needing that one object.  Replayed with
``demand_fetch=true``, MemLens' LRU and window must then count exactly the hits of any textbook
LRU or FIFO cache on the same key sequence (``tests/runs/test_cache_parity.py`` checks this against
cachetools and libCacheSim).  The builder works on whole arrays, so a ten-million access trace
converts in seconds.
"""

from __future__ import annotations

import hashlib

import numpy as np

from memlens.trace.model import REQUEST, WRITE, Trace


def zipf_keys(
    n_accesses: int, n_objects: int, alpha: float, rng: np.random.Generator
) -> np.ndarray:
    """``n_accesses`` keys drawn from a Zipf(alpha) popularity over ``n_objects`` objects."""
    ranks = np.arange(1, n_objects + 1, dtype=np.float64)
    p = ranks**-alpha
    p /= p.sum()
    keys = rng.choice(n_objects, size=n_accesses, p=p)
    # shuffle identities so popularity is not correlated with key order
    return rng.permutation(n_objects)[keys].astype(np.int64)


def classic_trace(
    keys: np.ndarray, sizes: np.ndarray | None = None, source: str = "<classic>"
) -> Trace:
    """Convert an access sequence to a single-stream trace (writes + one-need requests).

    ``sizes`` maps key -> tokens (defaults to 1 for every key).
    """
    keys = np.asarray(keys, dtype=np.int64)
    n = keys.shape[0]
    uniq, first_pos, inverse = np.unique(keys, return_index=True, return_inverse=True)
    is_first = np.zeros(n, dtype=bool)
    is_first[first_pos] = True
    # item index = order of first appearance
    order_of_first = np.argsort(first_pos, kind="stable")
    item_of_uniq = np.empty(uniq.shape[0], dtype=np.int64)
    item_of_uniq[order_of_first] = np.arange(uniq.shape[0])
    item = item_of_uniq[inverse]
    n_items = uniq.shape[0]
    item_key = uniq[order_of_first]
    if sizes is None:
        item_tokens = np.ones(n_items, dtype=np.int64)
    else:
        item_tokens = np.asarray(sizes, dtype=np.int64)[item_key]
        if (item_tokens <= 0).any():
            raise ValueError("sizes must be positive")
    kind = np.where(is_first, WRITE, REQUEST).astype(np.int8)
    req_pos = np.flatnonzero(~is_first)
    n_req = req_pos.shape[0]
    ref = np.empty(n, dtype=np.int32)
    ref[is_first] = item[is_first]
    ref[~is_first] = np.arange(n_req, dtype=np.int32)
    t = np.arange(n, dtype=np.float64)
    digest = hashlib.sha256(keys.tobytes() + item_tokens.tobytes()).hexdigest()
    ids = [f"k{k}" for k in item_key.tolist()]
    return Trace(
        source=source,
        sha256=digest,
        header={"generator": "classic"},
        stream_names=[""],
        ev_kind=kind,
        ev_stream=np.zeros(n, dtype=np.int32),
        ev_ref=ref,
        ev_t=t,
        ev_line=np.arange(1, n + 1, dtype=np.int64),
        item_id=ids,
        item_tokens=item_tokens,
        item_type=np.full(n_items, 2, dtype=np.int8),
        item_stream=np.zeros(n_items, dtype=np.int32),
        item_t=t[is_first],
        item_cost=np.zeros(n_items),
        item_event=np.flatnonzero(is_first).astype(np.int64),
        item_text=[""] * n_items,
        item_task=[""] * n_items,
        item_session=[""] * n_items,
        item_meta=[{} for _ in range(n_items)],
        req_id=[f"r{j}" for j in range(n_req)],
        req_stream=np.zeros(n_req, dtype=np.int32),
        req_t=t[req_pos],
        req_event=req_pos.astype(np.int64),
        req_text=[""] * n_req,
        req_meta=[{} for _ in range(n_req)],
        needs_ptr=np.arange(n_req + 1, dtype=np.int64),
        needs=item[req_pos].astype(np.int32),
    )
