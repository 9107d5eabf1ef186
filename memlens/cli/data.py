"""``memlens data``: trace tools that are not replays, on Hydra overrides like ``simulate``.

``memlens data generate archetype=NAME out=PATH [knob=value ...]``   a synthetic trace
``memlens data convert dataset=NAME src=PATH out=PATH [option=value ...]``  a real dataset
``memlens data stats trace=PATH [json=true]``   counts, tokens, evidence age
``memlens data stats --compare REAL GENERATED``   the two side by side, a distance per row
``memlens data import openai FILE|DIR out=PATH [needs.method=args ...]``  your agent's logs
``memlens data import otel FILE|DIR out=PATH``  OTLP JSON exports of GenAI spans, the same way
``memlens data derive trace=IN out=OUT needs.method=M [needs.*=...]``  needs derived again
``memlens data score-needs derived=A reference=B [json=true]``  needs against needs: P/R/F1

Importing this module registers the commands' typed configs in Hydra's ConfigStore: primary
configs ``data_generate``, ``data_convert``, ``data_stats`` and ``data_import`` (whose
``needs.*`` and ``roles.*`` are nested dataclasses); the group ``archetype`` (one
schema per generator, its knobs at the top level) and the group ``dataset`` (one schema per
converter).  Hydra checks names and types when it composes; the dataclasses' ``__post_init__``
checks ranges.  ``--help`` lists every setting of every option with its default and meaning
(generated from the dataclasses), ``--cfg job`` prints the composed settings.

The data commands write only what they are asked to: the run directory is the working
directory, Hydra writes no ``.hydra/`` folder and no log, and the job does not change directory.
Bad input exits 2 with one ``error:`` line on stderr, before anything is written.
"""

from __future__ import annotations

import errno
import re
import sys
import zlib
from collections.abc import Callable
from dataclasses import MISSING as NO_DEFAULT
from dataclasses import fields
from enum import Enum
from pathlib import Path

from hydra.core.config_store import ConfigStore
from omegaconf import MISSING, DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from memlens._util.values import check_numbers
from memlens.config.app import error_message, run_hydra, subcommand
from memlens.config.paths import check_input_file, check_output_file
from memlens.datasets import datacommands
from memlens.datasets.archetypes import GENERATORS
from memlens.datasets.datacommands import (
    DATASETS,
    ConvertSettings,
    DeriveSettings,
    ImportSettings,
    ScoreNeedsSettings,
    StatsSettings,
)
from memlens.datasets.needs_derivation import NeedsSettings
from memlens.trace.tokenizer import TokenizerUnavailable

USAGE = """usage: memlens data <command> [key=value ...]     (Hydra overrides, as for simulate)

commands:
  generate  write a synthetic trace       archetype=coding seed=0 streams=4 out=t.jsonl.gz
  convert   convert a real dataset        dataset=locomo src=PATH out=PATH placement=end
  stats     counts, tokens, evidence age  trace=PATH json=true
            (or two traces side by side: stats --compare REAL GENERATED)
  import    your agent's logs             openai|otel FILE|DIR out=PATH needs.method=args
  derive    derive a trace's needs again  trace=IN out=OUT needs.method=fusion
  score-needs  needs against needs: P/R/F1  derived=A reference=B json=true

memlens data <command> --help lists every setting with its default and meaning;
memlens data <command> [key=value ...] --cfg job prints the composed settings.
"""

COMMANDS: dict[str, Callable] = {
    "generate": datacommands.generate,
    "convert": datacommands.convert,
    "stats": datacommands.stats,
    "import": datacommands.import_logs,
    "derive": datacommands.derive,
    "score-needs": datacommands.score_needs,
}
DEFAULT_ARCHETYPE = "simple"
# what reading a user's file can raise besides ValueError/OSError (whose messages name the
# file): a number too large for an int64 column, a truncated gzip stream
ERRORS = (ValueError, OSError, OverflowError, EOFError, zlib.error, TokenizerUnavailable,
          OmegaConfBaseException)  # fmt: skip
#: A full or read-only disk under ``out``: the error names the setting, not only the errno.
DISK_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EFBIG})


