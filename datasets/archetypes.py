"""Synthetic agent workloads with ground-truth needs: agent, support, coding, analysis.

Each archetype simulates *episodes* (one agent task = one stream) and knows, by construction,
which earlier items every request needs.  Needs follow what real agent needs follow, never
recency alone: the entities the step uses, the item's role (a goal or constraint stays needed,
an output is transient), supersession (a newer version of the same thing replaces the old one
for good) and the episode's phase.  Items name their entities in their text; a request names
the identifiers it uses, never the needed items' topic words.  The ``agent`` archetype (a
tool-using booking agent) has defaults fitted to tau-bench airline (``experiments/calibrate.py``)
and builds the bundled default trace.  Episodes are interleaved ``concurrency`` at a time
and a finished episode's state is dropped, so memory is bounded by ``concurrency x length``
whatever the total number of events: ten million events stream to disk in constant memory.

Every archetype's knobs are a dataclass (:class:`ArchetypeKnobs` and one subclass per
archetype; each knob's default, meaning and range are declared once, there): the common
``seed``, ``streams`` and ``events_per_stream`` of every generator (the trace has
``streams x events_per_stream`` events; episode lengths vary around ``events_per_stream``, so
the number of streams is about ``streams``), the knobs all four share (``concurrency``,
``request_share``, ``reuse_skew``, ``long_range_share``, ``token_scale``, ``token_sigma``,
``pin_rate``; their defaults may differ per archetype) and the archetype's own.
:data:`GENERATORS` maps every generator's name, ``simple`` included, to its knobs class;
:func:`generate` is the one-call entry point.

All randomness comes from one ``np.random.Generator(seed)`` drawn in blocks, so one seed is one
trace, byte for byte.
"""

from __future__ import annotations

import bisect
import json
import math
from collections.abc import Iterator
from dataclasses import dataclass
from functools import lru_cache
from typing import ClassVar

import numpy as np

from memlens.trace.generate import (
    AT_LEAST_0,
    AT_LEAST_1,
    SHARE,
    TOKEN_SIGMA,
    GeneratorKnobs,
    Range,
    SimpleKnobs,
    knob,
)

_BLOCK = 1 << 16


class Draws:
    """Scalar random numbers served from pre-drawn blocks (per-call numpy overhead is the
    bottleneck of a per-event generator; blocks make it ~20x cheaper and stay deterministic)."""

    def __init__(self, seed: int):
        self.rng = np.random.default_rng(seed)
        self._u: list[float] = []
        self._n: list[float] = []
        self._ui = self._ni = 0

    def u(self) -> float:
        if self._ui >= len(self._u):
            self._u = self.rng.random(_BLOCK).tolist()
            self._ui = 0
        self._ui += 1
        return self._u[self._ui - 1]

    def normal(self) -> float:
        if self._ni >= len(self._n):
            self._n = self.rng.standard_normal(_BLOCK).tolist()
            self._ni = 0
        self._ni += 1
        return self._n[self._ni - 1]

    def below(self, n: int) -> int:
        return min(n - 1, int(self.u() * n))

    def exp(self, mean: float) -> float:
        return -mean * math.log(1.0 - self.u())

    def tokens(self, mean: float, sigma: float) -> int:
        # log-normal with the requested *mean* (not median)
        return max(1, int(mean * math.exp(sigma * self.normal() - 0.5 * sigma * sigma)))


class Zipf:
    """Sampler of ranks ``0..n-1`` with P(rank k) proportional to ``1 / (k + 1) ** s``."""

    def __init__(self, n: int, s: float):
        w = 1.0 / np.arange(1, n + 1, dtype=np.float64) ** s
        self.cdf = (np.cumsum(w) / w.sum()).tolist()

    def __call__(self, d: Draws) -> int:
        return min(len(self.cdf) - 1, bisect.bisect_left(self.cdf, d.u()))


@lru_cache(maxsize=4096)
def _zipf(n: int, s: float) -> Zipf:
    return Zipf(n, s)


