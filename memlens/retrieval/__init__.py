"""Request-time retrieval: the long-term store's vector index and context assembly.

``config``    the typed ``retrieval:`` settings (:class:`RetrievalConfig` and its blocks).
``index``     the long-term store's hnswlib index (one per stream, cosine), membership and the
              metadata pre-filter.
``query``     what a request asks for (query vector, task, filter) and each item's static value.
``assemble``  the retrieval engine (short-term cache exact + long-term index, rerank, token
              budget, promotion, prefetch) and the two drivers that run it during a replay.
"""

from memlens.retrieval.assemble import (
    LiveRetrieval,
    RetrievalRecord,
    Retriever,
    retrieve_post_hoc,
)
from memlens.retrieval.config import RetrievalConfig
from memlens.retrieval.index import LongTermIndex

__all__ = [
    "LiveRetrieval",
    "LongTermIndex",
    "RetrievalConfig",
    "RetrievalRecord",
    "Retriever",
    "retrieve_post_hoc",
]
