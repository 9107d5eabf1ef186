"""Typed settings and bodies of ``memlens data generate | convert | stats``.

Each command's settings are a dataclass (registered in Hydra's ConfigStore by
``memlens.cli.data``), so Hydra checks names and types when it composes the command line; the
bodies here take the resolved dataclass and return what to print.  Every setting carries a
one-line meaning (field metadata ``help``), which ``--help`` lists.

* ``generate``: one schema per generator (:func:`generate_schema`): ``archetype``, ``out`` and
  the generator's knobs (``memlens.datasets.archetypes.GENERATORS``).
* ``convert``: one schema per dataset (:data:`DATASETS`): ``dataset``, ``src``, ``out``,
  ``tokenizer`` and the converter's options, which are its keyword arguments by name.
* ``stats``: :class:`StatsSettings`.

Conversion is all-or-nothing: the converter builds every event in memory (the sources are a few
MB), the events are validated exactly as ``load_trace`` would validate the file, and only then
is the trace written, atomically.  Any problem with the source is a :class:`SourceError` naming
file and field; ``memlens.cli.data`` reports it as one ``error:`` line with exit code 2.
"""

from __future__ import annotations

import json
import typing
from collections.abc import Callable
from dataclasses import dataclass, field, fields, make_dataclass
from enum import Enum
from typing import ClassVar

from omegaconf import MISSING

from memlens.trace.generate import GeneratorKnobs, check_knobs, knob
from memlens.trace.io import load_trace, trace_from_events, write_trace
from memlens.trace.limits import FORMAT_VERSION
from memlens.trace.model import ITEM_TYPES

from .archetypes import GENERATORS
from .convert_locomo import PLACEMENTS, convert_locomo
from .convert_longmemeval import convert_longmemeval
from .convert_taubench import SOURCES, convert_taubench
from .needs_derivation import NeedsSettings
from .openai_import import Roles, import_openai, untraced_warning
from .otel_import import import_otel

SYNTHETIC_TOKENS = "none (synthetic token sizes)"
OUT_HELP = "the trace file to write (.jsonl, or .jsonl.gz to compress)"
OVERWRITE_HELP = "replace out if it exists (without it, an existing out is an error)"


# -------------------------------------------------------------------------- generate
def generate_schema(name: str, knobs: type[GeneratorKnobs]) -> type:
    """The settings of ``memlens data generate archetype=<name>``: archetype, out, knobs."""
    hints = typing.get_type_hints(knobs)
    specs = [
        ("archetype", str, knob(name, "the generator (choose with archetype=NAME)")),
        ("out", str, knob(MISSING, OUT_HELP)),
        ("overwrite", bool, knob(False, OVERWRITE_HELP)),
        *((f.name, hints[f.name], field(default=f.default, metadata=f.metadata)) for f in fields(knobs)),
    ]  # fmt: skip
    return make_dataclass(
        f"Generate{name.title()}", specs, namespace={"__post_init__": check_knobs}
    )


def generate(settings) -> str:
    """Write the trace ``settings`` (a :func:`generate_schema` object) describe."""
    cls = GENERATORS[settings.archetype]
    knobs = cls(**{f.name: getattr(settings, f.name) for f in fields(cls)})
    params = {"archetype": settings.archetype, **knobs.recorded()}
    header = {"generator": settings.archetype, "tokenizer": SYNTHETIC_TOKENS, "params": params}
    n = write_trace(settings.out, knobs.events(), header=header)
    return f"wrote {n} events to {settings.out}"


# --------------------------------------------------------------------------- convert
def _choices(name: str, values: tuple[str, ...]) -> type[Enum]:
    return Enum(name, {v: v for v in values})


Placement = _choices("Placement", PLACEMENTS)
ItemType = _choices("ItemType", ITEM_TYPES)
Source = _choices("Source", SOURCES)


