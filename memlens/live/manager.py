"""``MemoryManager``: a policy MemLens measured, running inside an agent, recording as it goes.

The manager holds what an agent writes (per stream: one agent or conversation) and answers
what to send to the model now (``context``).  Its decisions are the policy's, made by the
reference engine's own handlers (``memlens.live.engine``), and every call that changes
anything is appended to the record (``memlens.live.record``) before it takes effect, in trace
format 1.1: ``memlens simulate trace=RECORD`` with the record's config (its header) replays
the session's hits, misses, evictions and moves event for event, and reopening a manager on the
record rebuilds its state exactly, then goes on appending.

A policy that declares ``grows`` (window, token_buffer, lru, lfu, memgpt, rule) follows the
growing trace in O(1) per event; the others are replayed from the session's events when their
state is asked for, which is exact but costs time in the session's length (a note in the
README says which).  The oracle reads the future and is refused.
"""

from __future__ import annotations

import hashlib
import os
import time
import uuid
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import NamedTuple

import orjson

from memlens.live import checks
from memlens.live.columns import LiveColumns
from memlens.live.config import (
    LiveConfig,
    config_file,
    make_config,
    registered_node,
    retrieval_blocks,
)
from memlens.live.engine import (
    LiveState,
    StreamEngine,
    replay_into,
    session_result,
    stream_policy,
)
from memlens.live.record import RecordLog, read_header
from memlens.live.restore import restore_into
from memlens.live.telemetry import MEMORY_ID, QUERY_TEXT, emit, make_tracer
from memlens.policy import restores
from memlens.retrieval.storage import DocumentStore, ShortTermCache
from memlens.simulator import MOVE_EVICT, SimResult
from memlens.trace.model import ANNOTATE, ITEM_TYPES, PIN, REQUEST, UNPIN, WRITE, Trace


class Item(NamedTuple):
    """One item of a context: what to put in the prompt, and why it is there (a named tuple:
    a context of a few hundred items is built in microseconds)."""

    id: str
    text: str
    type: str
    tokens: int
    tier: str  # "working" (working memory), "short_term" or "long_term" (retrieved from there)
    value: float | None  # the policy's value of the item now, if the policy has one


