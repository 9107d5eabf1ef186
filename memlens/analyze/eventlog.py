"""The event log: every action of one replay, one row each, as ``events.parquet``.

Why a log beside ``moves.parquet``: a move says where an item went; the event log also says why
(the write, fetch or pin that an eviction made room for), what each request hit and missed and
where the missed item was at that moment, and, for scoring policies, what the item was worth
before and after.  The analytics page (``memlens ui``) and the static report query it with
DuckDB; nothing else has to hold the replay in memory.

How it is built, and why it costs little:

* almost every row is derived after the replay, vectorised, from what the replay keeps anyway:
  the trace's events (write, pin, unpin, annotate), the per-reference hit marks (hit, miss), the
  working-memory move log (admit, decline, evict, promote) aligned with the tier log
  (demote: short-term cache -> long-term store; compress: an item stored compressed in the
  long-term store), and the retrieval record (retrieve);
* values: for the bundled scoring policies (the rule scorer and MemoryBank: their
  exact classes) they are computed after the replay, from the trace and the move log, by one
  compiled pass (:class:`KernelValues`, ``memlens.kernels.values``): nothing wraps the policy,
  so it replays on its compiled kernel with the full log, and the records are the reference
  probe's bit for bit (tested per policy).  Any other scoring policy (one with ``value(item,
  t)``, ``retention`` or ``heat``, or a scan policy's ``scores(items, t)``; a subclass of a
  bundled one) gets a :class:`ValueProbe` before the replay: it wraps the policy's methods on
  the instance and asks the policy for the item's value at inserts, evictions, uses and
  annotations, which a compiled kernel never calls, so that replay runs on the reference
  engine (``engine=fast`` says so).  A subclass of the rule scorer gets its own probe
  (:class:`RuleValueProbe`): its value formula inlined over the stream's state, and no
  exponential where the item's clock has just restarted (the same floats, bit for bit,
  tested).  ``benchmarks/bench_eventlog.py`` measures what the log costs;
  ``rescore`` rows (a use or an annotation changed a value) can be sampled
  (``events.rescore_sample``), deterministically by (item, event).

Row order is replay order: by event, then the trace's own row, hits and misses, rescores,
then moves in the order they happened.  Columns: see :data:`COLUMNS` and ``docs/how-to/debug-in-the-page.md``.
"""

from __future__ import annotations

import contextlib
import math
import struct
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from memlens._util.values import number

KINDS = ("write", "admit", "decline", "promote", "demote", "evict", "compress", "retrieve",
         "hit", "miss", "pin", "unpin", "annotate", "rescore")  # fmt: skip
REASONS = (
    "",
    "write",  # the trace wrote the item
    "admitted",  # the policy admitted the write
    "declined_by_policy",
    "larger_than_budget",
    "room_for_write",  # an eviction that made room for the write at this event (cause_item)
    "room_for_fetch",  # ... for a need fetched back after a miss (demand fetch)
    "room_for_pin",
    "room_for_promotion",
    "pins_released",  # an unpin let working memory shrink back to the budget
    "demand_fetch",
    "pinned",
    "retrieval_promotion",
    "short_term_overflow_or_ttl",
    "needed",  # a request needed the item (hit or miss)
    "use",  # a rescore: a request used the item
    "annotation",  # a person's annotation (a rescore, or the annotate row itself)
    "retrieved",
    "stored_compressed",
    "person",  # pin/unpin events of the trace
)
TIERS = ("", "new", "wm", "stc", "lts")  # "" = not a tier move; codes are tier + 2
COLUMNS = ("seq", "event", "t", "stream", "kind", "item", "item_id", "request", "request_id",
           "tier_before", "tier_after", "value_before", "value_after", "reason", "cause_item",
           "tokens", "item_type", "text", "derived_from")  # fmt: skip

_K = {k: i for i, k in enumerate(KINDS)}
_R = {r: i for i, r in enumerate(REASONS)}
# what the probe saw
P_INSERT, P_EVICT, P_USE, P_ANNOTATE = 0, 1, 2, 3
#: One probe record: event, item, what (P_*), value before, value after.  Packed into a
#: bytearray: ``extend(pack(...))`` costs half of ``array("d").extend(tuple)``, which converts
#: each element through the argument parser (measured: 0.32 s against 0.72 s for 2M records).
RECORD = struct.Struct("<qqqdd")
RECORD_DTYPE = np.dtype([("event", "<i8"), ("item", "<i8"), ("what", "<i8"), ("before", "<f8"),
                         ("after", "<f8")])  # fmt: skip


