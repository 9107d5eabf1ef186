"""Arrays derived from a trace's texts, kept beside its parsed-trace entry (memlens.trace.derived):
a second process reads the very arrays the first computed, a trace outside the cache keeps
nothing, and an entry that cannot be the trace's (damaged, another kind, rows outside the
bags) is discarded and built again."""

from __future__ import annotations

import numpy as np
import pytest

from memlens._util import safecache
from memlens.scorer import decision_features
from memlens.scorer.decision_features import TraceContext
from memlens.testing import rq, w
from memlens.trace import features
from memlens.trace.cache import load_trace_cached
from memlens.trace.derived import KIND, entry_path
from memlens.trace.features import COUNT_FIELDS, content_features
from memlens.trace.io import write_trace

EVENTS = [
    w("a", 30, stream="s", t=0.0, text="error: order ORD-1 failed, retry in 42 s"),
    w("b", 12, stream="s", t=1.0, text="The final answer is Paris"),
    w("c", 5, stream="t", t=2.0, text="error: order ORD-1 failed, retry in 42 s"),
    w("d", 9, stream="t", t=3.0, text="Größe of the order"),
    rq("q1", "a", stream="s", t=4.0, text="why did the order fail?"),
    rq("q2", "c", "d", stream="t", t=5.0, text="what is the order size"),
]


@pytest.fixture
def trace_file(tmp_path, monkeypatch):
    monkeypatch.setenv("MEMLENS_CACHE", str(tmp_path / "cache"))
    path = tmp_path / "t.jsonl"
    write_trace(path, EVENTS)
    return path


def _arrays(trace) -> dict[str, np.ndarray]:
    counts = content_features(trace)
    items, reqs = TraceContext(trace).bags
    return {**{k: getattr(counts, k) for k in COUNT_FIELDS},
            **{f"{side}_{f}": getattr(b, f) for side, b in (("item", items), ("req", reqs))
               for f in ("ptr", "words", "row")}}  # fmt: skip


def _same(a: dict, b: dict) -> None:
    assert a.keys() == b.keys()
    for k in a:
        assert a[k].dtype == b[k].dtype and np.array_equal(a[k], b[k]), k


def test_a_second_process_reads_what_the_first_computed(trace_file, tmp_path, monkeypatch):
    plain = _arrays(load_trace_cached(trace_file, enabled=False))
    first = _arrays(load_trace_cached(trace_file))  # computes and keeps
    assert len(list((tmp_path / "cache" / KIND).glob("*.npz"))) == 2
    again = load_trace_cached(trace_file)  # a fresh trace object: nothing in its memory
    assert "_memlens_content_features" not in again.__dict__

    def refuse(*args, **kwargs):
        raise AssertionError("computed, not read")

    monkeypatch.setattr(features, "_distinct_features", refuse)
    monkeypatch.setattr(decision_features, "hashed_bags", refuse)
    _same(_arrays(again), plain)
    _same(first, plain)


def test_a_trace_outside_the_cache_keeps_nothing(trace_file, tmp_path):
    _arrays(load_trace_cached(trace_file, enabled=False))
    assert not (tmp_path / "cache" / KIND).exists()


@pytest.mark.parametrize("bad", ["row", "ptr", "dtype", "kind", "bytes"])
def test_an_entry_that_cannot_be_the_traces_is_built_again(trace_file, bad, capsys):
    trace = load_trace_cached(trace_file)
    plain = _arrays(load_trace_cached(trace_file, enabled=False))
    _arrays(trace)
    path = entry_path(entry_root(trace_file), trace.sha256, "word-bags")
    arrays = safecache.load(path, KIND, lambda a, m: a)
    if bad == "row":  # a row past the bags: the compiled merge would read out of bounds
        arrays["item_row"] = arrays["item_row"] + 100
    elif bad == "ptr":
        arrays["req_ptr"] = arrays["req_ptr"][::-1].copy()
    elif bad == "dtype":  # a type the compiled merge was not compiled for
        arrays["item_words"] = arrays["item_words"].astype(np.float64)
    meta = {"name": "content-features" if bad == "kind" else "word-bags"}
    safecache.store(path, KIND, arrays, meta, level=0)
    if bad == "bytes":
        raw = bytearray(path.read_bytes())
        raw[len(raw) // 2] ^= 0xFF
        path.write_bytes(bytes(raw))
    _same(_arrays(load_trace_cached(trace_file)), plain)
    assert "discarded" in capsys.readouterr().err


def entry_root(trace_file):
    from memlens.trace.cache import entry_path as trace_entry

    return trace_entry(trace_file).parent.parent


# ------------------------------------------------ Generative Agents' TF-IDF query arrays
def _ga_query(trace, wide: bool = False) -> dict[str, np.ndarray]:
    from memlens.kernels.generative_agents import _trace_query_arrays
    from policies.generative_agents import GenerativeAgents

    q = _trace_query_arrays(GenerativeAgents(), trace, wide=wide)
    return {str(k): a for k, a in enumerate(q)}


@pytest.mark.parametrize("wide", [False, True])
def test_generative_agents_query_arrays_are_read_back_as_computed(trace_file, monkeypatch, wide):
    from memlens.kernels import generative_agents

    plain = _ga_query(load_trace_cached(trace_file, enabled=False), wide)
    _same(_ga_query(load_trace_cached(trace_file), wide), plain)  # computes and keeps

    def refuse(*args, **kwargs):
        raise AssertionError("computed, not read")

    monkeypatch.setattr(generative_agents, "query_arrays", refuse)
    _same(_ga_query(load_trace_cached(trace_file), wide), plain)


@pytest.mark.parametrize("bad", ["term", "pad", "ptr", "dtype", "ids", "vocab"])
def test_a_query_entry_that_cannot_be_the_traces_is_built_again(trace_file, bad, capsys):
    trace = load_trace_cached(trace_file)
    plain = _ga_query(load_trace_cached(trace_file, enabled=False))
    _ga_query(trace)
    name = "ga-tfidf-query-narrow"
    path = entry_path(entry_root(trace_file), trace.sha256, name)
    a = safecache.load(path, KIND, lambda arrays, meta: arrays)
    end = int(a["iptr"][-1])
    if bad == "term":  # past the vocabulary: the scan's dense query would be read beyond
        a["qterm"] = a["qterm"] + int(a["vocab"][0])
    elif bad == "pad":  # the padding the term masks read past an item's own terms
        a["iterm"][end:] = 0
    elif bad == "ptr":
        a["iptr"] = a["iptr"][::-1].copy()
    elif bad == "dtype":  # a type the scan was not compiled for with this vocabulary
        a["iterm"] = a["iterm"].astype(np.int64)
    elif bad == "ids":
        a["ids"] = a["ids"] + len(a["ids"])
    else:
        a["vocab"] = np.zeros(1, np.int64)
    safecache.store(path, KIND, a, {"name": name}, level=0)
    _same(_ga_query(load_trace_cached(trace_file)), plain)
    assert "discarded" in capsys.readouterr().err