class UsageError(ValueError):
    """A setting that Hydra's composition let through (a ``+key=`` or a missing value)."""


# ------------------------------------------------------------------------------ help
def _shown(value) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return str(value).lower()
    return value.name if isinstance(value, Enum) else str(value)


def _setting_lines(cls: type, skip: frozenset[str] = frozenset()) -> list[str]:
    """``  name=default   meaning`` for every field of ``cls`` (``name=???`` if required)."""
    lines = []
    for f in fields(cls):
        if f.name not in skip:
            default = "???" if f.default in (MISSING, NO_DEFAULT) else _shown(f.default)
            lines.append(f"  {f'{f.name}={default}':<26} {f.metadata.get('help', '')}".rstrip())
    return lines


def _summary(cls: type) -> str:
    return (cls.__doc__ or "").strip().splitlines()[0]


def _help(
    head: str, shared: list[str], group: str, options: dict, skip=frozenset(), default=None
) -> str:
    """A ``hydra.help.template``: ``head``, the shared settings, then one section per option
    of config group ``group`` listing the settings it adds (all but ``skip``)."""
    lines = [head.rstrip(), "", *shared]
    for name, cls in options.items():
        mark = " (default)" if name == default else ""
        lines += ["", f"{group}={name}{mark}: {_summary(cls)}", *_setting_lines(cls, skip)]
    return "\n".join(lines).replace("$", "$$") + "\n"


GENERATE_HEAD = """\
memlens data generate: write a synthetic agent trace whose needs are known by construction.

usage: memlens data generate archetype=NAME out=PATH [knob=value ...]
       memlens data generate archetype=NAME [knob=value ...] --cfg job   (print the knobs)

Every archetype takes seed, streams and events_per_stream (the trace has streams x
events_per_stream events) plus the knobs listed under it; an unknown knob or a value of the
wrong type is an error (exit 2).  The trace header records the archetype, seed, streams,
events_per_stream and every knob set off its default: the same knobs give the same file,
byte for byte.  ??? = required.
"""
CONVERT_HEAD = """\
memlens data convert: convert a real dataset into a trace (docs/how-to/own-logs.md).

usage: memlens data convert dataset=NAME src=PATH out=PATH [option=value ...]

All or nothing: events are built and validated in memory, then written atomically; a
malformed source exits 2 naming file and field, and writes nothing.  ??? = required.
"""
STATS_HEAD = """\
memlens data stats: counts, tokens per item type and evidence age in tokens of a trace.

usage: memlens data stats trace=PATH [json=true]
       memlens data stats --compare REAL GENERATED [json=true]
"""


def generate_help() -> str:
    out = [f"  {'out=???':<26} {datacommands.OUT_HELP}",
           f"  {'overwrite=false':<26} {datacommands.OVERWRITE_HELP}"]  # fmt: skip
    return _help(GENERATE_HEAD, out, "archetype", GENERATORS, default=DEFAULT_ARCHETYPE)


def convert_help() -> str:
    shared = frozenset(f.name for f in fields(ConvertSettings))
    head = _setting_lines(ConvertSettings, frozenset({"dataset"}))
    return _help(CONVERT_HEAD, head, "dataset", DATASETS, shared)


IMPORT_HEAD = """\
memlens data import: your agent's logs (OpenAI chat-completions messages, or an OTLP JSON
export of GenAI spans) into a trace whose needs are derived by a named method
(docs/how-to/own-logs.md, "Bring your own traces").

usage: memlens data import openai FILE|DIR out=PATH [setting=value ...]
       memlens data import otel FILE|DIR out=PATH [setting=value ...]
       (the same as format=openai|otel src=FILE|DIR)

openai: one conversation per .json file or per .jsonl row ({"messages": [...]} or a bare
list).  otel: model-call and tool-execution spans, one conversation per
gen_ai.conversation.id (else per trace id).  All or nothing: a malformed log exits 2 naming
file, row (span) and field, and writes nothing.
"""


