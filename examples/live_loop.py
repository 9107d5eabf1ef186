"""A scripted agent loop on the live memory manager: what a real agent does, without a model.

    python examples/live_loop.py [--record out/live.jsonl] [--steps 40] [--policy rule]

Each step the "user" asks about one of a few orders, a "tool" answers, the agent thinks; the
prompt is the manager's context (``format_context``), and the model cites the memories it used,
which become the step's needs (``parse_citations`` -> ``used``).  The model is scripted (it
cites the memories about the order asked for, when they are in the prompt) unless
``OPENAI_BASE_URL`` is set: then an OpenAI-compatible endpoint answers (``OPENAI_API_KEY``,
``OPENAI_MODEL``), with the same prompt.  The record then replays with
``memlens simulate`` / ``memlens compare`` like any trace.
"""

from __future__ import annotations

import argparse
import os

from orders import chat_completion

from memlens.live import MemoryManager, format_context, parse_citations

ORDERS = ["INV-101", "INV-202", "INV-303", "INV-404"]


def scripted_model(prompt: str, order: str, facts: dict[str, list[str]]) -> str:
    """Cites the memories about ``order`` that the prompt holds (a perfect, honest model)."""
    cited = [i for i in facts.get(order, []) if f"[{i}]" in prompt]
    return f"Order {order}: here is what I know " + " ".join(f"[{i}]" for i in cited)


def endpoint_model(prompt: str, question: str) -> str:
    """One chat completion from an OpenAI-compatible endpoint (only with OPENAI_BASE_URL)."""
    return chat_completion([{"role": "system", "content": prompt},
                            {"role": "user", "content": question}])["content"]  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--record", default="out/live.jsonl")
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--policy", default="rule")
    ap.add_argument("--budget", type=int, default=150)
    args = ap.parse_args()
    if os.path.exists(args.record):
        os.remove(args.record)  # a fresh session each run
    clock = iter(float(60 * k) for k in range(10**9))  # one minute per event: a steady agent
    facts: dict[str, list[str]] = {}
    reply = ""
    with MemoryManager(args.policy, args.budget, args.record, clock=lambda: next(clock)) as m:
        for step in range(args.steps):
            order = ORDERS[(step * 7 + step // 3) % len(ORDERS)]
            question = f"What is the status of {order}?"
            facts.setdefault(order, []).append(m.write("agent", question, "user_input"))
            answer = f"{order}: status {'shipped' if step % 2 else 'delayed'}, 42 USD"
            facts[order].append(m.write("agent", answer, "tool_result", cost=0.02))
            m.write("agent", f"thinking about {order} step {step}", "llm_thought")
            prompt = format_context(m.context("agent"))
            if os.environ.get("OPENAI_BASE_URL"):
                reply = endpoint_model(prompt, question)
            else:
                reply = scripted_model(prompt, order, facts)
            # the step needed the order's last four memories; the model's citations are the
            # ones it could see (needs=parse_citations(reply) would record only those)
            m.used("agent", facts[order][-4:], text=question)
            cites = parse_citations(reply)
        counts = m.counts()
        last = [(i.id, i.type, None if i.value is None else round(i.value, 3))
                for i in m.context("agent")]  # fmt: skip
    print(f"policy={args.policy} budget={args.budget} steps={args.steps}: {counts}")
    print(f"last reply: {reply!r} -> cites {cites}")
    print(f"last context: {last}")
    print(f"record: {args.record}")


if __name__ == "__main__":
    main()