class Episode:
    """One stream's simulation.  Subclasses implement :meth:`step` (returns a list of events)."""

    prefix = "ep"

    def __init__(self, index: int, d: Draws, p: ArchetypeKnobs):
        self.d, self.p = d, p
        self.stream = f"{self.prefix}{index}"
        self.task = f"{self.prefix}-task{index}"
        self.k = 0
        self.t = 0.0
        self.length = max(8, int(p.events_per_stream * (0.5 + d.u())))
        self.pinned: list[str] = []

    @property
    def done(self) -> bool:
        return self.k >= self.length

    def _tick(self) -> float:
        self.t = round(self.t + self.d.exp(20.0), 3)
        return self.t

    def write(self, ty: str, mean_tokens: float, text: str, **meta) -> tuple[str, dict]:
        ident = f"{self.stream}/{self.k}"
        self.k += 1
        ev = {"event": "write", "id": ident, "stream": self.stream, "t": self._tick(), "type": ty,
              "tokens": self.d.tokens(mean_tokens * self.p.token_scale, self.p.token_sigma),
              "task": self.task, "text": text}  # fmt: skip
        if meta:
            ev["meta"] = meta
        return ident, ev

    def request(self, needs: list[str], text: str) -> dict:
        ident = f"{self.stream}/r{self.k}"
        self.k += 1
        return {"event": "request", "id": ident, "stream": self.stream, "t": self._tick(),
                "needs": list(dict.fromkeys(needs)), "text": text}  # fmt: skip

    def maybe_pin(self, ident: str) -> list[dict]:
        if self.p.pin_rate > 0 and self.d.u() < self.p.pin_rate:
            self.pinned.append(ident)
            self.k += 1
            return [{"event": "pin", "target": ident, "stream": self.stream, "t": self.t}]
        return []

    def release(self) -> list[dict]:
        """Unpin everything still pinned (the episode is over)."""
        out = [
            {"event": "unpin", "target": i, "stream": self.stream, "t": self.t} for i in self.pinned
        ]
        self.pinned = []
        return out

    def step(self) -> list[dict]:  # pragma: no cover - interface
        raise NotImplementedError


# --------------------------------------------------------------------------- support
# what people say that no later step needs (chit-chat in every archetype)
ACKS = ("yes, please go ahead", "ok, thanks", "that works for me", "great, thank you so much",
        "hmm, let me think", "sure", "no, that's all", "perfect")  # fmt: skip


class SupportEpisode(Episode):
    """Customer support: the user states constraints early (an order number, a budget, a
    date), each naming an entity, and they are needed throughout; chit-chat turns are noise
    nobody needs again.  Lookups, asks and state notes are about one of those entities; a
    request resolves one entity (the popular ones more often: Zipf) and needs its latest lookup
    (a newer lookup of the same entity supersedes the older one), else the latest ask about it,
    and, with ``long_range_share``, the constraint that stated it."""

    prefix = "support"
    TOPICS = ("order", "refund", "delivery date", "budget", "address", "plan", "device", "account")
    STATUS = ("shipped", "on hold", "delayed", "approved", "pending review", "closed")

    def __init__(self, index, d, p):
        super().__init__(index, d, p)
        self.constraints: list[str] = []  # item ids, one per entity
        self.values: list[str] = []  # the entity each constraint states (#NNNNN)
        self.lookup: dict[int, str] = {}  # entity -> its latest lookup (supersedes earlier ones)
        self.ask: dict[int, str] = {}  # entity -> the latest ask about it
        self.n_constraints = 2 + d.below(p.constraints)
        self.zipf = _zipf(self.n_constraints, p.reuse_skew)

    def step(self) -> list[dict]:
        d, p = self.d, self.p
        if len(self.constraints) < self.n_constraints:
            topic = self.TOPICS[d.below(len(self.TOPICS))]
            value = f"#{10000 + d.below(90000)}"
            ident, ev = self.write("user_input", 40, f"constraint: my {topic} is {value}",
                                   role="constraint", entity=len(self.values))  # fmt: skip
            self.constraints.append(ident)
            self.values.append(value)
            return [ev, *self.maybe_pin(ident)]
        e = self.zipf(d)
        if self.ask and d.u() < p.request_share:
            if e not in self.ask:
                e = next(iter(self.ask))
            needs = [self.lookup.get(e, self.ask[e])]
            if d.u() < p.long_range_share:
                needs.append(self.constraints[e])
            return [self.request(needs, f"resolve_ticket(ref={self.values[e]})")]
        return [self._write_about(e)]

    def _write_about(self, e: int) -> dict:
        d, p, value = self.d, self.p, self.values[e]
        roll = d.u()
        if roll < p.noise_share:
            ty = "user_input" if d.u() < 0.5 else "llm_thought"
            _, ev = self.write(ty, 25, ACKS[d.below(len(ACKS))], role="chit-chat")
            return ev
        rest = (roll - p.noise_share) / max(1e-12, 1.0 - p.noise_share)
        if rest < 0.45:
            status = self.STATUS[d.below(len(self.STATUS))]
            ident, ev = self.write("tool_result", 250, f"lookup {value}: {status}, last change "
                                   f"2024-0{1 + d.below(9)}-{10 + d.below(19)}", role="lookup",
                                   entity=e)  # fmt: skip
            self.lookup[e] = ident  # supersedes the entity's earlier lookup
        elif rest < 0.85:
            ident, ev = self.write("user_input", 60, f"can you check on {value}?", role="ask",
                                   entity=e)  # fmt: skip
            self.ask[e] = ident
        else:
            _, ev = self.write("agent_state", 50, f"state: verified {value}", role="state")
        return ev