@dataclass
class EventLogConfig:
    """The ``events:`` settings block."""

    enabled: bool = True  # write events.parquet (and report.html) into the run folder
    values: bool = True  # scoring policies: record values (value_before/value_after, rescore)
    rescore_sample: float = 1.0  # share of rescore rows kept (deterministic by item and event)

    def __post_init__(self) -> None:
        number("events.rescore_sample", self.rescore_sample, low=0, high=1)


def sampled(item: int, event: int, rate: float) -> bool:
    """Whether the rescore row of (item, event) is kept: a fixed hash, so runs agree."""
    if rate >= 1.0:
        return True
    h = ((item * 0x9E3779B1) ^ (event * 0x85EBCA77)) & 0xFFFFFFFF
    return h < rate * 4294967296.0


def _values_before(items, now: int, rate: float, val, t: float) -> tuple[list, list]:
    """The needed items whose rows are kept (:func:`sampled`) and their values before the
    policy observes the request (the probes' ``observe`` wrappers log before and after)."""
    if rate < 1.0:
        items = [i for i in items if sampled(i, now, rate)]
    return items, [val(i, t) for i in items]


#: Per-item value methods of the scoring policies, in the order looked for: the rule scorer's
#: ``value``, MemoryBank's ``retention``, MemoryOS's ``heat``.
VALUE_METHODS = ("value", "retention", "heat")
#: What a value method raises for an item it has no value for (a scan policy asked about an
#: item it never saw): logged as nan.
NO_VALUE = (KeyError, IndexError, ValueError, ZeroDivisionError)


def value_function(policy):
    """``f(item, t) -> float`` for a scoring policy, else None.

    A scan policy without a per-item method is asked ``scores([item], t)``, unless its scores
    are normalised over the resident set (Generative Agents' min-max normalisation): one item
    alone has no score then, and its log carries no values.
    """
    from memlens.policies.scan import ScanPolicy

    for name in VALUE_METHODS:
        if callable(getattr(policy, name, None)):
            return getattr(policy, name)
    if isinstance(policy, ScanPolicy) and not getattr(policy, "normalize", False):
        return lambda i, t: policy.scores([i], t)[0]
    return None


class ValueProbe:
    """Records a scoring policy's values during the replay (see the module docstring).

    Attached by wrapping ``reset`` on the policy instance; after every reset the interface
    methods the simulator looks up (``insert``, ``victims``, ``observe``, ``annotate``) are
    wrapped again, from the originals, so wrappers never nest.  The wrappers only read values:
    the replay's decisions are the same with and without the probe (tested).  They are
    closures over the record's ``append`` methods: this is a hot path (one to three value
    lookups per event).
    """

    WRAPPED = ("insert", "victims", "observe", "annotate")

    def __init__(self, policy, value, rescore_sample: float = 1.0) -> None:
        self.policy, self.rate = policy, float(rescore_sample)
        # packed records (see RECORD): one pack and one C-level extend each
        self.rows = bytearray()
        self._value = value
        self._mine: dict[str, object] = {}
        self._reset = policy.reset
        policy.reset = self._on_reset
        # the probe watches the policy's Python methods, which a compiled kernel never calls:
        # a watched policy replays on the reference engine
        policy.kernel_supported = lambda: False
        policy.kernel_unsupported_reason = (
            "the event log's value probe (events.values=true) watches its Python methods, which "
            "a kernel never calls; events.values=false replays it on its kernel"
        )

    def _bind_value(self):
        """``val(item, t)``, total: the policy's own method, nan where it has no value for the
        item (a scan policy asked about an item it never saw)."""
        value, nan = self._value, math.nan

        def val(item: int, t: float) -> float:
            try:
                return value(item, t)
            except NO_VALUE:
                return nan

        return val

    def _on_reset(self, ctx) -> None:
        d = self.policy.__dict__
        for name, fn in self._mine.items():
            if d.get(name) is fn:
                del d[name]
        self._reset(ctx)
        if getattr(self, "_trace", None) is not ctx.trace:  # once per trace, not per stream
            self._trace, self.t = ctx.trace, ctx.trace.ev_t.tolist()
            self.needs_ptr, self.needs = ctx.trace.needs_ptr.tolist(), ctx.trace.needs.tolist()
        self._val = self._bind_value()  # after the reset: the policy's state is new
        self._mine = {name: getattr(self, f"_wrap_{name}")(getattr(self.policy, name))
                      for name in self.WRAPPED}  # fmt: skip
        d.update(self._mine)

    def _wrap_insert(self, insert):
        """The ``try`` is inline (no call to ``val``): an insert is the commonest record."""
        t_of, value, nan = self.t, self._value, math.nan
        rec, pack = self.rows.extend, RECORD.pack

        def wrapped(item: int, now: int) -> None:
            insert(item, now)
            try:
                v = value(item, t_of[now])
            except NO_VALUE:
                v = nan
            rec(pack(now, item, P_INSERT, v, v))

        return wrapped

    def _wrap_victims(self, victims):
        t_of, value, nan = self.t, self._value, math.nan
        rec, pack = self.rows.extend, RECORD.pack

        def wrapped(excess: int, now: int) -> list[int]:
            chosen = victims(excess, now)
            t = t_of[now]
            for i in chosen:
                try:
                    v = value(i, t)
                except NO_VALUE:
                    v = nan
                rec(pack(now, i, P_EVICT, v, v))
            return chosen

        return wrapped

    def _wrap_observe(self, observe):
        t_of, val, rate, needs, ptr = self.t, self._val, self.rate, self.needs, self.needs_ptr
        rec, pack = self.rows.extend, RECORD.pack

        def wrapped(request: int, now: int) -> None:
            t = t_of[now]
            items, old = _values_before(needs[ptr[request] : ptr[request + 1]], now, rate, val, t)
            observe(request, now)
            for i, b in zip(items, old):
                rec(pack(now, i, P_USE, b, val(i, t)))

        return wrapped

    def _wrap_annotate(self, annotate):
        t_of, val, rate = self.t, self._val, self.rate
        rec, pack = self.rows.extend, RECORD.pack

        def wrapped(item: int, value, note, now: int) -> None:
            t = t_of[now]
            b = val(item, t)
            annotate(item, value, note, now)
            if sampled(item, now, rate):
                rec(pack(now, item, P_ANNOTATE, b, val(item, t)))

        return wrapped

    def columns(self) -> dict[str, np.ndarray]:
        """The records as columns (event, item, what, before, after), in replay order."""
        n = len(self.rows) // RECORD.size
        if getattr(self, "_cols", (None, -1))[1] == n:
            return self._cols[0]
        table = np.frombuffer(bytes(self.rows), dtype=RECORD_DTYPE)  # a copy: rows may grow
        cols = {"event": table["event"].astype(np.int64), "item": table["item"].astype(np.int32),
                "what": table["what"].astype(np.int8), "before": table["before"].copy(),
                "after": table["after"].copy()}  # fmt: skip
        self._cols = (cols, n)
        return cols


