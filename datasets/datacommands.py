"""Bodies of ``memlens data convert`` and ``memlens data stats`` (argument parsing, exit codes).

Conversion is all-or-nothing: the converter builds every event in memory (the sources are a few
MB), the events are validated exactly as ``load_trace`` would validate the file, and only then
is the trace written, atomically.  Any problem with the source is a :class:`SourceError` naming
file and field, reported on stderr with exit code 2.
"""

from __future__ import annotations

import argparse
import json
import sys

from memlens.tokenizer import TokenizerUnavailable
from memlens.trace import ITEM_TYPES
from memlens.trace_io import TraceError, load_trace, trace_from_events, write_trace

from .sources import SourceError


class _Parser(argparse.ArgumentParser):
    """argparse that reports usage errors with exit code 2 and our prefix (it already does 2)."""


def _convert_parser() -> argparse.ArgumentParser:
    ap = _Parser(prog="memlens data convert", description="Convert a real dataset into a trace.")
    sub = ap.add_subparsers(dest="dataset", required=True)
    lo = sub.add_parser("locomo", help="LoCoMo conversations (locomo10.json)")
    lo.add_argument("src")
    lo.add_argument("out")
    lo.add_argument("--placement", choices=("end", "after_evidence"), default="end")
    lo.add_argument(
        "--tokenizer",
        default=None,
        help="approx (default), tiktoken:NAME, bpe_openai:NAME, hf:PATH",
    )
    lo.add_argument("--speaker-a-type", choices=ITEM_TYPES, default="user_input")
    lo.add_argument("--speaker-b-type", choices=ITEM_TYPES, default="llm_thought")
    lo.add_argument("--turn-seconds", type=float, default=30.0)
    lo.add_argument(
        "--no-captions", action="store_true", help="leave image captions out of the text"
    )
    tb = sub.add_parser("taubench", help="tau-bench trajectories (e.g. gpt-4o-airline.json)")
    tb.add_argument("src")
    tb.add_argument("out")
    tb.add_argument("--tokenizer", default=None)
    tb.add_argument("--source", choices=("first", "last"), default="first",
                    help="which earlier message holding an argument value is its source")  # fmt: skip
    tb.add_argument("--keep-empty", action="store_true",
                    help="keep tool calls none of whose argument values was found (no needs)")  # fmt: skip
    return ap


def convert_events(args: argparse.Namespace) -> tuple[list[dict], dict]:
    if args.dataset == "locomo":
        from .convert_locomo import convert_locomo

        return convert_locomo(
            args.src, placement=args.placement, tokenizer=args.tokenizer,
            speaker_a_type=args.speaker_a_type, speaker_b_type=args.speaker_b_type,
            turn_seconds=args.turn_seconds, captions=not args.no_captions,
        )  # fmt: skip
    from .convert_taubench import convert_taubench

    return convert_taubench(
        args.src, tokenizer=args.tokenizer, source=args.source, keep_empty=args.keep_empty
    )


def convert(argv: list[str]) -> int:
    args = _convert_parser().parse_args(argv)
    try:
        events, header = convert_events(args)
        trace_from_events(events, source=args.out)  # same checks as loading the file later
        n = write_trace(args.out, events, header=header)
    except (SourceError, TokenizerUnavailable, ValueError) as exc:
        kind = "invalid converter output" if isinstance(exc, TraceError) else "error"
        print(f"memlens data convert: {kind}: {exc}", file=sys.stderr)
        return 2
    print(f"wrote {n} events to {args.out} (tokenizer {header.get('tokenizer')})")
    print(json.dumps(header["report"], indent=None))
    return 0


def stats(argv: list[str]) -> int:
    from .stats import format_stats, trace_stats

    ap = _Parser(prog="memlens data stats", description="Counts, tokens per type, evidence age.")
    ap.add_argument("trace")
    ap.add_argument("--json", action="store_true", help="print the statistics as JSON")
    args = ap.parse_args(argv)
    try:
        trace = load_trace(args.trace)
    except TraceError as err:
        print(f"memlens data stats: error: {err}", file=sys.stderr)
        return 2
    s = trace_stats(trace)
    print(json.dumps(s, indent=2) if args.json else format_stats(s))
    return 0