# ---------------------------------------------------------------------------- coding
class CodingEpisode(Episode):
    """Coding assistant: file reads and test outputs reused with Zipf popularity; an edit of a
    file supersedes earlier reads of it (later needs point at the edit or a re-read).  Items
    name their files and tests; a request names the file it changes (and the test, when it
    needs the test's output)."""

    prefix = "coding"

    def __init__(self, index, d, p):
        super().__init__(index, d, p)
        self.n_files = max(2, p.files)
        self.zipf = _zipf(self.n_files, p.reuse_skew)
        self.perm = list(range(self.n_files))  # which file is hot differs per episode
        for i in range(self.n_files - 1, 0, -1):
            j = d.below(i + 1)
            self.perm[i], self.perm[j] = self.perm[j], self.perm[i]
        self.latest: dict[int, str] = {}  # file -> id of its current version (read or edit)
        self.test_out: str | None = None
        self.test_name = f"tests/test_mod{self.perm[0]}.py::test_case{d.below(50)}"
        self.goal: str | None = None

    def step(self) -> list[dict]:
        d, p = self.d, self.p
        if self.goal is None:
            self.goal, ev = self.write("user_input", 80, f"task: make {self.test_name} pass",
                                       role="goal")  # fmt: skip
            return [ev, *self.maybe_pin(self.goal)]
        f = self.perm[self.zipf(d)]
        if self.latest and d.u() < p.request_share:
            if f not in self.latest:
                f = next(iter(self.latest))
            needs, text = [self.latest[f]], f"apply_patch(path=src/mod{f}.py"
            if self.test_out is not None and d.u() < 0.5:
                needs.append(self.test_out)
                text += f", test={self.test_name}"
            if d.u() < p.long_range_share:
                needs.append(self.goal)
            return [self.request(needs, text + ")")]
        roll = d.u()
        if roll < 0.45 or f not in self.latest:
            ident, ev = self.write("tool_result", 700, f"read src/mod{f}.py ({40 + d.below(400)} "
                                   "lines)", role="read", file=f)  # fmt: skip
            self.latest[f] = ident
        elif roll < 0.6:
            ident, ev = self.write("tool_result", 300, f"pytest: {self.test_name} failed, "
                                   f"assert at src/mod{f}.py:{1 + d.below(300)}",
                                   role="test")  # fmt: skip
            self.test_out = ident
        elif roll < 0.8:
            ident, ev = self.write("agent_state", 200, f"edit src/mod{f}.py", role="edit", file=f)
            self.latest[f] = ident  # supersedes every earlier read of f
        else:
            _, ev = self.write("llm_thought", 120, f"plan: the bug may be in src/mod{f}.py",
                               role="thought")  # fmt: skip
        return [ev]