class RuleValueProbe(ValueProbe):
    """The probe for the rule scorer: the same records, with its value formula inlined.

    :meth:`RuleScorer.value` costs a call and a dozen attribute lookups, one to three times per
    event; here the formula reads the stream's state lists from closure cells instead (bound
    again after every ``reset``: the lists are new per stream).  Same arithmetic in the same
    order, so the same floats, bit for bit (tested against ``RuleScorer.value``).
    """

    def _state(self):
        p = self.policy
        return (p._override.get, p._type, p._base, p._uses, p._anchor, p.floor, p.lam,
                p.use_cap, p.use_boost)  # fmt: skip

    def _bind_value(self):
        get, typ, base, uses, anchor, floor, lam, cap, boost = self._state()
        exp = math.exp

        def val(item: int, t: float) -> float:
            ov = get(item)
            if ov is not None:
                return ov
            ty = typ[item]
            b = base[item] + min(cap, boost * uses[item])
            return max(floor[ty], b * exp(-lam[ty] * (t - anchor[item])))

        return val

    def _wrap_insert(self, insert):
        """An inserted item's clock starts at ``now``: ``exp(-lam * 0.0)`` is 1.0 exactly, so
        its value is ``max(floor, B)`` without the exponential."""
        t_of, rec, pack = self.t, self.rows.extend, RECORD.pack
        get, typ, base, uses, anchor, floor, lam, cap, boost = self._state()

        def wrapped(item: int, now: int) -> None:
            insert(item, now)
            v = get(item)
            if v is None:
                if anchor[item] != t_of[now]:  # never: insert restarts the clock (kept total)
                    v = self._val(item, t_of[now])
                else:
                    v = max(floor[typ[item]], base[item] + min(cap, boost * uses[item]))
            rec(pack(now, item, P_INSERT, v, v))

        return wrapped

    def _wrap_victims(self, victims):
        t_of, val = self.t, self._val
        rec, pack = self.rows.extend, RECORD.pack

        def wrapped(excess: int, now: int) -> list[int]:
            chosen = victims(excess, now)
            t = t_of[now]
            for i in chosen:
                v = val(i, t)
                rec(pack(now, i, P_EVICT, v, v))
            return chosen

        return wrapped

    def _wrap_observe(self, observe):
        """A use restarts the item's clock (``anchor = t``), so its value after the use is
        ``max(floor, B)`` with the new use count, as after an insert."""
        t_of, rate, needs, ptr = self.t, self.rate, self.needs, self.needs_ptr
        rec, pack, val = self.rows.extend, RECORD.pack, self._val
        get, typ, base, uses, anchor, floor, lam, cap, boost = self._state()

        def wrapped(request: int, now: int) -> None:
            t = t_of[now]
            items, old = _values_before(needs[ptr[request] : ptr[request + 1]], now, rate, val, t)
            observe(request, now)
            for i, v0 in zip(items, old):
                v = get(i)
                if v is None:
                    if anchor[i] != t:  # never: observe restarts the clock (kept total)
                        v = val(i, t)
                    else:
                        v = max(floor[typ[i]], base[i] + min(cap, boost * uses[i]))
                rec(pack(now, i, P_USE, v0, v))

        return wrapped


