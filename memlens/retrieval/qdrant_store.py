"""Qdrant in local mode behind the storage protocols (optional extra ``memlens[qdrant]``): the
long-term store's vectors and documents in a folder, no server.

Why Qdrant's local mode and not LanceDB: ``qdrant-client`` is a pure-Python wheel whose
dependencies (numpy, pydantic, httpx, grpcio, protobuf) MemLens's environment already has,
plus ``portalocker``; LanceDB brings a native ``pylance`` build of tens of megabytes.  The
same code talks to a Qdrant server when given ``url=`` instead of ``path=``.

Local mode scores every stored vector (exact cosine); :class:`QdrantVectorIndex` orders equal
scores by the smaller key, as :class:`memlens.retrieval.storage.ExactVectorIndex` does, so the
two give the same answers.  Documents are point payloads in a second collection (a one-number
vector each: Qdrant stores points).
"""

from __future__ import annotations

import uuid

import numpy as np


def _client(path, url, client):
    if client is not None:
        return client
    try:
        from qdrant_client import QdrantClient
    except ImportError:
        raise ImportError("the Qdrant backend needs the qdrant-client package: pip install "
                          "'memlens[qdrant]'") from None  # fmt: skip
    if (path is None) == (url is None):
        raise ValueError("Qdrant: give path= (local mode, a folder) or url= (a server)")
    return QdrantClient(path=str(path)) if path is not None else QdrantClient(url=url)


def _ensure(client, name: str, dim: int) -> None:
    from qdrant_client import models

    if not client.collection_exists(name):
        client.create_collection(name, vectors_config=models.VectorParams(
            size=dim, distance=models.Distance.COSINE))  # fmt: skip


class QdrantVectorIndex:
    """``VectorIndex`` on a Qdrant collection: ``add``, ``search`` (cosine), ``delete``."""

    def __init__(self, dim: int, path=None, url: str | None = None,
                 collection: str = "memlens_long_term", client=None) -> None:  # fmt: skip
        self.dim, self.collection = int(dim), collection
        self.client = _client(path, url, client)
        _ensure(self.client, collection, self.dim)

    def add(self, key: int, vector) -> None:
        from qdrant_client import models

        v = np.asarray(vector, np.float32).ravel()
        if v.shape != (self.dim,):
            raise ValueError(f"vector: expected {self.dim} numbers, got {v.shape[0]}")
        point = models.PointStruct(id=int(key), vector=v.tolist(), payload={})
        self.client.upsert(self.collection, [point], wait=True)

    def search(self, vector, k: int, allowed=None) -> list[tuple[int, float]]:
        """Top ``k`` by cosine; ``allowed``: a ``HasIdCondition`` filter, applied by Qdrant
        inside the search (only those points are scored)."""
        from qdrant_client import models

        k = int(k)
        if k <= 0 or (allowed is not None and len(allowed) == 0):
            return []
        q = np.asarray(vector, np.float32).ravel().tolist()
        only = None if allowed is None else models.Filter(
            must=[models.HasIdCondition(has_id=[int(a) for a in allowed])])  # fmt: skip
        limit = k + 1
        while True:  # widen until the k-th score's ties are all in view
            hits = self.client.query_points(self.collection, query=q, query_filter=only,
                                            limit=limit).points  # fmt: skip
            if len(hits) < limit or hits[-1].score < hits[k - 1].score:
                break
            limit *= 2
        ranked = sorted(((int(h.id), float(h.score)) for h in hits), key=lambda p: (-p[1], p[0]))
        return ranked[:k]

    def delete(self, key: int) -> None:
        from qdrant_client import models

        self.client.delete(self.collection, models.PointIdsList(points=[int(key)]), wait=True)

    def close(self) -> None:
        self.client.close()


class QdrantDocuments:
    """``DocumentStore`` on a Qdrant collection: a document is a point's payload."""

    def __init__(self, path=None, url: str | None = None, collection: str = "memlens_documents",
                 client=None) -> None:  # fmt: skip
        self.collection = collection
        self.client = _client(path, url, client)
        _ensure(self.client, collection, 1)

    @staticmethod
    def _id(key: str) -> str:
        return str(uuid.uuid5(uuid.NAMESPACE_URL, f"memlens:{key}"))  # Qdrant ids: int or UUID

    def put(self, key: str, doc: dict) -> None:
        from qdrant_client import models

        point = models.PointStruct(id=self._id(key), vector=[1.0], payload={"key": key,
                                                                         "doc": doc})  # fmt: skip
        self.client.upsert(self.collection, [point], wait=True)

    def get(self, key: str) -> dict | None:
        got = self.client.retrieve(self.collection, [self._id(key)], with_payload=True)
        return got[0].payload["doc"] if got else None

    def delete(self, key: str) -> None:
        from qdrant_client import models

        self.client.delete(self.collection, models.PointIdsList(points=[self._id(key)]),
                           wait=True)  # fmt: skip

    def close(self) -> None:
        self.client.close()
