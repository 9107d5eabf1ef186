"""format_context numbers the items by id for a prompt; parse_citations reads them back."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from memlens.live import format_context, parse_citations
from memlens.live.manager import Item


def item(ident: str, text: str = "t", type_: str = "tool_result") -> Item:
    return Item(ident, text, type_, 3, "working", None)


def test_format_context_heads_each_item_by_its_id_and_type():
    text = format_context([item("m3", "refund 42"), item("m7", "plan", "agent_state")],
                          instruction=None)  # fmt: skip
    assert text == "[m3] (tool_result)\nrefund 42\n\n[m7] (agent_state)\nplan"
    assert format_context([]).startswith("Memories, each under its id")


def test_parse_citations_in_first_cited_order_each_once():
    reply = "Per [m7] and [m3, m7], the refund [m12][m3] is due; see [note] and [M4]."
    assert parse_citations(reply) == ["m7", "m3", "m12"]


def test_known_ids_filter_inventions_and_admit_other_forms():
    items = [item("m3"), item("order-9")]
    assert parse_citations("[m3] [m99] [order-9]", items) == ["m3", "order-9"]
    assert parse_citations("[m3] [m99]", ["m99"]) == ["m99"]
    with pytest.raises(ValueError, match="text"):
        parse_citations(None)


@given(st.lists(st.integers(0, 500), max_size=12))
def test_round_trip_a_reply_citing_every_item_gives_them_back(numbers):
    items = [item(f"m{n}", f"text {n}") for n in dict.fromkeys(numbers)]
    prompt = format_context(items)
    reply = " ".join(f"because [{it.id}]" for it in items)
    assert parse_citations(reply, items) == [it.id for it in items]
    assert parse_citations(prompt, items) == [it.id for it in items]  # the prompt cites each