class KernelValues:
    """The value records of the rule scorer and MemoryBank (exact classes),
    computed after the replay from its move log by ``memlens.kernels.values``: the same
    records as a :class:`ValueProbe`'s, bit for bit, with nothing wrapped, so the policy
    replays on its compiled kernel.  :func:`build_event_log` binds the finished replay."""

    def __init__(self, policy, rescore_sample: float = 1.0) -> None:
        self.policy, self.rate = policy, float(rescore_sample)
        self.trace = self.result = None
        self._cols: dict[str, np.ndarray] | None = None

    def bind(self, trace, result) -> None:
        self.trace, self.result, self._cols = trace, result, None

    def _mode(self):
        """(mode, parameters, per-item arrays) of :func:`memlens.kernels.values.records`."""
        from memlens.kernels import values as kv
        from memlens.policies.memorybank import MemoryBank
        from memlens.trace.features import static_value

        p, trace = self.policy, self.trace
        if type(p) is MemoryBank:
            return kv.MEMORYBANK, [p.time_unit_s, p.initial_strength, p.strength_increment], {}
        base = static_value(trace, p.type_base, p.boosts, p.cost_threshold, p.cost_boost)
        params = [len(p.lam), p.use_cap, p.use_boost, 0.0, *p.lam, *p.floor]
        return kv.RULE, params, {"typ": trace.item_type, "base": base}

    def columns(self) -> dict[str, np.ndarray]:
        """The records (event, item, what, before, after), by event (a replay's order)."""
        if self.result is None:
            raise RuntimeError("KernelValues: no replay bound yet (build_event_log binds it)")
        if self._cols is None:
            from memlens.kernels.values import records

            mode, params, arrays = self._mode()
            self._cols = records(mode, np.asarray(params, np.float64), self.trace, self.result,
                                 self.rate, **arrays)  # fmt: skip
        return self._cols


def kernel_valued(policy) -> bool:
    """Whether ``policy``'s values come from :class:`KernelValues` (its exact class is one
    ``memlens.kernels.values`` mirrors).  MemoryOS is not one: its heat depends on its
    short-term queue and promotions, which a move log does not show, so its values come from a
    probe on the reference engine."""
    from memlens.policies.memorybank import MemoryBank
    from memlens.policies.rule import RuleScorer

    if type(policy) is MemoryBank:  # the kernel's values are the paper's continuous retention
        return not policy.whole_days
    return type(policy) is RuleScorer


def attach_probe(policy, cfg: EventLogConfig | None) -> ValueProbe | KernelValues | None:
    """Attach the value records when the log is on and the policy scores its items:
    :class:`KernelValues` for the bundled scoring policies (they keep their kernels), a
    :class:`ValueProbe` for any other (it replays on the reference engine)."""
    if cfg is None or not (cfg.enabled and cfg.values):
        return None
    if kernel_valued(policy):
        probe = KernelValues(policy, cfg.rescore_sample)
        policy._memlens_value_probe = probe
        return probe
    value = value_function(policy)
    if value is None:
        return None
    from memlens.policies.rule import RuleScorer

    kind = (
        RuleValueProbe if getattr(type(policy), "value", None) is RuleScorer.value else ValueProbe
    )
    probe = kind(policy, value, cfg.rescore_sample)
    policy._memlens_value_probe = probe  # found again by build_event_log
    return probe