def import_help() -> str:
    lines = _setting_lines(ImportSettings, frozenset({"needs", "roles"}))
    for group in ("needs", "roles"):
        cls = {f.name: f.default_factory for f in fields(ImportSettings)}[group]
        lines += ["", f"{group}.*: {_summary(cls)}"]
        lines += [f"  {group}.{line.lstrip()}" for line in _setting_lines(cls)]
    return "\n".join([IMPORT_HEAD.rstrip(), "", *lines]).replace("$", "$$") + "\n"


DERIVE_HEAD = """\
memlens data derive: the needs of any trace (v1 or 1.1) derived again from its texts, every
id kept, the method and settings (and the calibration, if any) in the header.

usage: memlens data derive trace=IN out=OUT [needs.method=fusion] [needs.*=...]
       [calibrate=LABELLED target_precision=0.6]
"""
SCORE_HEAD = """\
memlens data score-needs: precision, recall and F1 of derived needs against reference needs,
per need, micro-averaged, overall and per request type (groups of alternatives: a derived
group is right when any member is a reference need).

usage: memlens data score-needs derived=A reference=B [json=true]
"""


def derive_help() -> str:
    lines = _setting_lines(DeriveSettings, frozenset({"needs"}))
    lines += ["", f"needs.*: {_summary(NeedsSettings)}"]
    default = DeriveSettings.__dataclass_fields__["needs"].default_factory().method
    for line in _setting_lines(NeedsSettings):  # the method's default is derive's, not import's
        line = re.sub(r"method=\S+ *", lambda m: f"method={default} ".ljust(len(m[0])), line)
        lines.append(f"  needs.{line.lstrip()}")
    return "\n".join([DERIVE_HEAD.rstrip(), "", *lines]).replace("$", "$$") + "\n"


def score_help() -> str:
    return _help(SCORE_HEAD, _setting_lines(ScoreNeedsSettings), "", {})


def stats_help() -> str:
    return _help(STATS_HEAD, _setting_lines(StatsSettings), "", {})


# ---------------------------------------------------------------------- ConfigStore
def _primary(command: str, defaults: list, template: str) -> dict:
    """A data command's primary config: its schema(s), and Hydra told to write nothing."""
    quiet = [
        {"override hydra/job_logging": "disabled"},
        {"override hydra/hydra_logging": "disabled"},
    ]
    hydra = {
        "run": {"dir": "."},
        "output_subdir": None,
        "job": {"name": f"data_{command}", "chdir": False},
        "help": {"template": template},
    }
    return {"defaults": [*defaults, *quiet, "_self_"], "hydra": hydra}


def register_configs() -> None:
    """Store every data command's schema in Hydra's ConfigStore (idempotent)."""
    cs = ConfigStore.instance()
    for name, knobs in GENERATORS.items():
        schema = datacommands.generate_schema(name, knobs)
        cs.store(group="archetype", name=name, node=schema, package="_global_")
    for name, settings in DATASETS.items():
        cs.store(group="dataset", name=name, node=settings, package="_global_")
    cs.store(name="data_convert_schema", node=ConvertSettings)
    cs.store(name="data_stats_schema", node=StatsSettings)
    cs.store(
        name="data_generate",
        node=_primary("generate", [{"archetype": DEFAULT_ARCHETYPE}], generate_help()),
    )
    cs.store(
        name="data_convert",
        node=_primary("convert", ["data_convert_schema", {"dataset": None}], convert_help()),
    )
    cs.store(name="data_stats", node=_primary("stats", ["data_stats_schema"], stats_help()))
    cs.store(name="data_import_schema", node=ImportSettings)
    cs.store(name="data_import", node=_primary("import", ["data_import_schema"], import_help()))
    cs.store(name="data_derive_schema", node=DeriveSettings)
    cs.store(name="data_derive", node=_primary("derive", ["data_derive_schema"], derive_help()))
    cs.store(name="data_score_needs_schema", node=ScoreNeedsSettings)
    cs.store(name="data_score-needs",
             node=_primary("score-needs", ["data_score_needs_schema"], score_help()))  # fmt: skip


register_configs()


