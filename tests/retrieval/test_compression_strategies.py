"""Each compression strategy on the way to the long-term store, and what it still serves.

One 40-token item ``a`` (vector [1, 0]) ends up in the long-term store; a request with query
[1, 0] needs it and retrieves it (retrieval budget 512).
"""

from __future__ import annotations

import numpy as np
import pytest
from helpers import rq, trace, w
from memlens.policies.window import SlidingWindow

from memlens.analyze.metrics import compute_metrics
from memlens.retrieval.compression import (
    CompressionConfig,
    CompressionError,
    Compressor,
    entity_tokens,
    extract_entities,
)
from memlens.retrieval.config import HnswConfig, RetrievalConfig
from memlens.retrieval.embeddings import EmbeddingsConfig, embed_trace
from memlens.retrieval.query import static_values
from memlens.retrieval.setup import make_retriever, replay_with_retrieval
from memlens.retrieval.tiers import TiersConfig

NO_STC = TiersConfig(short_term_tokens=0)  # what leaves working memory is in the LTS
GRAPH = HnswConfig(exact_below=0)
TRACE_VECTORS = EmbeddingsConfig(kind="trace", cache=False)
TEXT = "refund #4412 for order AB-77 approved by Alice Moreau on 2024-03-05"


def make(answerable=None, type_="tool_result"):
    meta = {"embedding": [1.0, 0.0]}
    if answerable is not None:
        meta["answerable_by_entities"] = answerable
    return trace(
        w("a", 40, type_=type_, text=TEXT, meta={"embedding": [1.0, 0.0]}),
        w("fill", 4, meta={"embedding": [0.0, 1.0]}),
        rq("r", "a", meta=meta),
    )


def run(tr=None, **ccfg):
    tr = make() if tr is None else tr
    cfg = RetrievalConfig(enabled=True, budget=512, k=2, hnsw=GRAPH)
    emb = embed_trace(tr, TRACE_VECTORS)
    ret = make_retriever(tr, cfg, emb, CompressionConfig(**ccfg), tiers=NO_STC)
    res, rec = replay_with_retrieval(tr, SlidingWindow(), 4, ret)
    m = compute_metrics(tr, res, retrieval=rec)["overall"]
    a = [n for n in range(rec.ret_item.size) if tr.item_id[rec.ret_item[n]] == "a"]
    return rec, m, int(rec.ret_tokens[a[0]])


def test_entity_extraction():
    assert extract_entities(TEXT) == ["#4412", "AB-77", "Alice Moreau", "2024-03-05"]
    assert extract_entities("just some words") == []
    assert entity_tokens(TEXT, 40) == 9  # "#4412 AB-77 Alice Moreau 2024-03-05": 35 chars / 4
    assert entity_tokens("no entities here", 40) == 1
    assert entity_tokens(TEXT, 5) == 5  # never more than the item


def test_none_serves_at_full_size():
    rec, m, tok = run(default="none")
    assert tok == 40 and m["context_recall"] == 1.0 and m["needs_lost_to_compression"] == 0
    assert rec.modeled_ms.tolist() == [21.0]


def test_pointer_is_lossless_with_one_more_long_term_round_trip():
    rec, m, tok = run(default="pointer")
    assert tok == 40 and m["context_recall"] == 1.0
    assert rec.modeled_ms.tolist() == [41.0]  # STC 1 + LTS search 20 + content fetch 20
    assert m["compression_context_tokens_saved"] == 0


@pytest.mark.parametrize("counts, recall, lost", [(False, 0.0, 1), (True, 1.0, 0)])
def test_summary_keeps_a_fraction_and_counts_only_if_configured(counts, recall, lost):
    rec, m, tok = run(default="summary", summary_fraction=0.25, summary_counts_as_hit=counts)
    assert tok == 10
    assert m["context_recall"] == recall and m["needs_lost_to_compression"] == lost
    assert m["compression_context_tokens_saved"] == 30
    assert rec.stored_tokens_saved == 30  # only a is in the LTS (fill stays in WM)


@pytest.mark.parametrize(
    "answerable, recall", [(None, 0.0), (True, 1.0), (["a"], 1.0), (["fill"], 0.0), (False, 0.0)]
)
def test_entities_serve_only_needs_marked_answerable(answerable, recall):
    rec, m, tok = run(make(answerable), default="entities")
    assert tok == 9
    assert m["context_recall"] == recall
    assert m["needs_lost_to_compression"] == (0 if recall else 1)


def test_choice_by_type_and_by_value():
    tr = make(type_="llm_thought")
    vals = np.asarray([0.4, 0.4])
    comp = Compressor(tr, CompressionConfig(by_type={"llm_thought": "pointer"}), vals)
    assert comp.strategy.tolist() == [3, 3]
    low = CompressionConfig(by_type={"llm_thought": "pointer"}, low_value_threshold=0.45,
                            low_value_strategy="entities")  # fmt: skip
    assert Compressor(tr, low, vals).strategy.tolist() == [2, 2]  # value beats type
    tr2 = make(type_="user_input")  # a above the threshold, fill below
    assert Compressor(tr2, low, np.asarray([0.7, 0.4])).strategy.tolist() == [0, 2]


def test_lossy_items_are_not_promoted():
    tr = make()
    cfg = RetrievalConfig(enabled=True, k=2, hnsw=GRAPH, promote=True)
    emb = embed_trace(tr, TRACE_VECTORS)
    ret = make_retriever(tr, cfg, emb, CompressionConfig(default="summary"), tiers=NO_STC)
    _, rec = replay_with_retrieval(tr, SlidingWindow(), 40, ret)
    assert rec.ret_item.size >= 1 and rec.promoted == 0


@pytest.mark.parametrize(
    "bad, key",
    [
        ({"default": "zip"}, "compression.default"),
        ({"low_value_strategy": "zip"}, "compression.low_value_strategy"),
        ({"by_type": {"llm_thought": "zip"}}, "compression.by_type.llm_thought"),
        ({"by_type": {"thought": "summary"}}, "compression.by_type: unknown item type"),
        ({"summary_fraction": 0.0}, "compression.summary_fraction"),
    ],
)
def test_bad_settings_are_rejected_naming_the_key(bad, key):
    with pytest.raises(ValueError, match=key.replace(".", r"\.")):
        CompressionConfig(**bad)


def test_stores_in_full_only_when_every_choice_is_none():
    assert CompressionConfig().stores_in_full
    assert CompressionConfig(by_type={"llm_thought": "none"}).stores_in_full
    assert not CompressionConfig(by_type={"llm_thought": "pointer"}).stores_in_full
    assert not CompressionConfig(low_value_threshold=0.5).stores_in_full  # summary below it
    assert CompressionConfig(low_value_threshold=0.5, low_value_strategy="none").stores_in_full


def test_bad_marks_are_errors():
    tr = make(answerable="yes")
    with pytest.raises(CompressionError, match=r'<test>:3: field "meta.answerable_by_entities"'):
        Compressor(tr, CompressionConfig(), static_values(tr))
