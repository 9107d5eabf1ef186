"""A simple synthetic agent-trace generator (archetype ``simple``).

It produces interleaved streams of writes of all four item types and requests whose needs
mix recent items (recency-skewed) with long-range ones, plus occasional pins; every need is
ground truth by construction.  The richer archetypes (support, coding, data analysis) live in
``memlens.datasets``; this one is small and fast enough to build the bundled default trace
and the speed benchmarks.

All randomness flows from one ``np.random.Generator`` seeded by ``seed``, so a seed is a trace.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np

from memlens.trace import ITEM_TYPES

TYPE_WEIGHTS = (0.2, 0.3, 0.35, 0.15)  # user_input, llm_thought, tool_result, agent_state
MEAN_TOKENS = (60, 120, 400, 80)
TOPICS = (
    "invoice refund shipping order account password flight booking baggage seat payment "
    "database query schema index error timeout retry config deploy test build cache memory "
    "report chart revenue forecast customer region quarter budget latency user session"
).split()
CONTENT = {
    "user_input": ("please", "I need", "can you", "my", "constraint:"),
    "llm_thought": ("maybe", "let me think", "perhaps", "plan:", "next I will"),
    "tool_result": ("result:", "returned", "error: failed", "rows", "status"),
    "agent_state": ("state:", "step", "goal", "final answer", "conclusion:"),
}


def generate_simple(
    seed: int = 0,
    streams: int = 4,
    events_per_stream: int = 500,
    request_share: float = 0.3,
    max_needs: int = 3,
    long_range_share: float = 0.2,
    recency_p: float = 0.15,
    pin_rate: float = 0.004,
    max_pins: int = 2,
    token_sigma: float = 0.6,
) -> Iterator[dict]:
    """Yield events (dicts in trace format v1) for ``streams`` interleaved agent streams.

    Pins go to user inputs (at most ``max_pins`` held per stream), as a person would pin a
    stated constraint.
    """
    if not 0.0 <= request_share < 1.0:
        raise ValueError("request_share must be in [0, 1)")
    rng = np.random.default_rng(seed)
    written: list[list[str]] = [[] for _ in range(streams)]
    words: list[dict[str, list[str]]] = [{} for _ in range(streams)]
    pinned: list[list[str]] = [[] for _ in range(streams)]
    user_inputs: list[list[str]] = [[] for _ in range(streams)]  # pins go to what a user said
    clock = np.zeros(streams)
    counters = [0] * streams
    total = streams * events_per_stream
    for n in range(total):
        s = n % streams
        name = f"s{s}"
        clock[s] += float(rng.exponential(30.0))
        t = round(float(clock[s]), 3)
        k = counters[s]
        counters[s] += 1
        have = written[s]
        roll = rng.random()
        if have and roll < pin_rate:
            if pinned[s] and (len(pinned[s]) >= max_pins or rng.random() < 0.5):
                yield {"event": "unpin", "target": pinned[s].pop(0), "t": t}
            else:
                users = user_inputs[s]
                target = users[int(rng.integers(len(users)))] if users else None
                if target is not None and target not in pinned[s]:
                    pinned[s].append(target)
                    yield {"event": "pin", "target": target, "t": t}
            continue
        if have and roll < pin_rate + request_share:
            n_needs = int(rng.integers(1, max_needs + 1))
            needs = []
            for _ in range(n_needs):
                if rng.random() < long_range_share:
                    j = int(rng.integers(len(have)))
                else:
                    j = len(have) - 1 - min(len(have) - 1, int(rng.geometric(recency_p)) - 1)
                needs.append(have[j])
            needs = list(dict.fromkeys(needs))
            text = " ".join(w for i in needs for w in words[s][i]) or "continue"
            yield {
                "event": "request",
                "id": f"{name}-r{k}",
                "stream": name,
                "t": t,
                "needs": needs,
                "text": f"use {text}",
            }
            continue
        ty = int(rng.choice(4, p=TYPE_WEIGHTS))
        type_name = ITEM_TYPES[ty]
        tokens = max(1, int(rng.lognormal(np.log(MEAN_TOKENS[ty]), token_sigma)))
        topic = [TOPICS[int(i)] for i in rng.integers(len(TOPICS), size=2)]
        lead = CONTENT[type_name][int(rng.integers(len(CONTENT[type_name])))]
        number = int(rng.integers(1000, 99999))
        ident = f"{name}-m{k}"
        cost = round(float(rng.lognormal(-5.0, 1.0)), 6) if type_name == "tool_result" else 0.0
        have.append(ident)
        if type_name == "user_input":
            user_inputs[s].append(ident)
        words[s][ident] = topic
        yield {
            "event": "write",
            "id": ident,
            "stream": name,
            "t": t,
            "type": type_name,
            "tokens": tokens,
            "cost": cost,
            "task": f"task-{name}",
            "text": f"{lead} {topic[0]} {topic[1]} #{number}",
        }