# ----------------------------------------------------------------------- building
class _Rows:
    """Row blocks: each a dict of equal-length numpy columns; stitched and sorted at the end."""

    def __init__(self) -> None:
        self.blocks: list[dict[str, np.ndarray]] = []

    def add(self, n: int, *, event, kind, phase, item=-1, request=-1, tb=0, ta=0,
            vb=math.nan, va=math.nan, reason=0, cause=-1) -> None:  # fmt: skip
        def col(x, dtype):
            return np.broadcast_to(np.asarray(x, dtype=dtype), (n,))

        if n == 0:
            return
        self.blocks.append({
            "event": col(event, np.int64), "phase": col(phase, np.int8),
            "kind": col(kind, np.int8), "item": col(item, np.int32),
            "request": col(request, np.int32), "tier_before": col(tb, np.int8),
            "tier_after": col(ta, np.int8), "value_before": col(vb, np.float64),
            "value_after": col(va, np.float64), "reason": col(reason, np.int8),
            "cause_item": col(cause, np.int32),
        })  # fmt: skip

    def stitched(self) -> dict[str, np.ndarray]:
        """The blocks as one table in replay order: by event, then phase, then as added (a
        stable sort on one key; each block is in event order already, which it runs on)."""
        cols = {k: np.concatenate([b[k] for b in self.blocks]) for k in self.blocks[0]}
        order = np.argsort(cols["event"] * PHASES + cols["phase"], kind="stable")
        return {k: v[order] for k, v in cols.items()}


#: Phases within an event (``_Rows.add``'s ``phase``: 0 the event itself, 1 needs, 2 retrieval
#: and rescoring, 3 moves); the sort key is ``event * PHASES + phase``.
PHASES = 4


def _trace_rows(rows: _Rows, trace) -> None:
    from memlens.trace.model import EventKind

    kinds, refs = trace.ev_kind, trace.ev_ref
    for ek, name, reason in ((EventKind.WRITE, "write", "write"), (EventKind.PIN, "pin", "person"),
                             (EventKind.UNPIN, "unpin", "person")):  # fmt: skip
        ev = np.flatnonzero(kinds == int(ek))
        rows.add(len(ev), event=ev, kind=_K[name], phase=0, item=refs[ev], reason=_R[reason])
    ev = np.flatnonzero(kinds == int(EventKind.ANNOTATE))
    vals = [trace.annotations.get(int(e), (None, None))[0] for e in ev.tolist()]
    va = np.array([math.nan if v is None else v for v in vals], dtype=np.float64)
    rows.add(len(ev), event=ev, kind=_K["annotate"], phase=0, item=refs[ev], va=va,
             reason=_R["annotation"])  # fmt: skip


def _need_rows(rows: _Rows, trace, result, tiers) -> None:
    """One hit or miss row per needed reference, with the item's tier just before the request."""
    n_ref = trace.needs.shape[0]
    if n_ref == 0:
        return
    req = np.repeat(np.arange(trace.n_requests, dtype=np.int64), np.diff(trace.needs_ptr))
    ev = trace.req_event[req].astype(np.int64)
    item = trace.needs.astype(np.int64)
    span = int(trace.n_events) + 1
    order = np.lexsort((np.arange(len(tiers.item)), tiers.event, tiers.item))
    keys = tiers.item.astype(np.int64)[order] * span + tiers.event[order]
    at = np.searchsorted(keys, item * span + ev, side="left") - 1  # last move strictly before
    ok = at >= 0
    prev = order[np.where(ok, at, 0)]
    ok &= tiers.item[prev] == item
    tier = np.where(ok, tiers.dst[prev], -1).astype(np.int8) + 2
    hit = result.need_hit.astype(bool)
    rows.add(n_ref, event=ev, kind=np.where(hit, _K["hit"], _K["miss"]), phase=1, item=item,
             request=req, tb=tier, ta=tier, reason=_R["needed"])  # fmt: skip


def _move_values(probe: ValueProbe, mv_event, mv_item, kind) -> np.ndarray:
    """Each move's item value at that move.  The probe saw every insert and every victim in
    replay order, as the move log did; sorted stably by event, both line up one to one (checked;
    a policy that calls its own ``insert`` falls back to a lookup by event and item)."""
    c = probe.columns()
    out = np.full(len(kind), np.nan)
    entering = (kind == _K["admit"]) | (kind == _K["promote"])
    for what, sel in ((P_EVICT, kind == _K["evict"]), (P_INSERT, entering)):
        mine = c["what"] == what
        order = np.argsort(c["event"][mine], kind="stable")
        ev, it, v = c["event"][mine][order], c["item"][mine][order], c["before"][mine][order]
        if np.array_equal(ev, mv_event[sel]) and np.array_equal(it, mv_item[sel]):
            out[sel] = v
        else:
            seen = dict(zip(zip(ev.tolist(), it.tolist()), v.tolist()))
            out[sel] = [seen.get(k, math.nan) for k in
                        zip(mv_event[sel].tolist(), mv_item[sel].tolist())]  # fmt: skip
    return out