class MemoryManager:
    """A live memory policy with a replayable record (module docstring)."""

    def __init__(self, policy: str = "rule", budget: int = 2048,
                 record: str | os.PathLike | None = None, *, demand_fetch: bool = False,
                 seed: int = 0, tokenizer: str | None = None, fsync: str = "close",
                 clock: Callable[[], float] = time.time, documents: DocumentStore | None = None,
                 retrieval: dict | None = None, tiers: dict | None = None,
                 embeddings: dict | None = None, compression: dict | None = None,
                 short_term: ShortTermCache | None = None, tracer=None, otel: bool = False,
                 **policy_params) -> None:  # fmt: skip
        blocks = retrieval_blocks(retrieval, tiers, embeddings, compression)
        config = make_config(registered_node(policy, policy_params), budget, demand_fetch,
                             seed, tokenizer, retrieval=blocks)  # fmt: skip
        self._open(config, record, fsync, clock, explicit=True, documents=documents,
                   short_term=short_term, tracer=make_tracer(tracer, otel))  # fmt: skip

    # ------------------------------------------------------------ opening
    @classmethod
    def from_config(cls, path: str | os.PathLike, record: str | os.PathLike | None = None, *,
                    budget: int | None = None, fsync: str = "close",
                    clock: Callable[[], float] = time.time, documents: DocumentStore | None = None,
                    short_term: ShortTermCache | None = None, tracer=None, otel: bool = False,
                    **settings) -> MemoryManager:  # fmt: skip
        """A manager running the policy of a tuned policy file (``memlens tune``) or a run's
        ``resolved_config.yaml``; ``budget`` (and ``demand_fetch``, ``seed``, ``tokenizer``)
        override the file's."""
        config = config_file(path, budget, settings.pop("demand_fetch", None),
                             settings.pop("seed", None), settings.pop("tokenizer", None))  # fmt: skip
        if settings:
            raise TypeError(f"from_config: unknown argument {sorted(settings)[0]!r}")
        self = cls.__new__(cls)
        self._open(config, record, fsync, clock, explicit=True, documents=documents,
                   short_term=short_term, tracer=make_tracer(tracer, otel))  # fmt: skip
        return self

    @classmethod
    def reopen(cls, record: str | os.PathLike, *, fsync: str = "close",
               clock: Callable[[], float] = time.time, documents: DocumentStore | None = None,
               short_term: ShortTermCache | None = None, tracer=None,
               otel: bool = False) -> MemoryManager:  # fmt: skip
        """A manager on an existing record, configured by its header."""
        if not Path(record).is_file():
            raise ValueError(f"record: {record}: no such record")
        self = cls.__new__(cls)
        self._open(LiveConfig.from_json(read_header(record), str(record)), record, fsync, clock,
                   explicit=False, documents=documents, short_term=short_term,
                   tracer=make_tracer(tracer, otel))  # fmt: skip
        return self

    def _open(self, config: LiveConfig, record, fsync: str, clock, explicit: bool,
              documents: DocumentStore | None, short_term: ShortTermCache | None = None,
              tracer=None) -> None:  # fmt: skip
        from memlens.trace.tokenizer import get_tokenizer

        if documents is not None and not isinstance(documents, DocumentStore):
            raise ValueError("documents: must implement put, get and delete "
                             "(memlens.retrieval.storage.DocumentStore)")  # fmt: skip
        self._config, self._clock, self._closed = config, clock, False
        if short_term is not None and not isinstance(short_term, ShortTermCache):
            raise ValueError("short_term: must implement get and set "
                             "(memlens.retrieval.storage.ShortTermCache)")  # fmt: skip
        self._documents, self._tracer, self._short_term = documents, tracer, short_term
        self._session = uuid.uuid4().hex
        self._tokenizer = get_tokenizer(config.tokenizer)
        self._grows = bool(config.build().grows)
        self._retrieval = config.retrieval_settings()
        self._keeps_events = self._retrieval is not None or not self._grows
        self._log = RecordLog(record, fsync) if record is not None else None
        try:
            if self._log is not None and self._log.existed:
                self._resume(explicit)
            else:
                self._start(_empty_trace())
                if self._log is not None:
                    self._log.write_header(config.to_json(), self._session)
        except BaseException:
            if self._log is not None:
                self._log.close()
            raise
        if documents is not None:  # a restart: the record has every item, the store may not
            for i, ident in enumerate(self._cols.item_id):
                if documents.get(ident) is None:
                    documents.put(ident, self._document(i))

    def _resume(self, explicit: bool) -> None:
        """Rebuild the state the record replays to (the record is locked: it cannot move)."""
        from memlens.trace.io import load_trace

        path = self._log.path
        recorded = LiveConfig.from_json(read_header(path), str(path))
        if explicit and recorded.to_json() != self._config.to_json():
            raise ValueError(f"record: {path} was made with {recorded.to_json()}, not "
                             f"{self._config.to_json()}; reopen it with "
                             "MemoryManager.reopen(record)")  # fmt: skip
        trace = load_trace(path)
        self._session = read_header(path, "session") or trace.sha256  # older records: content
        self._start(trace)
        if self._grows:  # by the kernel where the policy can take its state from one
            kernel = restores(self._config.build()) and trace.n_events > 0
            rebuild = restore_into if kernel else replay_into
            self._engines = rebuild(self._state, trace, self._config.build, self._config.budget,
                                    self._config.demand_fetch, self._config.seed)  # fmt: skip
        if self._keeps_events:
            self._events = _record_events(path)

    def _start(self, trace: Trace) -> None:
        self._reset_trace = trace  # what a new stream's policy is reset with, then grows from
        self._cols = LiveColumns.from_trace(trace)
        self._state = LiveState(self._cols, trace.annotations)
        self._streams = {name: s for s, name in enumerate(trace.stream_names)}
        self._stream_names = list(trace.stream_names)
        self._last_t = [float(trace.ev_t[ev[-1]]) if len(ev) else 0.0
                        for ev in trace.stream_events]  # fmt: skip
        self._item_index = dict(zip(trace.item_id, range(trace.n_items)))
        self._req_ids = set(self._cols.req_id)
        self._engines: list[StreamEngine] = []
        self._events: list[dict] = []  # without grow, or with retrieval: the session's events
        self._replayed: dict[int, tuple[int, object]] = {}
        self._fallback = None  # the policy instance those replays reuse
        self._incremental = None  # with retrieval: the engine context(query) asks (made then)

    # ------------------------------------------------------------ the API
    def write(
        self,
        stream: str,
        text: str,
        type: str,
        tokens: int | None = None,
        cost: float = 0.0,
        meta: dict | None = None,
    ) -> str:  # noqa: A002
        """Record an item the agent wrote; returns its id.  ``tokens``: counted with the
        session's tokenizer when None."""
        self._check_open("write")
        t0 = time.time_ns() if self._tracer is not None else 0
        name, text = checks.stream(stream), checks.text(text, "text")
        code = checks.item_type(type)
        tokens = max(1, self._tokenizer.count(text)) if tokens is None else checks.tokens(tokens)
        cost, meta = checks.cost(cost), checks.meta(meta)
        s = self._stream(name)
        mark = self._moves_mark(s)
        ident = self._new_id("m", len(self._cols.item_id))
        t = self._now(s)
        event = {"event": "write", "id": ident, "stream": name, "t": t, "type": type,
                 "tokens": tokens, "text": text}  # fmt: skip
        if cost:
            event["cost"] = cost
        if meta:
            event["meta"] = meta
        self._record(event)
        e = self._cols.add_event(s, t)
        i = self._cols.add_item(ident, s, tokens, code, cost, text)
        self._state.grow_item(i)
        self._item_index[ident] = i
        if self._documents is not None:
            self._documents.put(ident, {**self._document(i), "meta": meta})
        self._apply(s, WRITE, i, e)
        if self._tracer is not None:
            self._span("write", name, t0, s, mark, {MEMORY_ID: ident, "memlens.item.type": type,
                                                    "memlens.item.tokens": tokens})  # fmt: skip
        return ident

    def count_tokens(self, text: str) -> int:
        """``text``'s tokens by the session's tokenizer (at least 1: what ``write`` records)."""
        return max(1, self._tokenizer.count(checks.text(text, "text")))

    def document(self, item_id: str) -> dict:
        """An item's content as stored: text, type, tokens, stream (and meta, from the
        document store when the manager has one)."""
        i = self._item(item_id)
        if self._documents is not None:
            doc = self._documents.get(item_id)
            if doc is not None:
                return doc
        return self._document(i)

    def _document(self, i: int) -> dict:
        cols = self._cols
        return {"text": cols.item_text[i], "type": ITEM_TYPES[cols.item_type[i]],
                "tokens": cols.item_tokens[i], "stream": self._stream_names[cols.item_stream[i]]}  # fmt: skip

    def context(self, stream: str, query: str | None = None) -> list[Item]:
        """What to send to the model now: stream's working memory under the budget, in write
        order, then (with retrieval on and a ``query``) what the lower tiers bring back for
        it, best first: what a request with text ``query`` made now gets in the replay
        (``memlens.live.retrieval``).  A retrieved item's ``tokens`` is what it costs in the
        context (its stored size, with compression)."""
        self._check_open("context")
        t0 = time.time_ns() if self._tracer is not None else 0
        name = checks.stream(stream)
        if query is not None:
            query = checks.text(query, "query")
        s = self._streams.get(name)
        if s is None:
            return []
        resident, policy = self._resident(s)
        value = getattr(policy, "value", None)
        t = max(self._clock(), self._last_t[s])
        cols = self._cols
        rows = [(i, "working", cols.item_tokens[i]) for i in resident]
        if self._retrieval is not None and query is not None:
            from memlens.live.retrieval import TIER_NAMES

            rows += [
                (i, TIER_NAMES[tier], tokens) for i, tier, tokens in self._retrieved(name, query, t)
            ]
        items = [Item(cols.item_id[i], cols.item_text[i], ITEM_TYPES[cols.item_type[i]],
                      tokens, tier, float(value(i, t)) if value is not None else None)
                 for i, tier, tokens in rows]  # fmt: skip
        if self._tracer is not None:
            self._span("context", name, t0, s, None, {**_context_attributes(items),
                                                      QUERY_TEXT: query})  # fmt: skip
        return items

    def used(
        self, stream: str, item_ids: Sequence, request_id: str | None = None, text: str = ""
    ) -> str:
        """What the step used: each entry an id, or a list of alternative ids (any one served
        it).  Records the request (hits are touched, misses counted, fetched back with
        ``demand_fetch``); returns its id."""
        self._check_open("used")
        t0 = time.time_ns() if self._tracer is not None else 0
        name, text = checks.stream(stream), checks.text(text, "text")
        s = self._streams.get(name)
        groups, needs = self._needs(name, s, item_ids)
        if request_id is None:
            request_id = self._new_id("r", len(self._cols.req_id))
        elif not isinstance(request_id, str) or not request_id:
            raise ValueError(f"request_id: must be a non-empty string, got {request_id!r}")
        elif request_id in self._req_ids or request_id in self._item_index:
            raise ValueError(f"request_id: {request_id!r} is already an id in this session")
        if s is None:  # no needs, in a stream that has written nothing yet
            s = self._stream(name)
        mark = self._moves_mark(s)
        t = self._now(s)
        self._record({"event": "request", "id": request_id, "stream": name, "t": t,
                      "needs": needs, "text": text})  # fmt: skip
        e = self._cols.add_event(s, t)
        r = self._cols.add_request(request_id, groups)
        self._state.grow_request()
        self._req_ids.add(request_id)
        self._apply(s, REQUEST, r, e)
        if self._tracer is not None:
            attrs = {"memlens.request.id": request_id, "memlens.request.needs": len(groups)}
            if self._grows:  # the replayed policies decide hits when their state is asked for
                lo, hi = self._cols.needs_ptr[r], self._cols.needs_ptr[r + 1]
                attrs["memlens.request.hits"] = sum(self._state.need_hit[lo:hi])
            self._span("used", name, t0, s, mark, attrs)
        return request_id

    def pin(self, item_id: str) -> None:
        """A person marked the item must-keep: it is brought back and never evicted."""
        self._target("pin", PIN, item_id)

    def unpin(self, item_id: str) -> None:
        self._target("unpin", UNPIN, item_id)

    def annotate(self, item_id: str, value: float | None = None, note: str | None = None) -> None:
        """A person's value in [0, 1] and/or note on an item (the rule scorer keeps the value)."""
        self._target("annotate", ANNOTATE, item_id, checks.annotation(value, note))

    def close(self) -> None:
        """Finish the record (synced unless ``fsync="never"``) and release it."""
        if not self._closed and self._log is not None:
            self._log.close()
        self._closed = True

    def __enter__(self) -> MemoryManager:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # ------------------------------------------------------------ reading
    @property
    def config(self) -> dict:
        """The resolved config (what the record's header holds)."""
        return self._config.to_json()

    @property
    def record(self) -> Path | None:
        return None if self._log is None else self._log.path

    def result(self) -> SimResult:
        """The session so far as a ``SimResult``: what a replay of its record must equal."""
        if self._grows:
            return session_result(self._state, self._engines, self._config.name,
                                  self._config.budget, self._config.demand_fetch)  # fmt: skip
        from memlens.simulator import simulate

        return simulate(self._trace(), self._config.build(), self._config.budget,
                        self._config.demand_fetch, self._config.seed, engine="reference")  # fmt: skip

    def counts(self) -> dict[str, int]:
        """Hits, misses and evictions so far."""
        res = self.result()
        hits = int(res.need_hit.sum())
        return {"hits": hits, "misses": int(res.need_hit.shape[0]) - hits,
                "evictions": int(res.evictions.sum())}  # fmt: skip

    # ----------------------------------------------------------- internals
    def _check_open(self, what: str) -> None:
        if self._closed:
            raise ValueError(f"{what}: the manager is closed")

    def _stream(self, name: str) -> int:
        s = self._streams.get(name)
        if s is None:
            s = self._streams[name] = len(self._stream_names)
            self._stream_names.append(name)
            self._last_t.append(0.0)
            if self._grows:
                cfg = self._config
                policy = stream_policy(cfg.build, self._engines)
                self._engines.append(StreamEngine(self._state, self._reset_trace, policy,
                                                  cfg.budget, cfg.demand_fetch, s, cfg.seed))  # fmt: skip
        return s

    def _new_id(self, prefix: str, n: int) -> str:
        ident = f"{prefix}{n}"
        while ident in self._item_index or ident in self._req_ids:
            n += 1
            ident = f"{prefix}{n}"
        return ident

    def _now(self, s: int) -> float:
        """The event's trace time: the clock, never earlier than the stream's last event."""
        t = float(self._clock())
        t = max(t, self._last_t[s])
        self._last_t[s] = t
        return t

    def _record(self, event: dict) -> None:
        if self._log is not None:
            self._log.append(event)
        if self._keeps_events:
            self._events.append(event)

    def _retrieved(self, name: str, query: str, t: float) -> list:
        """What retrieval brings back (``memlens.live.retrieval``), from the ``short_term``
        cache when this session asked the same at the same point before (a restart too)."""
        from memlens.live.retrieval import retrieve

        key = None
        if self._short_term is not None:
            digest = hashlib.sha256(query.encode()).hexdigest()[:32]
            key = f"context:{self._session}:{len(self._events)}:{name}:{t!r}:{digest}"
            cached = self._short_term.get(key)
            if cached is not None:
                return cached
        got = self._incremental_context(name, query, t)
        if got is None:
            got = retrieve(self._retrieval, self._events, self.result(), name, query, t,
                           self._config.seed)  # fmt: skip
        if key is not None:
            self._short_term.set(key, [list(g) for g in got], self._retrieval.tiers.ttl_s)
        return got

    def _incremental_context(self, name: str, query: str, t: float) -> list | None:
        """``retrieve``'s answer from the session's incremental retrieval engine (made at the
        first call, fed the events since the previous one): None where it does not serve
        (policies replayed from the record, a sentence model, a TTL expiry due now)."""
        from memlens.live.retrieval import IncrementalRetrieval, incremental_supported

        if not self._grows or not incremental_supported(self._retrieval):
            return None
        if self._incremental is None:
            self._incremental = IncrementalRetrieval(self._retrieval, self._cols,
                                                     self._config.seed)  # fmt: skip
        vector = self._incremental.catch_up(self._events, self._engines, query)
        return self._incremental.context(self._streams[name], vector, t)

    def _moves_mark(self, s: int) -> int:
        """Where stream ``s``'s move log is now (policies that grow: the live engine's)."""
        return len(self._engines[s].mv_kind) if self._grows else 0

    def _span(self, call: str, stream: str, t0: int, s: int, mark: int | None,
              attributes: dict) -> None:  # fmt: skip
        """The call's span, with the items it evicted (policies that grow) as events."""
        evicted = []
        if mark is not None and self._grows:
            engine, cols = self._engines[s], self._cols
            evicted = [cols.item_id[engine.mv_item[k]] for k in range(mark, len(engine.mv_kind))
                       if engine.mv_kind[k] == MOVE_EVICT]  # fmt: skip
        source = None if self._log is None else str(self._log.path)
        emit(self._tracer, call, stream, source, t0, time.time_ns(), attributes, evicted)

    def _apply(self, s: int, kind: int, ref: int, e: int) -> None:
        if self._grows:
            self._engines[s].apply(kind, ref, e)

    def _item(self, item_id, field: str = "item_id") -> int:
        i = self._item_index.get(item_id) if isinstance(item_id, str) else None
        if i is None:
            raise KeyError(f"{field}: no item {item_id!r} in this session")
        return i

    def _needs(self, name: str, s: int | None, item_ids) -> tuple[list[tuple[int, ...]], list]:
        """The request's need groups as the trace loader resolves them (first-listed order,
        a repeated need once), and the needs as recorded."""
        if isinstance(item_ids, (str, bytes)) or not isinstance(item_ids, Sequence):
            raise ValueError(f"item_ids: must be a list of ids, got {item_ids!r}")
        resolved: dict = {}
        for k, need in enumerate(item_ids):
            alts = [need] if isinstance(need, str) else need
            if not isinstance(alts, (list, tuple)) or not alts:
                raise ValueError(f"item_ids[{k}]: an id or a non-empty list of ids, got {need!r}")
            group: dict[int, None] = {}
            for a, ident in enumerate(alts):
                field = f"item_ids[{k}]" if isinstance(need, str) else f"item_ids[{k}][{a}]"
                i = self._item(ident, field)
                owner = self._stream_names[self._cols.item_stream[i]]
                if owner != name:
                    raise ValueError(f"{field}: item {ident!r} belongs to stream {owner!r}, "
                                     f"not {name!r}")  # fmt: skip
                if i in group:
                    raise ValueError(f"{field}: alternative {ident!r} is listed twice")
                group[i] = None
            items = tuple(group)
            key = items[0] if len(items) == 1 else tuple(sorted(items))
            resolved.setdefault(key, items)
        needs = [n if isinstance(n, str) else list(n) for n in item_ids]
        return list(resolved.values()), needs

    def _target(self, what: str, kind: int, item_id, annotation=None) -> None:
        self._check_open(what)
        t0 = time.time_ns() if self._tracer is not None else 0
        i = self._item(item_id)
        s = self._cols.item_stream[i]
        mark = self._moves_mark(s)
        t = self._now(s)
        event = {"event": what, "target": item_id, "stream": self._stream_names[s], "t": t}
        if annotation is not None:
            value, note = annotation
            if value is not None:
                event["value"] = value
            if note is not None:
                event["note"] = note
        self._record(event)
        e = self._cols.add_event(s, t)
        if annotation is not None:
            self._state.annotations[e] = annotation
        self._apply(s, kind, i, e)
        if self._tracer is not None:
            self._span(what, self._stream_names[s], t0, s, mark, {MEMORY_ID: item_id})

    def _trace(self) -> Trace:
        """The session's events as a trace (policies without ``grow``)."""
        from memlens.trace.io import trace_from_events

        header = {"event": "header", "version": "1.1"}
        return trace_from_events([header, *self._events], "<live session>")

    def _resident(self, s: int) -> tuple[list[int], object]:
        """Stream ``s``'s resident items in write order, and the policy holding them."""
        if self._grows:
            engine = self._engines[s]
            return sorted(engine.resident), engine.policy
        cached = self._replayed.get(s)
        if cached is None or cached[0] != len(self._events):
            from memlens.simulator import _Replay

            cfg = self._config
            if self._fallback is None:  # one instance, reset per replay (as a sweep does)
                self._fallback = cfg.build()
            replay = _Replay(self._trace(), self._fallback, cfg.budget, cfg.demand_fetch, None)
            replay.run_stream(s, cfg.seed)
            cached = self._replayed[s] = (len(self._events), replay)
        replay = cached[1]
        in_wm = replay.in_wm
        return [i for i in self._state.items_of(s) if in_wm[i]], replay.policy


def _context_attributes(items: list[Item]) -> dict:
    """What a context span says: how many items and tokens, from which tier."""
    out = {"memlens.context.items": len(items),
           "memlens.context.tokens": sum(i.tokens for i in items)}  # fmt: skip
    for tier in ("working", "short_term", "long_term"):
        out[f"memlens.context.{tier}"] = sum(1 for i in items if i.tier == tier)
    return out


def _empty_trace() -> Trace:
    """An empty trace: what a new session's policies are reset with."""
    from memlens.trace.io import trace_from_events

    return trace_from_events([], "<live session>")


def _record_events(path: Path) -> list[dict]:
    """A record's events as dicts (its header left out), for policies without ``grow``."""
    from memlens.trace.lines import read_lines

    events = []
    for _, raw in read_lines(path):
        if raw and not raw.isspace():
            obj = orjson.loads(raw)
            if obj.get("event") != "header":
                events.append(obj)
    return events
