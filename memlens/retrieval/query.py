"""What a request asks the memory for: its query vector, its task, and each item's static value.

The query is the request text's vector, optionally enriched (weights in
``retrieval.query``) with two things an agent knows when it asks:

* the task goal: the first ``user_input`` written in the stream for the request's task (what
  the user asked for), and
* the last action: the stream's most recent write before the request.

A request's task is ``meta.task`` when the trace gives one, else the task of the stream's most
recent write.  All of this is computed for every request before the replay, from what was
written *before* the request only, so nothing here looks ahead.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from memlens.retrieval.config import QueryConfig
from memlens.trace.features import DEFAULT_TYPE_BASE
from memlens.trace.model import ITEM_TYPES, REQUEST, WRITE, Trace


@dataclass
class RequestPlan:
    task: list[str]  # per request
    goal_item: np.ndarray  # int64 per request, -1 if none
    last_item: np.ndarray  # int64 per request, -1 if none


def plan_requests(trace: Trace) -> RequestPlan:
    """Task, goal item and last action of every request (a single pass over the events)."""
    n_req = trace.n_requests
    task = [""] * n_req
    goal = np.full(n_req, -1, dtype=np.int64)
    last = np.full(n_req, -1, dtype=np.int64)
    last_write = [-1] * trace.n_streams
    first_user: dict[tuple[int, str], int] = {}
    user = ITEM_TYPES.index("user_input")
    kinds = trace.ev_kind.tolist()
    refs = trace.ev_ref.tolist()
    streams = trace.ev_stream.tolist()
    types = trace.item_type.tolist()
    tasks = trace.item_task
    for e, k in enumerate(kinds):
        s = streams[e]
        if k == WRITE:
            i = refs[e]
            last_write[s] = i
            if types[i] == user:
                first_user.setdefault((s, tasks[i]), i)
        elif k == REQUEST:
            r = refs[e]
            lw = last_write[s]
            t = trace.req_meta[r].get("task")
            t = t if isinstance(t, str) else (tasks[lw] if lw >= 0 else "")
            task[r] = t
            last[r] = lw
            goal[r] = first_user.get((s, t), -1)
    return RequestPlan(task, goal, last)


def query_vectors(
    items: np.ndarray, requests: np.ndarray, plan: RequestPlan, cfg: QueryConfig
) -> np.ndarray:
    """Per request: normalise(request + goal_weight * goal + last_action_weight * last)."""
    q = requests.astype(np.float32).copy()
    weighted = ((cfg.goal_weight, plan.goal_item), (cfg.last_action_weight, plan.last_item))
    for weight, ref in weighted:
        if weight:
            has = ref >= 0
            q[has] += np.float32(weight) * items[ref[has]]
    norms = np.linalg.norm(q, axis=1, keepdims=True)
    norms[norms == 0] = 1.0
    return (q / norms).astype(np.float32)


def static_values(trace: Trace) -> np.ndarray:
    """A value in [0, 1] per item for the rerank's value term and value-based compression.

    Uses ``memlens.trace.features.static_value`` (type base + content and cost boosts, the rule
    scorer's time-independent value) when that module exists, else the type base value.
    """
    try:
        from memlens.trace.features import static_value
    except ImportError:  # the features module is optional for retrieval
        static_value = None
    if static_value is not None:
        return np.clip(np.asarray(static_value(trace), dtype=np.float64), 0.0, 1.0)
    base = np.asarray([DEFAULT_TYPE_BASE[t] for t in ITEM_TYPES], dtype=np.float64)
    return base[trace.item_type.astype(np.int64)]