# -------------------------------------------------------------------------- analysis
class AnalysisEpisode(Episode):
    """Data-analysis agent: long tool outputs (queries, tables); a few hold key numbers that
    are needed much later, when the report is written; the rest matter only briefly.  Every
    output names its query and table; a request names the queries whose outputs it uses."""

    prefix = "analysis"
    METRICS = ("revenue", "churn", "signups", "latency", "margin", "returns")
    TABLES = ("orders", "sessions", "invoices", "events", "customers", "tickets")

    def __init__(self, index, d, p):
        super().__init__(index, d, p)
        self.question: str | None = None
        self.keys: list[str] = []
        self.last_output: str | None = None
        self.query_of: dict[str, str] = {}  # output item -> its query id
        self.report_from = int(self.length * (1.0 - p.report_share))

    def step(self) -> list[dict]:
        d, p = self.d, self.p
        if self.question is None:
            metric = self.METRICS[d.below(len(self.METRICS))]
            self.question, ev = self.write("user_input", 60, f"question: why did {metric} drop "
                                           f"in Q{1 + d.below(4)}?", role="question")  # fmt: skip
            return [ev, *self.maybe_pin(self.question)]
        reporting = self.k >= self.report_from
        if self.last_output is not None and d.u() < p.request_share * (2.0 if reporting else 1.0):
            return [self._request(reporting)]
        roll = d.u()
        if roll < 0.55:
            key = d.u() < p.key_share
            query, table = f"q{self.k}", self.TABLES[d.below(len(self.TABLES))]
            ident, ev = self.write("tool_result", 1500, f"{query} on {table}: "
                                   f"{100 * (1 + d.below(50))} rows",
                                   role="key-output" if key else "output")  # fmt: skip
            self.last_output = ident
            self.query_of[ident] = query
            if key:
                self.keys.append(ident)
                return [ev, *self.maybe_pin(ident)]
            return [ev]
        if roll < 0.8:
            col = ("region", "week", "plan", "channel")[d.below(4)]
            _, ev = self.write("llm_thought", 150, f"plan: group by {col}", role="thought")
        else:
            _, ev = self.write("agent_state", 60, f"note: the drop is in week {1 + d.below(52)}",
                               role="note")  # fmt: skip
        return [ev]

    def _request(self, reporting: bool) -> dict:
        d, p = self.d, self.p
        needs = []
        if reporting and self.keys:
            # the report needs key numbers from long ago, skewed to the most important
            z = _zipf(len(self.keys), p.reuse_skew)
            needs += [self.keys[z(d)] for _ in range(1 + d.below(3))]
        elif self.keys and d.u() < p.long_range_share:
            needs.append(self.keys[d.below(len(self.keys))])
        else:
            needs.append(self.last_output)
        sources = ",".join(dict.fromkeys(self.query_of[i] for i in needs))
        if d.u() < 0.2:
            needs.append(self.question)
        tool = "write_report" if reporting else "run_query"
        return self.request(needs, f"{tool}(using={sources})")


# ----------------------------------------------------------------------------- agent
FIRST_NAMES = ("mia", "noah", "olivia", "liam", "ava", "ethan", "sofia", "lucas", "emma", "yusuf",
               "chen", "amara", "ivan", "lena", "raj", "nora")  # fmt: skip
LAST_NAMES = ("li", "garcia", "kim", "silva", "novak", "patel", "okafor", "rossi", "berg",
              "tanaka", "haddad", "jones")  # fmt: skip
CITIES = ("JFK", "SEA", "LAX", "ORD", "ATL", "DFW", "BOS", "MIA", "DEN", "SFO", "PHX", "IAH")
LETTERS, DIGITS = "ABCDEFGHJKLMNPQRSTUVWXYZ", "0123456789"
# why a user cancels: the code a tool call takes, and how the user says it
REASONS = (("change_of_plan", "my plans changed"), ("schedule_conflict", "I have a work trip"),
           ("medical", "I am not well"), ("weather", "a storm is coming"))  # fmt: skip
TIERS = ("regular", "silver", "gold")


