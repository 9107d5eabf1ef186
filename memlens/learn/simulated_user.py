"""A simulated user: a seeded expert who watches the replay and pins or demotes items.

Training a value scorer needs feedback, and people are slow; a simulated expert gives as much
of it as wanted, with knobs for how good and how busy the expert is.  It watches each stream
(each agent) as a person would, event by event, and has hindsight, which is the point of a
simulated expert: when it acts on an item it knows whether a later request will need it.

The model, per stream, at each of its events in replay order:

1. *Sight.*  An item becomes visible ``delay_events`` events (of its stream) after its write;
   an item the user kept becomes visible again ``delay_events`` after the later of the last
   request that needs it and the event after the keep (a person lets go of a pin once its
   work is done).  The user notices each visible item with probability ``recall`` and puts it
   on its list; an unnoticed item is not seen again until a new reason makes it visible.
2. *Attention.*  With probability ``interventions_per_100_events / 100`` the user acts now
   (so the expected number of interventions is that rate per 100 events when its list is not
   empty): it takes the most recently noticed item off its list and judges it.  The truth is
   "a request after this event needs it"; the judgement is right with probability
   ``precision``.  "Needed" gives ``keep`` (pin), "not needed" gives ``drop`` (demote/unpin).

So no feedback comes before an item's write event index plus ``delay_events`` (positions are
counted in the item's stream, whose events are a subset of the trace's), with precision and
recall 1 every keep is needed later and every drop never is, and one ``np.random.default_rng``
seeded with ``seed`` drives every draw in a fixed order: the same trace and config give the
same rows bit for bit.  Rows have ``source="simulated"`` and ``author`` = the config's hash.
"""

from __future__ import annotations

import hashlib
from dataclasses import asdict, dataclass, field

import numpy as np
import orjson

from memlens.learn.feedback import Feedback
from memlens.trace.model import REQUEST, WRITE, Trace


@dataclass
class SimulatedUserConfig:
    """The simulated user's knobs (Hydra group ``simulated_user``)."""

    interventions_per_100_events: float = field(
        default=2.0, metadata={"help": "expected interventions per 100 events (when it has any)"}
    )
    precision: float = field(
        default=0.9, metadata={"help": "share of its judgements that are right"}
    )
    recall: float = field(
        default=0.5, metadata={"help": "share of the items it could judge that it notices"}
    )
    delay_events: int = field(
        default=0, metadata={"help": "events (of the item's stream) between a write and a sight"}
    )
    seed: int = field(default=0, metadata={"help": "seed of np.random.default_rng"})

    def __post_init__(self) -> None:
        rate = self.interventions_per_100_events
        if isinstance(rate, bool) or not isinstance(rate, (int, float)) or not 0 <= rate <= 100:
            raise ValueError(
                f"simulated_user.interventions_per_100_events must be in [0, 100], got {rate!r}"
            )
        for name in ("precision", "recall"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not 0 <= v <= 1:
                raise ValueError(f"simulated_user.{name} must be in [0, 1], got {v!r}")
        for name in ("delay_events", "seed"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < 0:
                raise ValueError(f"simulated_user.{name} must be an integer >= 0, got {v!r}")

    def config_hash(self) -> str:
        """``simulated:`` and 16 hex digits of the SHA-256 of the knobs (the rows' author)."""
        knobs = {k: float(v) if isinstance(v, float) else v for k, v in asdict(self).items()}
        digest = hashlib.sha256(orjson.dumps(knobs, option=orjson.OPT_SORT_KEYS)).hexdigest()
        return f"simulated:{digest[:16]}"


def register_configs() -> None:
    """Store the schema in Hydra's ConfigStore under group ``simulated_user`` (idempotent)."""
    from hydra.core.config_store import ConfigStore

    ConfigStore.instance().store(group="simulated_user", name="default", node=SimulatedUserConfig)


register_configs()


def last_need_event(trace: Trace) -> np.ndarray:
    """For each item, the event index of the last request that needs it, as a need or one of
    a need's alternatives (-1 if none)."""
    last = np.full(trace.n_items, -1, dtype=np.int64)
    np.maximum.at(last, trace.group_items, trace.req_event[trace.group_request])
    return last


def simulate_user(trace: Trace, cfg: SimulatedUserConfig) -> list[Feedback]:
    """The simulated user's feedback on ``trace`` (see the module docstring), ordered by
    event index."""
    rng = np.random.default_rng(cfg.seed)
    last_need = last_need_event(trace)
    author = cfg.config_hash()
    rows: list[Feedback] = []
    for s in range(trace.n_streams):
        for e, item, keep in _watch_stream(trace, s, last_need, cfg, rng):
            rows.append(Feedback(
                source="simulated", trace_sha256=trace.sha256, stream=trace.stream_names[s],
                event_index=e, t=float(trace.ev_t[e]), item_id=trace.item_id[item],
                action="keep" if keep else "drop", author=author,
            ))  # fmt: skip
    rows.sort(key=lambda r: r.event_index)  # stable: the streams' own order within an event
    return rows


def _watch_stream(trace: Trace, s: int, last_need: np.ndarray, cfg: SimulatedUserConfig,
                  rng: np.random.Generator) -> list[tuple[int, int, bool]]:  # fmt: skip
    """One stream watched: ``(event index, item, keep?)`` per intervention."""
    events = trace.stream_events[s].tolist()
    n = len(events)
    attends = (rng.random(n) < cfg.interventions_per_100_events / 100.0).tolist()
    kinds, refs, needs_ptr, needs = (trace.ev_kind.tolist(), trace.ev_ref.tolist(),
                                     trace.request_items_ptr.tolist(),
                                     trace.group_items.tolist())  # fmt: skip
    last = last_need.tolist()
    delay, recall, precision = cfg.delay_events, cfg.recall, cfg.precision
    sights: dict[int, list[int]] = {}  # position -> items that become visible there
    kept: set[int] = set()
    noticed: list[int] = []  # the user's list, most recent last
    out: list[tuple[int, int, bool]] = []
    for p, e in enumerate(events):
        kind = kinds[e]
        if kind == WRITE:
            sights.setdefault(p + delay, []).append(refs[e])
        elif kind == REQUEST:  # a kept item whose last need this is: let go after the delay
            for j in range(needs_ptr[refs[e]], needs_ptr[refs[e] + 1]):
                if needs[j] in kept and last[needs[j]] == e:
                    sights.setdefault(p + delay, []).append(needs[j])
        for item in sights.pop(p, ()):
            if rng.random() < recall:
                noticed.append(item)
        if not (attends[p] and noticed):
            continue
        item = noticed.pop()
        needed = last[item] > e
        keep = needed if rng.random() < precision else not needed
        out.append((e, item, keep))
        if keep:
            kept.add(item)
            if not needed:  # a mistaken keep: seen again once the next event is over
                sights.setdefault(p + 1 + delay, []).append(item)
        else:
            kept.discard(item)
    return out


def expected_interventions(trace: Trace, cfg: SimulatedUserConfig) -> float:
    """The rate knob's promise: interventions per 100 events times events / 100 (an upper
    bound on the mean; the user cannot act with nothing on its list)."""
    return cfg.interventions_per_100_events * trace.n_events / 100.0


__all__ = [
    "SimulatedUserConfig",
    "expected_interventions",
    "last_need_event",
    "simulate_user",
]