def _move_reasons(trace, budget: int, mv_event, mv_item, mv_kind):
    """(kind, reason, cause item) of every working-memory move."""
    from memlens.simulator import MOVE_ADMIT, MOVE_BYPASS, MOVE_EVICT, MOVE_PIN, MOVE_PROMOTE
    from memlens.trace.model import EventKind

    n = len(mv_kind)
    kind = np.full(n, _K["promote"], np.int8)
    reason = np.full(n, _R["demand_fetch"], np.int8)
    cause = np.full(n, -1, np.int32)
    kind[mv_kind == MOVE_ADMIT] = _K["admit"]
    reason[mv_kind == MOVE_ADMIT] = _R["admitted"]
    by = mv_kind == MOVE_BYPASS
    kind[by] = _K["decline"]
    big = trace.item_tokens[mv_item] > budget
    reason[by] = np.where(big[by], _R["larger_than_budget"], _R["declined_by_policy"])
    reason[mv_kind == MOVE_PIN] = _R["pinned"]
    reason[mv_kind == MOVE_PROMOTE] = _R["retrieval_promotion"]
    ev = mv_kind == MOVE_EVICT
    kind[ev] = _K["evict"]
    ek = trace.ev_kind[mv_event[ev]]
    r = np.full(int(ev.sum()), _R["room_for_fetch"], np.int8)
    r[ek == int(EventKind.WRITE)] = _R["room_for_write"]
    r[ek == int(EventKind.PIN)] = _R["room_for_pin"]
    r[ek == int(EventKind.UNPIN)] = _R["pins_released"]
    # the cause: the item that entered WM last before this eviction (same event)
    entered = np.where(mv_kind != MOVE_EVICT, mv_item, -1)
    last_in = np.maximum.accumulate(np.where(entered >= 0, np.arange(n), -1)) if n else entered
    src = np.where(last_in >= 0, last_in, 0)
    same = (last_in >= 0) & (mv_event[src] == mv_event)
    cause_all = np.where(same, mv_item[src], -1)
    promo = same & (mv_kind[src] == MOVE_PROMOTE)
    r[promo[ev]] = _R["room_for_promotion"]
    reason[ev] = r
    cause[ev] = cause_all[ev]
    return kind, reason, cause


def _move_rows(rows: _Rows, run, probe: ValueProbe | None) -> None:
    """Working-memory moves (aligned with the tier log), demotions and compressions."""
    from memlens.retrieval.tiers import LTS, STC, WM

    trace, result, tiers = run.trace, run.result, run.tiers
    src, dst = tiers.src.astype(np.int8), tiers.dst.astype(np.int8)
    primary = (src == -1) | (src == WM) | (dst == WM)
    n_moves = len(result.move_kind)
    tev, titem = tiers.event.astype(np.int64), tiers.item.astype(np.int32)
    mv_event, mv_item, mv_kind = result.move_event, result.move_item, result.move_kind
    aligned = (
        int(primary.sum()) == n_moves
        and np.array_equal(tev[primary], mv_event)
        and (np.array_equal(titem[primary], mv_item))
    )
    tb = src[primary] + 2 if aligned else 0  # tiers unknown if the logs do not line up
    ta = dst[primary] + 2 if aligned else 0
    kind, reason, cause = _move_reasons(trace, run.settings.budget, mv_event, mv_item, mv_kind)
    va = math.nan if probe is None else _move_values(probe, mv_event, mv_item, kind)
    rows.add(n_moves, event=mv_event, kind=kind, phase=3, item=mv_item, tb=tb, ta=ta, vb=va,
             va=va, reason=reason, cause=cause)  # fmt: skip
    dem = (src == STC) & (dst == LTS)
    rows.add(int(dem.sum()), event=tev[dem], kind=_K["demote"], phase=3, item=titem[dem],
             tb=STC + 2, ta=LTS + 2, reason=_R["short_term_overflow_or_ttl"])  # fmt: skip
    _compress_rows(rows, run, tev, titem, src, dst)


def _compress_rows(rows: _Rows, run, tev, titem, src, dst) -> None:
    from memlens.retrieval.compression import STRATEGIES, Compressor
    from memlens.retrieval.query import static_values
    from memlens.retrieval.tiers import LTS

    comp_cfg = run.settings.compression
    if comp_cfg.stores_in_full:
        return
    strategy = Compressor(run.trace, comp_cfg, static_values(run.trace)).strategy
    into = (dst == LTS) & (src != LTS)
    into &= strategy[titem] != STRATEGIES.index("none")
    rows.add(int(into.sum()), event=tev[into], kind=_K["compress"], phase=3, item=titem[into],
             tb=LTS + 2, ta=LTS + 2, reason=_R["stored_compressed"])  # fmt: skip


def _retrieve_rows(rows: _Rows, trace, record) -> None:
    if record is None or len(record.ret_item) == 0:
        return
    req = np.repeat(np.arange(trace.n_requests), np.diff(record.ret_ptr))
    rows.add(len(req), event=trace.req_event[req], kind=_K["retrieve"], phase=2,
             item=record.ret_item, request=req, tb=record.ret_tier.astype(np.int8) + 2,
             ta=record.ret_tier.astype(np.int8) + 2, reason=_R["retrieved"])  # fmt: skip