@dataclass
class ConvertSettings:
    """Settings every converter takes; the fields after ``tokenizer`` are converter options."""

    converter: ClassVar[Callable]

    dataset: str = knob(MISSING, "the dataset: dataset=locomo, taubench or longmemeval")
    src: str = knob(MISSING, "the source file")
    out: str = knob(MISSING, OUT_HELP)
    overwrite: bool = knob(False, OVERWRITE_HELP)
    tokenizer: str | None = knob(
        None, "approx (null = default), bpe_openai:NAME, tiktoken:NAME or hf:PATH"
    )

    def options(self) -> dict:
        """The converter's keyword arguments (enums as their plain string values)."""
        skip = {"dataset", "src", "out", "overwrite"}
        values = {f.name: getattr(self, f.name) for f in fields(self) if f.name not in skip}
        return {k: v.value if isinstance(v, Enum) else v for k, v in values.items()}


@dataclass
class LocomoSettings(ConvertSettings):
    """LoCoMo (locomo10.json): a stream per conversation, questions as requests"""

    converter = convert_locomo
    dataset: str = "locomo"
    placement: Placement = knob(
        Placement.end,
        "end: questions after the last session, after_evidence: after evidence",
    )
    speaker_a_type: ItemType = knob(ItemType.user_input, "item type of speaker_a's turns")
    speaker_b_type: ItemType = knob(ItemType.user_input, "item type of speaker_b's turns")
    turn_seconds: float = knob(30.0, "seconds between turns (LoCoMo dates sessions, not turns)")
    captions: bool = knob(True, "include image captions in the turn text")


@dataclass
class TaubenchSettings(ConvertSettings):
    """tau-bench results (gpt-4o-airline.json): derived needs of assistant turns"""

    converter = convert_taubench
    dataset: str = "taubench"
    source: Source = knob(
        Source.alternatives,
        "a value in several messages: alternatives (any will do) | first | last",
    )
    keep_empty: bool = knob(False, "keep assistant turns for which no need was found")
    commands: bool = knob(
        False, "split prose/commands in arguments into values (false: the shipped trace)"
    )


@dataclass
class LongmemevalSettings(ConvertSettings):
    """LongMemEval (longmemeval_s/m/oracle.json): has_answer turns are the needs (annotated)"""

    converter = convert_longmemeval
    dataset: str = "longmemeval"
    turn_seconds: float = knob(30.0, "seconds between turns (LongMemEval dates sessions)")


DATASETS: dict[str, type[ConvertSettings]] = {
    "locomo": LocomoSettings,
    "taubench": TaubenchSettings,
    "longmemeval": LongmemevalSettings,
}


def validate(events: list[dict], header: dict, out: str) -> None:
    """The checks loading the written file will make (header line first, as it is written)."""
    head = {"event": "header", "version": header.get("version", FORMAT_VERSION), **header}
    trace_from_events([head, *events], source=out)


def convert(settings: ConvertSettings) -> str:
    """Convert, validate, then write (atomically); returns the summary to print."""
    events, header = type(settings).converter(settings.src, **settings.options())
    validate(events, header, settings.out)
    n = write_trace(settings.out, events, header=header)
    warning = untraced_warning(header)
    return (
        f"wrote {n} events to {settings.out} (tokenizer {header.get('tokenizer')})\n"
        f"{json.dumps(header['report'], indent=None)}" + (f"\n{warning}" if warning else "")
    )


# ---------------------------------------------------------------------------- import
FORMATS = ("openai", "otel")


@dataclass
class ImportSettings:
    """Agent logs (OpenAI chat-completions messages) -> a trace with derived needs"""

    format: str = knob(
        "openai",
        "the log format: openai (chat-completions message lists) or "
        "otel (OTLP JSON exports of GenAI spans)",
    )
    src: str = knob(MISSING, "a .json/.jsonl(.gz) log file, or a directory of them")
    out: str = knob(MISSING, OUT_HELP)
    overwrite: bool = knob(False, OVERWRITE_HELP)
    tokenizer: str | None = knob(
        None, "approx (null = default), bpe_openai:NAME, tiktoken:NAME or hf:PATH"
    )
    keep_empty: bool = knob(False, "keep assistant turns for which no need was derived")
    needs: NeedsSettings = field(default_factory=NeedsSettings)
    roles: Roles = field(default_factory=Roles)

    def __post_init__(self) -> None:
        if self.format not in FORMATS:
            raise ValueError(f"format must be one of {', '.join(FORMATS)}, got {self.format!r}")