class AgentEpisode(Episode):
    """A tool-using service agent helping one customer with bookings, in the shape of
    tau-bench's airline episodes (the trace it is calibrated to).

    Every item carries the entities it is about (a user id, booking codes, flight numbers,
    payment ids, a route and date) in its text, and every tool call (a request) names the
    entities it uses as arguments.  A request needs, for each argument, the item the agent
    learnt it from: the user's goal or a constraint the user stated (long-lived), the profile
    that listed a booking, the search that offered a flight (transient: a new search after the
    user changes the route supersedes it), a booking's current details (an update's result
    supersedes the earlier details), or a value the agent derived in a reply.  The episode's
    phase decides the tools: identify the user, look bookings up and search, then act (update,
    cancel, book).  A tool result's cost is drawn on its own: it prices a miss, it does not
    make a need likelier.  Chit-chat and the agent's echoes of its own calls are never needed.
    """

    prefix = "agent"

    def __init__(self, index, d, p):
        super().__init__(index, d, p)
        self.user = f"{self._pick(FIRST_NAMES)}_{self._pick(LAST_NAMES)}_{1000 + d.below(9000)}"
        self.holder: dict[str, str] = {}  # entity -> the item a step that uses it needs
        self.policy: str | None = None
        self.goal: str | None = None
        self.profile: str | None = None
        self.bookings: list[str] = []  # booking codes the agent has seen
        self.details: dict[str, str] = {}  # booking -> its current details (latest version)
        self.flights: list[str] = []  # flights offered by searches for the current route
        self.payments: list[str] = []
        self.route: str | None = None  # "JFK SEA 2024-05-20", stated by the user
        self.amount: str | None = None  # a value the agent derived and stated
        self.reason = REASONS[0][0]  # why the user wants a change (stated in the goal)
        self.act_from = int(self.length * (1.0 - p.act_share))

    # ---------------------------------------------------------------- identifiers
    def _pick(self, values: tuple):
        return values[self.d.below(len(values))]

    def _code(self) -> str:
        """A booking code: six characters, letters and at least one digit (like ``ZFA04Y``)."""
        chars = [self._pick(LETTERS + DIGITS) for _ in range(6)]
        chars[1 + self.d.below(4)] = self._pick(DIGITS)
        return "".join(chars)

    def _flight(self) -> str:
        return f"{self._pick(LETTERS)}{self._pick(LETTERS)}{100 + self.d.below(900)}"

    def _payment(self) -> str:
        kind = self._pick(("credit_card", "gift_card", "certificate"))
        return f"{kind}_{100000 + self.d.below(900000)}"

    def _route(self) -> str:
        a = self._pick(CITIES)
        b = self._pick(tuple(c for c in CITIES if c != a))
        return f"{a} {b} 2024-05-{10 + self.d.below(20)}"

    def _tool_result(self, tokens: float, text: str, role: str, **meta) -> tuple[str, dict]:
        ident, ev = self.write("tool_result", tokens, text, role=role, **meta)
        ev["cost"] = round(math.exp(-5.0 + self.d.normal()), 6)  # independent of any need
        return ident, ev

    # ---------------------------------------------------------------------- steps
    def step(self) -> list[dict]:
        d, p = self.d, self.p
        if self.policy is None:
            self.policy, ev = self.write("agent_state", p.policy_tokens, "# Booking agent policy: "
                                         "verify the user, confirm before any change, one "
                                         "payment per booking", role="policy")  # fmt: skip
            ev["tokens"] = max(1, round(p.policy_tokens))  # one prompt, the same every episode
            if not p.pin_policy:
                return [ev]
            self.pinned.append(self.policy)
            self.k += 1
            return [ev, {"event": "pin", "target": self.policy, "stream": self.stream, "t": self.t}]
        if self.goal is None:
            return self._goal()
        roll = d.u()
        if roll < p.request_share:
            return self._tool_call()
        if roll < p.request_share + p.user_share:
            return self._user_turn()
        return self._reply()

    def _goal(self) -> list[dict]:
        intent = self._pick(("change", "cancel", "add a bag to", "book"))
        self.reason, why = self._pick(REASONS)
        text = f"Hi, I want to {intent} a trip, {why}. My user id is {self.user}."
        if self.d.u() < 0.5:  # some users know their booking code up front
            code = self._code()
            text += f" The booking is {code}."
            self.bookings.append(code)
        self.goal, ev = self.write("user_input", 35, text, role="goal")
        for entity in (self.user, *self.bookings, "reason"):
            self.holder[entity] = self.goal
        return [ev, *self.maybe_pin(self.goal)]

    def _user_turn(self) -> list[dict]:
        """The user states a constraint (a payment, a route), corrects one (supersession), or
        chats (never needed)."""
        d, p = self.d, self.p
        roll = d.u()
        if roll < p.constraint_share:
            if self.route is None or d.u() < 0.5:
                return self._state_route("I need to fly {} on {}.")
            pay = self._payment()
            ident, ev = self.write("user_input", 25, f"Please use my {pay}.", role="constraint")
            self.payments = [pay, *self.payments]
            self.holder[pay] = ident
            return [ev]
        if roll < p.constraint_share + p.correction_share and self.route is not None:
            return self._state_route("Sorry, I meant {} on {} instead.")
        _, ev = self.write("user_input", 16, self._pick(ACKS), role="chit-chat")
        return [ev]

    def _state_route(self, template: str) -> list[dict]:
        """A new route supersedes the old one and every flight offered for it."""
        self.route = self._route()
        a, b, date = self.route.split()
        ident, ev = self.write("user_input", 25, template.format(f"{a} to {b}", date),
                               role="constraint", route=self.route)  # fmt: skip
        self.holder[self.route] = ident
        self.flights = []
        return [ev]

    def _reply(self) -> list[dict]:
        """The agent talks to the user: sometimes it states a value it derived (a price to
        charge) that a later action uses; otherwise it restates what it knows."""
        if self.details and self.d.u() < self.p.derived_share:
            self.amount = f"{50 + self.d.below(950)}.{self.d.below(100):02d}"
            ident, ev = self.write("llm_thought", 60, f"The difference comes to ${self.amount}; "
                                   "shall I proceed?", role="derived")  # fmt: skip
            self.holder[self.amount] = ident
            return [ev]
        about = self._pick(tuple(self.bookings)) if self.bookings else self.user
        _, ev = self.write("llm_thought", 70, f"Let me look into {about} for you.", role="reply")
        return [ev]

    # ----------------------------------------------------------------- tool calls
    def _call(self, tool: str, args: dict, needs: list[str]) -> list[dict]:
        """The request (its text names the tool and the argument values, as the agent's turn
        would), the agent's echo of the call and the tool's result."""
        text = f"{tool}({json.dumps(args, separators=(',', ':'))})"
        req = self.request(needs, text)
        _, echo = self.write("llm_thought", 25, text, role="tool_call", tool=tool)
        return [req, echo, *self._result(tool, args)]

    def _tool_call(self) -> list[dict]:
        d = self.d
        if self.profile is None:
            return self._call("get_user_details", {"user_id": self.user}, [self.holder[self.user]])
        if self.k < self.act_from:  # lookup phase
            unseen = [b for b in self.bookings if b not in self.details]
            if self.route is not None and (not unseen or d.u() < 0.4):
                a, b, date = self.route.split()
                return self._call("search_direct_flight", {"origin": a, "destination": b,
                                  "date": date}, [self.holder[self.route]])  # fmt: skip
            if self.bookings:
                code = unseen[0] if unseen else self._booking()
                return self._call("get_booking_details", {"booking_id": code},
                                  [self.holder[code]])  # fmt: skip
        return self._action()

    def _booking(self) -> str:
        """A booking to work on: the first ones the user has are the likeliest (Zipf)."""
        return self.bookings[_zipf(len(self.bookings), self.p.reuse_skew)(self.d)]

    def _state_of(self, code: str) -> str:
        return self.details.get(code, self.holder[code])

    def _action(self) -> list[dict]:
        d = self.d
        if not self.bookings or (self.flights and d.u() < 0.3):
            return self._book()
        code = self._booking()
        needs = [self._state_of(code)]
        if d.u() < 0.3:
            args = {"booking_id": code, "reason": self.reason}
            return self._call("cancel_booking", args, [*needs, self.holder["reason"]])
        args: dict = {"booking_id": code}
        if self.flights:
            args["flights"] = self._flights()
            needs += [self.holder[f] for f in args["flights"]]
        if self.payments:
            args["payment_id"] = self.payments[0]
            needs.append(self.holder[self.payments[0]])
        if self.amount is not None and d.u() < 0.5:
            args["amount"] = self.amount
            needs.append(self.holder[self.amount])
        return self._call("update_booking", args, self._extra(needs))

    def _book(self) -> list[dict]:
        if not self.flights:  # nothing to book yet: the agent asks what the user wants
            _, ev = self.write("llm_thought", 40, "Which route and date would you like?",
                               role="reply")  # fmt: skip
            return [ev]
        args: dict = {"user_id": self.user, "flights": self._flights()}
        needs = [self.holder[self.user], *(self.holder[f] for f in args["flights"])]
        if self.payments:
            args["payment_id"] = self.payments[0]
            needs.append(self.holder[self.payments[0]])
        return self._call("book_reservation", args, self._extra(needs))

    def _flights(self) -> list[str]:
        n = 1
        while n < min(4, len(self.flights)) and self.d.u() < self.p.multi_share:
            n += 1
        return self.flights[-n:]

    def _extra(self, needs: list[str]) -> list[str]:
        """Occasionally an action also needs the user's goal (what was asked) or the policy."""
        if self.d.u() < self.p.long_range_share:
            needs.append(self.goal)
        if self.d.u() < self.p.policy_need_share:
            needs.append(self.policy)
        return needs

    # -------------------------------------------------------------------- results
    def _result(self, tool: str, args: dict) -> list[dict]:
        d = self.d
        if tool == "get_user_details":
            new = [self._code() for _ in range(d.below(self.p.max_bookings) + 1)]
            self.payments += [self._payment() for _ in range(1 + d.below(2))]
            name = self.user.split("_")
            text = (f"profile {name[0].title()} {name[1].title()}, {self._pick(TIERS)} member; "
                    f"reservations {', '.join([*self.bookings, *new])}; payment methods "
                    f"{', '.join(self.payments)}")  # fmt: skip
            self.profile, ev = self._tool_result(300, text, "profile")
            for entity in [*new, *self.payments]:
                self.holder.setdefault(entity, self.profile)
            self.bookings += new
            return [ev]
        if tool == "search_direct_flight":
            found = [self._flight() for _ in range(2 + d.below(5))]
            text = (f"{len(found)} nonstop options {args['origin']} to {args['destination']} on "
                    f"{args['date']}: " + "; ".join(f"{f} departs {6 + d.below(14)}:00, seats "
                    f"{d.below(10)}, fare ${80 + d.below(600)}" for f in found))  # fmt: skip
            ident, ev = self._tool_result(90 * len(found), text, "search", route=self.route)
            for f in found:
                self.holder[f] = ident
            self.flights += found
            return [ev]
        return [self._booking_result(tool, args)]

    def _booking_result(self, tool: str, args: dict) -> dict:
        """A booking's details, fetched or after a change: the new version supersedes the
        earlier one (later steps on the booking need this one)."""
        code = args.get("booking_id") or self._code()
        if tool == "cancel_booking":
            status = "cancelled, refund to the original payment"
        elif tool == "get_booking_details":
            status = "confirmed"
        else:
            status = "updated" if tool == "update_booking" else "created"
        flights = args.get("flights") or [self._flight() for _ in range(1 + self.d.below(2))]
        text = (f"reservation {code} {status}: {self.route or self._route()}, segments "
                f"{' '.join(flights)}, {1 + self.d.below(3)} passengers, total "
                f"${100 + self.d.below(1500)}")  # fmt: skip
        ident, ev = self._tool_result(230, text, "booking", booking=code)
        if code not in self.bookings:
            self.bookings.append(code)
            self.holder[code] = ident
        self.details[code] = ident
        return ev