def _rescore_rows(rows: _Rows, probe: ValueProbe | None) -> None:
    if probe is None:
        return
    c = probe.columns()
    sel = (c["what"] == P_USE) | (c["what"] == P_ANNOTATE)
    reason = np.where(c["what"][sel] == P_USE, _R["use"], _R["annotation"])
    rows.add(
        int(sel.sum()),
        event=c["event"][sel],
        kind=_K["rescore"],
        phase=2,
        item=c["item"][sel],
        vb=c["before"][sel],
        va=c["after"][sel],
        reason=reason,
    )


def build_event_log(run) -> dict[str, np.ndarray]:
    """The event log of a finished replay (``memlens.runs.pipeline.Replay``), as numpy columns
    sorted in replay order; string columns are codes into :data:`KINDS`, :data:`TIERS`,
    :data:`REASONS` and the trace's tables (see :func:`write_event_log`)."""
    probe = getattr(run.policy, "_memlens_value_probe", None)
    if isinstance(probe, KernelValues):
        probe.bind(run.trace, run.result)
    rows = _Rows()
    _trace_rows(rows, run.trace)
    _need_rows(rows, run.trace, run.result, run.tiers)
    _move_rows(rows, run, probe)
    _retrieve_rows(rows, run.trace, run.retrieval)
    _rescore_rows(rows, probe)
    return rows.stitched()


def _dict_col(codes: np.ndarray, names, null: int = -1) -> object:
    """Codes into a short list of ``names`` as a dictionary column; ``null`` (and negative
    codes) -> null."""
    import pyarrow as pa

    idx = pa.array(codes.astype(np.int32), mask=(codes < 0) | (codes == null))
    return pa.DictionaryArray.from_arrays(idx, pa.array(list(names), pa.string()))


def _strings(strings, rows: np.ndarray, keep: np.ndarray) -> object:
    """``strings[rows]`` (an Arrow string column of the trace: :func:`_sources`) where
    ``keep``, null elsewhere."""
    import pyarrow as pa

    return strings.take(pa.array(np.where(keep, rows, 0).astype(np.int64), mask=~keep))


def _sources(trace) -> dict:
    """The trace's string columns as Arrow arrays (taken without a Python string per row), and
    the derived items' parents: what every slice of the event table reads, made once."""
    from memlens.trace.packed import arrow_rows

    def arrow(table):
        return arrow_rows(table, 0, len(table))

    return {"item_id": arrow(trace.item_id), "req_id": arrow(trace.req_id),
            "item_text": arrow(trace.item_text), "parents": derived_from(trace)}  # fmt: skip


def derived_from(trace) -> dict[int, list[str]]:
    """Items whose ``meta.derived_from`` names the items they were derived from (an id or a
    list of ids): {item: [parent ids]}.  Only the metadata texts that mention the key are
    parsed (a trace of millions of items mostly has none)."""
    import orjson

    from memlens.trace.packed import PackedJSON, arrow_rows

    meta = trace.item_meta
    if isinstance(meta, PackedJSON):
        import pyarrow.compute as pc

        texts = arrow_rows(meta.values, 0, len(meta.values))
        hit = np.flatnonzero(pc.match_substring(texts, '"derived_from"').to_numpy(False))
        found = {int(meta.rows[k]): orjson.loads(meta.values[int(k)]) for k in hit}
    else:
        found = {i: m for i, m in enumerate(meta) if m and "derived_from" in m}
    out = {}
    for i, m in found.items():
        parents = m.get("derived_from")
        parents = [parents] if isinstance(parents, str) else parents
        if isinstance(parents, list) and all(isinstance(p, str) for p in parents) and parents:
            out[i] = parents
    return out


def _derived_col(trace, item: np.ndarray, write: np.ndarray, parents: dict):
    """``derived_from`` (a list of item ids) on the write rows of derived items, else null
    (``parents``: :func:`derived_from`)."""
    import pyarrow as pa

    kind = pa.list_(pa.string())
    if not parents:
        return pa.nulls(len(item), kind)
    per_item = pa.array([parents.get(i) for i in range(trace.n_items)], kind)
    keep = write & np.isin(item, np.fromiter(parents, np.int64, len(parents)))
    return per_item.take(pa.array(np.where(keep, item, 0).astype(np.int64), mask=~keep))