def import_logs(settings: ImportSettings) -> str:
    """Import, validate, then write (atomically); returns the summary to print."""
    importer = import_otel if settings.format == "otel" else import_openai
    events, header = importer(
        settings.src, settings.tokenizer, settings.needs, settings.roles, settings.keep_empty
    )
    validate(events, header, settings.out)
    n = write_trace(settings.out, events, header=header)
    return (
        f"wrote {n} events to {settings.out} (tokenizer {header.get('tokenizer')}, "
        f"needs derived by {settings.needs.method})\n"
        f"{json.dumps(header['report'], indent=None)}"
    ) + (f"\n{warning}" if (warning := untraced_warning(header)) else "")


# ---------------------------------------------------------------------------- derive
@dataclass
class DeriveSettings:
    """Any trace (v1 or 1.1) with its needs re-derived from its texts, every id kept"""

    trace: str = knob(MISSING, "the trace whose needs are derived again (.jsonl or .jsonl.gz)")
    out: str = knob(MISSING, OUT_HELP)
    overwrite: bool = knob(False, OVERWRITE_HELP)
    keep_empty: bool = knob(False, "keep requests for which no need was derived")
    calibrate: str | None = knob(
        None, "a labelled trace: set the method's threshold on it for target_precision"
    )
    target_precision: float = knob(0.6, "calibrate: the least precision the threshold keeps")
    needs: NeedsSettings = field(default_factory=lambda: NeedsSettings(method="fusion"))

    def __post_init__(self) -> None:
        if not 0 < self.target_precision <= 1:
            raise ValueError(f"target_precision must be in (0, 1], got {self.target_precision}")


def derive(settings: DeriveSettings) -> str:
    """Re-derive (after calibrating, if asked), validate, then write; returns the summary."""
    from pathlib import Path

    from .calibrate_needs import calibrate
    from .rederive import derive_trace, read_events

    needs, lines = settings.needs, []
    if settings.calibrate is not None:
        _, labelled = read_events(settings.calibrate)
        needs, _ = calibrate(labelled, needs, settings.target_precision,
                             Path(settings.calibrate).name)  # fmt: skip
        lines.append(f"calibrated on {needs.calibration}")
    events, header = derive_trace(settings.trace, needs, settings.keep_empty)
    validate(events, header, settings.out)
    n = write_trace(settings.out, events, header=header)
    warning = untraced_warning(header)
    return "\n".join([*lines, f"wrote {n} events to {settings.out} (needs derived by "
                       f"{needs.method})", json.dumps(header["report"]), *([warning] if warning
                                                                          else [])])  # fmt: skip


@dataclass
class ScoreNeedsSettings:
    """Precision, recall and F1 of one trace's needs against another's, per need"""

    derived: str = knob(MISSING, "the trace whose needs are scored")
    reference: str = knob(MISSING, "the trace whose needs are taken as right (same request ids)")
    json: bool = knob(False, "print the scores as JSON instead of a table")


def score_needs(settings: ScoreNeedsSettings) -> str:
    from .rederive import read_events
    from .score_needs import format_scores, score_events

    _, derived = read_events(settings.derived)
    _, reference = read_events(settings.reference)
    s = score_events(derived, reference).as_dict()
    if settings.json:
        return json.dumps(s, indent=2)
    return format_scores(s, settings.derived, settings.reference)


# ----------------------------------------------------------------------------- stats
@dataclass
class StatsSettings:
    """Counts, tokens per item type and evidence age in tokens of one trace"""

    trace: str = knob(MISSING, "the trace file (.jsonl or .jsonl.gz)")
    json: bool = knob(False, "print the statistics as JSON instead of a table")
    compare: str | None = knob(
        None, "a generated trace to compare with trace (the real one), side by side"
    )


def stats(settings: StatsSettings) -> str:
    from .stats import compare_stats, format_compare, format_stats, trace_stats

    if settings.compare is not None:
        c = compare_stats(load_trace(settings.trace), load_trace(settings.compare))
        return json.dumps(c, indent=2) if settings.json else format_compare(c)
    s = trace_stats(load_trace(settings.trace))
    return json.dumps(s, indent=2) if settings.json else format_stats(s)