# ----------------------------------------------------------------------------- knobs
@dataclass
class ArchetypeKnobs(GeneratorKnobs):
    """Knobs of every episodic archetype (each archetype adds its own)."""

    episode: ClassVar[type[Episode]]

    streams: int = knob(
        25, "episodes, one stream each (about: lengths vary, the last ones are cut)", AT_LEAST_1
    )
    events_per_stream: int = knob(
        400, "mean episode length (drawn in 0.5x-1.5x); trace = streams x this", AT_LEAST_1
    )
    concurrency: int = knob(4, "episodes interleaved at once", AT_LEAST_1)
    request_share: float = knob(0.3, "probability that a step is a request (else a write)", SHARE)
    reuse_skew: float = knob(
        1.1, "Zipf exponent of which items are reused (0 = uniform, larger = few hot)", AT_LEAST_0
    )
    long_range_share: float = knob(0.3, "share of needs that reach back to long-lived items", SHARE)
    token_scale: float = knob(
        1.0, "multiplies every item's mean token size", Range(0, 1000, lo_open=True)
    )
    token_sigma: float = knob(
        0.5, "log-normal spread of token sizes (0 = one size per kind of item)", TOKEN_SIGMA
    )
    pin_rate: float = knob(
        0.0, "probability a long-lived item is pinned when written (till episode end)",
        SHARE,
    )  # fmt: skip

    def events(self) -> Iterator[dict]:
        return _run(self)


