"""What every storage backend is held to (``memlens.retrieval.storage``'s protocols), shared by
the embedded stores' tests and the real backends' (tests/retrieval/test_storage.py,
test_backends.py), so each backend meets the very same expectations."""

from __future__ import annotations

import numpy as np

from memlens.retrieval.storage import DocumentStore


def check_put_get_delete(documents) -> None:
    """A document store keeps its own copy, replaces on put, and forgets on delete."""
    assert isinstance(documents, DocumentStore)
    doc = {"text": "refund INV-2024", "tokens": 4, "meta": {"k": [1, 2]}}
    documents.put("m1", doc)
    doc["text"] = "changed after put"  # the store holds its own copy
    assert documents.get("m1") == {"text": "refund INV-2024", "tokens": 4, "meta": {"k": [1, 2]}}
    documents.put("m1", {"text": "v2"})
    assert documents.get("m1") == {"text": "v2"}
    documents.delete("m1")
    documents.delete("never there")
    assert documents.get("m1") is None


def brute_force(vectors: dict[int, np.ndarray], q: np.ndarray, k: int) -> list[int]:
    """The ``k`` nearest keys by cosine, equal scores to the smaller key."""
    unit = {i: v / np.linalg.norm(v) for i, v in vectors.items()}
    qn = q / np.linalg.norm(q)
    return [i for i, _ in sorted(unit.items(), key=lambda kv: (-float(kv[1] @ qn), kv[0]))[:k]]


def check_exact_cosine_with_deletes(index, rng) -> None:
    """A vector index of 8 dimensions returns the exact cosine neighbours, deletes included,
    and with ``allowed`` the exact neighbours among those keys only (deleted and unknown
    allowed keys are never returned)."""
    from memlens.retrieval.storage import VectorIndex

    assert isinstance(index, VectorIndex)
    vectors = {i: rng.normal(size=8).astype(np.float32) for i in range(40)}
    for i, v in vectors.items():
        index.add(i, v)
    for i in range(0, 40, 3):
        index.delete(i)
        del vectors[i]
    for _ in range(10):
        q = rng.normal(size=8).astype(np.float32)
        assert [i for i, _ in index.search(q, 5)] == brute_force(vectors, q, 5)
    for size in (0, 1, 3, 12, 40):
        allowed = sorted(rng.choice(50, size=size, replace=False).tolist())  # 40..49: unknown
        admitted = {i: v for i, v in vectors.items() if i in allowed}
        q = rng.normal(size=8).astype(np.float32)
        got = [i for i, _ in index.search(q, 5, allowed=allowed)]
        assert got == brute_force(admitted, q, 5), (size, allowed)
