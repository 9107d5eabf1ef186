"""The scenario the adapter examples share (``openai_agents_loop.py``, ``langgraph_loop.py``,
``otel_loop.py``): the user asks about one of a few orders, a tool answers.

A framework writes the memory items itself (through an adapter), so the agent does not see their
ids; :class:`OrderMemory` is the manager with its ``write`` noting which items are about which
order, so that each turn can say what it needed (``used``): the order's latest items, as
``live_loop.py`` does.  A step's needs are the agent's to declare: no adapter guesses them.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import urllib.request

from memlens.live import MemoryManager

ORDERS = ["INV-101", "INV-202", "INV-303", "INV-404"]
ORDER_RE = re.compile(r"INV-\d{3}")


def order_of(step: int) -> str:
    """The order asked about at ``step`` (the same sequence as live_loop.py)."""
    return ORDERS[(step * 7 + step // 3) % len(ORDERS)]


def order_status(order: str, step: int) -> str:
    """The tool's answer."""
    return f"{order}: status {'shipped' if step % 2 else 'delayed'}, 42 USD"


class OrderMemory(MemoryManager):
    """A manager that remembers the ids of the items mentioning each order."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.about: dict[str, list[str]] = {}

    def write(self, stream, text, type, **kwargs) -> str:  # noqa: A002 - the manager's name
        ident = super().write(stream, text, type, **kwargs)
        for order in set(ORDER_RE.findall(text)):
            self.about.setdefault(order, []).append(ident)
        return ident


def arguments(doc: str, record: str, extra: dict | None = None) -> argparse.Namespace:
    """The examples' common options (and ``extra`` path options); a fresh record each run."""
    ap = argparse.ArgumentParser(description=doc.splitlines()[0])
    ap.add_argument("--record", default=record)
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--policy", default="rule")
    ap.add_argument("--budget", type=int, default=150)
    for flag, default in (extra or {}).items():
        ap.add_argument(flag, default=default)
    args = ap.parse_args()
    if os.path.exists(args.record):
        os.remove(args.record)
    for flag in ["--record", *(extra or {})]:
        path = getattr(args, flag.lstrip("-"))
        os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    return args


def steady_clock():
    """One minute per event: a steady agent (and a record that replays the same anywhere)."""
    ticks = iter(float(60 * k) for k in range(10**9))
    return lambda: next(ticks)


def summary(name: str, args, counts: dict, shown: int) -> str:
    """The line each example prints: the live session's counts, which a replay reproduces."""
    return (f"{name} policy={args.policy} budget={args.budget} steps={args.steps}: {counts} "
            f"max_shown_tokens={shown}")  # fmt: skip


def chat_completion(messages: list[dict], tools: list | None = None) -> dict:
    """The reply message of one chat completion from the OpenAI-compatible endpoint at
    ``OPENAI_BASE_URL`` (``OPENAI_API_KEY``, ``OPENAI_MODEL``): what every example calls when
    that variable is set."""
    body = {"model": os.environ.get("OPENAI_MODEL", "gpt-4o-mini"), "messages": messages}
    if tools:
        body["tools"] = tools
    req = urllib.request.Request(
        os.environ["OPENAI_BASE_URL"].rstrip("/") + "/chat/completions",
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json",
                 "Authorization": f"Bearer {os.environ.get('OPENAI_API_KEY', 'none')}"},
    )  # fmt: skip
    with urllib.request.urlopen(req, timeout=60) as resp:
        return json.load(resp)["choices"][0]["message"]