@dataclass
class SupportKnobs(ArchetypeKnobs):
    """customer support: early constraints needed throughout, chit-chat, lookups"""

    episode = SupportEpisode
    constraints: int = knob(4, "an episode states 2 to constraints+1 user constraints", AT_LEAST_1)
    noise_share: float = knob(0.3, "share of writes that are chit-chat nobody needs again", SHARE)


@dataclass
class CodingKnobs(ArchetypeKnobs):
    """coding assistant: reads and test outputs reused (Zipf), edits supersede reads"""

    episode = CodingEpisode
    files: int = knob(30, "files in the repository (at least 2 are used)", AT_LEAST_1)


@dataclass
class AnalysisKnobs(ArchetypeKnobs):
    """data analysis: long query outputs, key numbers needed late (in the report)"""

    episode = AnalysisEpisode
    key_share: float = knob(0.1, "share of query outputs that hold key numbers", SHARE)
    report_share: float = knob(0.2, "final share of an episode spent writing the report", SHARE)


@dataclass
class AgentKnobs(ArchetypeKnobs):
    """tool-using booking agent fitted to tau-bench airline: needs follow entities"""

    # Defaults marked "fit" are experiments/calibrate.py's fit to tau-bench airline
    # (experiments/results/calibration.md; `python experiments/calibrate.py --check`).
    episode = AgentEpisode
    streams: int = knob(213, "episodes (one customer each), one stream each", AT_LEAST_1)
    events_per_stream: int = knob(
        47, "mean episode length (drawn in 0.5x-1.5x); trace = streams x this", AT_LEAST_1
    )  # fit
    request_share: float = knob(
        0.271, "probability that a step is a tool call (request, echo, result)", SHARE
    )  # fit
    user_share: float = knob(
        0.24, "probability that a step is a user turn (else a reply)", SHARE
    )  # fit
    constraint_share: float = knob(
        0.114, "share of user turns stating a constraint (a route, a payment)", SHARE
    )  # fit
    correction_share: float = knob(
        0.1, "share of user turns changing the route (supersedes it and its searches)", SHARE
    )
    derived_share: float = knob(
        0.595, "share of replies stating a derived value (a price) a later action uses", SHARE
    )  # fit
    act_share: float = knob(
        0.29, "final share of an episode spent acting (update, cancel, book)", SHARE
    )  # fit
    max_bookings: int = knob(
        2, "a user's profile lists 1 to max_bookings bookings", AT_LEAST_1
    )  # fit
    multi_share: float = knob(
        0.252, "probability that an action takes one more flight (up to 4)", SHARE
    )  # fit
    policy_need_share: float = knob(
        0.02, "probability that an action needs the policy (system prompt)", SHARE
    )
    policy_tokens: float = knob(
        1278.0,
        "token size of the policy (system prompt; one size, not scaled)",
        Range(0, 1e6, lo_open=True),
    )
    long_range_share: float = knob(
        0.241, "probability that an action also needs the user's goal", SHARE
    )  # fit
    token_scale: float = knob(
        1.236,
        "multiplies every item's mean token size but the policy's",
        Range(0, 1000, lo_open=True),
    )  # fit
    token_sigma: float = knob(
        0.45, "log-normal spread of token sizes (0 = one size per kind of item)", TOKEN_SIGMA
    )  # fit
    pin_rate: float = knob(0.1, "probability that the user pins their goal for the episode", SHARE)
    pin_policy: bool = knob(False, "pin the policy for the episode (as tau-bench does)")