#: Columns with a few distinct values: dictionary-encoded in the Parquet file; the others
#: (ids, text) are plain (a dictionary of every item id would be rebuilt per row group).
DICTIONARY_COLUMNS = ("stream", "kind", "tier_before", "tier_after", "reason", "item_type")
#: Columns whose values ascend (the log is in replay order): stored as deltas.
ASCENDING_COLUMNS = ("seq", "event")


def event_table(run, cols: dict[str, np.ndarray] | None = None, lo: int = 0,
                hi: int | None = None, sources: dict | None = None):  # fmt: skip
    """The event log as an Arrow table (rows ``lo:hi`` of it: a row group; ``sources``: the
    trace's :func:`_sources`, made once for every slice).  ``item_id`` is on every row about
    an item; the item's text, tokens and type only on its ``write`` row (join on ``item``), a
    request's id on its hit and miss rows, the id of the item an eviction made room for on
    eviction rows."""
    import pyarrow as pa

    from memlens.trace.model import ITEM_TYPES

    trace = run.trace
    cols = build_event_log(run) if cols is None else cols
    cols = {name: column[lo:hi] for name, column in cols.items()}
    src = _sources(trace) if sources is None else sources
    item, req, cause, kind = cols["item"], cols["request"], cols["cause_item"], cols["kind"]
    has_item, has_req, has_cause = item >= 0, req >= 0, cause >= 0
    safe_item = np.where(has_item, item, 0)
    write = kind == _K["write"]
    stream = np.where(has_item, trace.item_stream[safe_item],
                      trace.req_stream[np.where(has_req, req, 0)]).astype(np.int32)  # fmt: skip
    return pa.table({
        "seq": np.arange(lo, lo + len(item), dtype=np.int64),
        "event": cols["event"],
        "t": trace.ev_t[cols["event"]],
        "stream": _dict_col(stream, trace.stream_names),
        "kind": _dict_col(kind, KINDS),
        "item": item,
        "item_id": _strings(src["item_id"], item, has_item),
        "request": req,
        "request_id": _strings(src["req_id"], req, has_req),
        "tier_before": _dict_col(cols["tier_before"], TIERS, null=0),
        "tier_after": _dict_col(cols["tier_after"], TIERS, null=0),
        "value_before": _nullable(cols["value_before"]),
        "value_after": _nullable(cols["value_after"]),
        "reason": _dict_col(cols["reason"], REASONS),
        "cause_item": _strings(src["item_id"], cause, has_cause),
        "tokens": pa.array(trace.item_tokens[safe_item], mask=~write),
        "item_type": _dict_col(np.where(write, trace.item_type[safe_item], -1), ITEM_TYPES),
        "text": _strings(src["item_text"], item, write),
        "derived_from": _derived_col(trace, item, write, src["parents"]),
    })  # fmt: skip


def _nullable(values: np.ndarray):
    """Floats with nan as null.  (``pa.array(from_pandas=True)`` does the same but imports
    pandas, 0.2 s of every ``simulate``.)"""
    import pyarrow as pa

    return pa.array(values, mask=np.isnan(values))


#: Rows per row group of ``events.parquet``.
EVENT_ROW_GROUP = 1 << 20


def write_event_log(path: Path, run, cols: dict[str, np.ndarray] | None = None) -> Path:
    """``events.parquet`` (atomic), one row group per :data:`EVENT_ROW_GROUP` rows (``cols``:
    the log, if built).

    Each row group's Arrow table is made on a pool of two threads while this one writes the
    groups before it, in order: making the tables is about as long as writing them (0.6 s and
    1.0 s for 2.6M rows), and ``simulate`` writes the log beside its analyzers and other files,
    so a second core often has time for it (issue 34).  The same rows as one table in one go."""
    from concurrent.futures import ThreadPoolExecutor

    import pyarrow.parquet as pq

    from memlens._util.atomic import atomic_path
    from memlens._util.parquet import writer_options

    cols = build_event_log(run) if cols is None else cols
    n, sources = len(cols["item"]), _sources(run.trace)
    bounds = [(lo, min(n, lo + EVENT_ROW_GROUP)) for lo in range(0, max(n, 1), EVENT_ROW_GROUP)]
    with (
        atomic_path(path) as tmp,
        ThreadPoolExecutor(max_workers=2, thread_name_prefix="memlens-events") as pool,
        contextlib.ExitStack() as stack,
    ):
        groups = [pool.submit(event_table, run, cols, lo, hi, sources) for lo, hi in bounds]
        writer = None
        for group in groups:
            table = group.result()
            if writer is None:
                options = writer_options(table.schema, DICTIONARY_COLUMNS, ASCENDING_COLUMNS)
                writer = stack.enter_context(pq.ParquetWriter(tmp, table.schema, **options))
            writer.write_table(table, row_group_size=EVENT_ROW_GROUP)
    return path
