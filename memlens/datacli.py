"""``memlens data``: trace tools that are not replays.

``memlens data generate archetype=simple seed=0 out=trace.jsonl.gz [knob=value ...]``
``memlens data convert locomo|taubench SRC OUT [options]``  (real traces, see docs/datasets.md)
``memlens data stats TRACE [--json]``

Every command exits 2 on bad input (naming file and field) and writes nothing in that case.
"""

from __future__ import annotations

import argparse
import sys

from omegaconf import OmegaConf

from memlens.trace_io import write_trace

USAGE = """usage: memlens data <command> ...

commands:
  generate archetype=NAME seed=N out=PATH [knob=value ...]   write a synthetic trace
           archetypes: simple, support, coding, analysis (knobs: docs/datasets.md)
  convert  locomo|taubench SRC OUT [options]                 convert a real dataset
           (memlens data convert locomo --help)
  stats    TRACE [--json]                                    counts, tokens, evidence age
"""


def archetypes() -> dict:
    from memlens.datasets.archetypes import ARCHETYPES, make_generator
    from memlens.generate import generate_simple

    return {"simple": generate_simple, **{name: make_generator(name) for name in ARCHETYPES}}


def generate(argv: list[str]) -> int:
    try:
        opts = OmegaConf.to_container(OmegaConf.from_dotlist(argv))
    except Exception as exc:  # OmegaConf raises several types for bad dotlists
        print(f"memlens data generate: cannot parse {argv}: {exc}", file=sys.stderr)
        return 2
    name = opts.pop("archetype", "simple")
    out = opts.pop("out", None)
    known = archetypes()
    if name not in known:
        print(
            f"memlens data generate: unknown archetype {name!r} ({', '.join(known)})",
            file=sys.stderr,
        )
        return 2
    if not out:
        print("memlens data generate: out=PATH is required", file=sys.stderr)
        return 2
    try:
        events = known[name](**opts)
        header = {
            "generator": name,
            "tokenizer": "none (synthetic token sizes)",
            "params": {"archetype": name, **opts},
        }
        n = write_trace(out, events, header=header)
    except (TypeError, ValueError) as exc:
        print(f"memlens data generate: {exc}", file=sys.stderr)
        return 2
    print(f"wrote {n} events to {out}")
    return 0


def main(argv: list[str]) -> int:
    if not argv or argv[0] in ("-h", "--help"):
        print(USAGE)
        return 0
    command, rest = argv[0], argv[1:]
    if command == "generate":
        return generate(rest)
    if command in ("convert", "stats"):
        from memlens.datasets import datacommands

        return datacommands.convert(rest) if command == "convert" else datacommands.stats(rest)
    parser = argparse.ArgumentParser(prog="memlens data")
    parser.error(f"unknown data command {command!r}")
    return 2