ARCHETYPES: dict[str, type[ArchetypeKnobs]] = {
    "support": SupportKnobs,
    "coding": CodingKnobs,
    "analysis": AnalysisKnobs,
    "agent": AgentKnobs,
}
GENERATORS: dict[str, type[GeneratorKnobs]] = {"simple": SimpleKnobs, **ARCHETYPES}


def generate(archetype: str, **knobs) -> Iterator[dict]:
    """Yield the events of a synthetic ``archetype`` trace (any of :data:`GENERATORS`)."""
    if archetype not in GENERATORS:
        raise ValueError(f"unknown archetype {archetype!r} ({', '.join(GENERATORS)})")
    return GENERATORS[archetype].make(**knobs).events()


def _run(p: ArchetypeKnobs) -> Iterator[dict]:
    d = Draws(p.seed)
    total = p.streams * p.events_per_stream
    active: list[Episode] = []
    started = n = 0
    while n < total:
        while len(active) < p.concurrency:
            active.append(p.episode(started, d, p))
            started += 1
        ep = active[d.below(len(active))]
        batch = ep.step()
        if ep.done:
            batch += ep.release()
            active.remove(ep)
        yield from _cut(batch, ep, total - n)
        n += min(total - n, sum(ev["event"] != "unpin" for ev in batch))
    for ep in active:  # the cut-off episodes release their pins too
        yield from ep.release()


def _cut(batch: list[dict], ep: Episode, room: int) -> Iterator[dict]:
    """The first ``room`` events of ``batch`` that are not unpins, and its unpins, except
    those of pins cut off (the trace ends mid-batch): a pin never made is never released."""
    cut = set()
    for ev in batch:
        if ev["event"] == "unpin":
            if ev["target"] not in cut:
                yield ev
        elif room > 0:
            room -= 1
            yield ev
        elif ev["event"] == "pin":
            cut.add(ev["target"])
            if ev["target"] in ep.pinned:
                ep.pinned.remove(ev["target"])