# --------------------------------------------------------------------------- running
def resolve(cfg):
    """The composed config as its dataclass; a ``UsageError`` for a key the schema does not
    have (``+key=value``) or a required value left unset."""
    if not isinstance(cfg, DictConfig):
        return cfg
    cls = OmegaConf.get_type(cfg)
    known = [f.name for f in fields(cls)]
    unknown = [k for k in cfg if k not in known]
    if unknown:
        raise UsageError(f"unknown setting {unknown[0]!r} (known: {', '.join(known)})")
    for f in fields(cls):
        if OmegaConf.is_missing(cfg, f.name):
            raise UsageError(f"{f.name} is required: {f.metadata.get('help', '')}")
    return OmegaConf.to_object(cfg)


def check(cfg) -> None:
    """Everything a data command can check before it starts: the typed settings
    (:func:`resolve`), every number finite and within 64 bits, the files it reads (regular,
    readable) and the file it writes (absent unless ``overwrite=true``)."""
    settings = resolve(cfg)
    check_numbers(settings)
    for key in ("src", "trace", "compare", "derived", "reference", "calibrate"):
        path = getattr(settings, key, None)
        if path is not None and not (isinstance(settings, ImportSettings) and Path(path).is_dir()):
            check_input_file(key, path)
    if hasattr(settings, "out"):
        check_output_file("out", settings.out, settings.overwrite)


def _task(command: str) -> Callable[[DictConfig], None]:
    body = COMMANDS[command]

    def task(cfg: DictConfig) -> None:
        settings = resolve(cfg)
        try:
            text = body(settings)
        except ERRORS as exc:
            message = error_message(exc)
            source = next((f"{k}={getattr(settings, k)}" for k in ("trace", "src", "derived")
                           if hasattr(settings, k)), None)  # fmt: skip
            if source and not isinstance(exc, (ValueError, OSError, OmegaConfBaseException)):
                message = f"{source}: cannot be read: {message}"
            if isinstance(exc, OSError) and exc.errno in DISK_ERRNOS and hasattr(settings, "out"):
                message = f"out={settings.out}: cannot be written ({exc.strerror or exc})"
            print(f"error: {message}", file=sys.stderr)
            sys.exit(2)
        print(text)

    return task


def import_positionals(rest: list[str], names: tuple[str, ...] = ("format", "src")) -> list[str]:
    """``openai FILE`` (the first two words without ``=``) as ``format=openai src=FILE``; for
    ``stats``, ``stats FILE`` as ``trace=FILE`` (``names=("trace",)``)."""
    out, names = [], list(names)
    for arg in rest:
        if names and "=" not in arg and not arg.startswith("-"):
            arg = f"{names[0]}={arg}"
            names.pop(0)
        out.append(arg)
    return out


def main(argv: list[str]) -> int:
    """``memlens data <command> [overrides]``; returns the exit code."""
    picked = subcommand(argv, USAGE)
    if picked is None:
        return 0
    command, rest = picked
    if command == "import":
        rest = import_positionals(rest)
    elif command == "stats" and "--compare" not in rest:
        rest = import_positionals(rest, ("trace",))
    problem = None
    if command == "stats" and "--compare" in rest:  # --compare REAL GENERATED: two overrides
        at = rest.index("--compare")
        pair = rest[at + 1 : at + 3]
        if len(pair) < 2 or any("=" in p or p.startswith("-") for p in pair):
            problem = "stats --compare needs two trace files: --compare REAL GENERATED"
        rest = [*rest[:at], f"trace={pair[0] if pair else ''}",
                f"compare={pair[1] if len(pair) > 1 else ''}", *rest[at + 3 :]]  # fmt: skip
    if command not in COMMANDS:
        problem = f"unknown data command {command!r} (commands: {', '.join(COMMANDS)})"
    elif {"-m", "--multirun"} & set(rest):
        problem = "data commands run once: -m/--multirun is not supported"
    if problem:
        print(f"error: {problem}", file=sys.stderr)
        return 2
    try:
        run_hydra(f"data_{command}", _task(command), rest, check=check)
    except SystemExit as exc:
        return exc.code if isinstance(exc.code, int) else int(exc.code is not None)
    return 0
