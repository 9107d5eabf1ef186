"""``memlens feedback``: fill and read a feedback store (``memlens.learn.feedback``).

``memlens feedback import-trace TRACE store=PATH``   the trace's pins, unpins and annotations
``memlens feedback simulate TRACE store=PATH [simulated_user.KNOB=v ...]``  the simulated user
``memlens feedback show store=PATH [trace=SHA256] [source=S] [limit=N]``   counts and rows
``memlens feedback apply TRACE store=PATH out=PATH [source=S]``  the trace with the store's
feedback on it as pin/unpin/annotate events (``memlens.learn.feedback.with_feedback``), to replay

Settings are Hydra overrides like every other command (``TRACE`` may be given bare, it becomes
``trace=TRACE``); the typed schemas are registered in Hydra's ConfigStore by this module (the
simulated user's knobs by ``memlens.learn.simulated_user``, group ``simulated_user``).  Bad input
exits 2 with one ``error:`` line on stderr before the store is touched.
"""

from __future__ import annotations

import sys
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field, fields
from pathlib import Path

from hydra.core.config_store import ConfigStore
from omegaconf import MISSING, DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from memlens.config.app import error_message, run_hydra, subcommand
from memlens.learn.feedback import SOURCES, FeedbackStore, feedback_events, feedback_from_trace
from memlens.learn.simulated_user import SimulatedUserConfig, simulate_user
from memlens.trace.io import load_trace, write_trace

USAGE = """usage: memlens feedback <command> [key=value ...]

commands:
  import-trace TRACE store=PATH   add the trace's pins, unpins and annotations to the store
  simulate TRACE store=PATH       add the simulated user's pins and demotions
                                  (simulated_user.interventions_per_100_events=2
                                   simulated_user.precision=0.9 simulated_user.recall=0.5
                                   simulated_user.delay_events=0 simulated_user.seed=0)
  show store=PATH                 counts by source and action, then rows
                                  (trace=SHA256-PREFIX source=trace|simulated|person limit=20)
  apply TRACE store=PATH out=PATH write the trace with the store's feedback about it as
                                  pin/unpin/annotate events (source=S: only that source),
                                  to replay with memlens simulate trace=PATH
"""
STORE_HELP = "the feedback store (SQLite; created if absent)"


@dataclass
class ImportSettings:
    trace: str = field(default=MISSING, metadata={"help": "the trace file"})
    store: str = field(default=MISSING, metadata={"help": STORE_HELP})


@dataclass
class SimulateSettings:
    trace: str = field(default=MISSING, metadata={"help": "the trace file"})
    store: str = field(default=MISSING, metadata={"help": STORE_HELP})
    simulated_user: SimulatedUserConfig = field(default_factory=SimulatedUserConfig)


@dataclass
class ShowSettings:
    store: str = field(default=MISSING, metadata={"help": "the feedback store"})
    trace: str | None = field(
        default=None, metadata={"help": "only this trace (its sha256 or a prefix)"}
    )
    source: str | None = field(default=None, metadata={"help": "only this source"})
    limit: int = field(default=20, metadata={"help": "rows to print (0: counts only)"})


@dataclass
class ApplySettings:
    trace: str = field(default=MISSING, metadata={"help": "the trace file"})
    store: str = field(default=MISSING, metadata={"help": "the feedback store"})
    out: str = field(default=MISSING, metadata={"help": "the trace to write (.jsonl or .jsonl.gz)"})
    source: str | None = field(default=None, metadata={"help": "only this source"})


SCHEMAS = {"import-trace": ImportSettings, "simulate": SimulateSettings, "show": ShowSettings,
           "apply": ApplySettings}  # fmt: skip


def _config_name(command: str) -> str:
    return "feedback_" + command.replace("-", "_")


def register_configs() -> None:
    """Each command's schema and primary config in Hydra's ConfigStore (idempotent)."""
    cs = ConfigStore.instance()
    quiet = [{"override hydra/job_logging": "disabled"},
             {"override hydra/hydra_logging": "disabled"}]  # fmt: skip
    for command, schema in SCHEMAS.items():
        name = _config_name(command)
        cs.store(name=f"{name}_schema", node=schema)
        defaults: list = [f"{name}_schema"]
        if command == "simulate":
            defaults.append({"simulated_user": "default"})
        hydra = {"run": {"dir": "."}, "output_subdir": None,
                 "job": {"name": name, "chdir": False}}  # fmt: skip
        cs.store(name=name, node={"defaults": [*defaults, *quiet, "_self_"], "hydra": hydra})


register_configs()


# ------------------------------------------------------------------------- checks
def _field_names(cfg: DictConfig) -> set[str]:
    return {f.name for f in fields(OmegaConf.get_type(cfg))}


def resolve(cfg):
    """The composed config as its dataclass, checked before any work: required settings set,
    the trace file present, the store's folder present and the store readable."""
    if isinstance(cfg, DictConfig):
        for name in ("trace", "store", "out"):
            if name in _field_names(cfg) and OmegaConf.is_missing(cfg, name):
                raise ValueError(f"{name}=PATH is required")
        cfg = OmegaConf.to_object(cfg)
    settings = cfg
    if not isinstance(settings, ShowSettings) and not Path(settings.trace).is_file():
        raise ValueError(f"trace {settings.trace}: no such file")
    store = Path(settings.store)
    if not store.parent.is_dir():
        raise ValueError(f"store {store}: folder {store.parent} does not exist")
    if isinstance(settings, (ShowSettings, ApplySettings)):
        if not store.is_file():
            raise ValueError(f"store {store}: no such file")
        if settings.source is not None and settings.source not in SOURCES:
            raise ValueError(f"source must be one of {', '.join(SOURCES)}, got {settings.source!r}")
    if isinstance(settings, ShowSettings) and settings.limit < 0:
        raise ValueError(f"limit must be >= 0, got {settings.limit}")
    if isinstance(settings, ApplySettings):
        out = Path(settings.out)
        if not out.parent.is_dir():
            raise ValueError(f"out {out}: folder {out.parent} does not exist")
        if out.resolve() == Path(settings.trace).resolve():
            raise ValueError(f"out {out} is the input trace; write the new trace elsewhere")
    if store.exists():
        FeedbackStore(store)  # a foreign file or another schema version stops here
    return settings


# ------------------------------------------------------------------------ commands
def import_trace(s: ImportSettings) -> str:
    trace = load_trace(s.trace)
    n = FeedbackStore(s.store).add(feedback_from_trace(trace))
    return f"{s.store}: added {n} rows from {s.trace} (trace {trace.sha256[:12]})"


def simulate(s: SimulateSettings) -> str:
    trace = load_trace(s.trace)
    rows = simulate_user(trace, s.simulated_user)
    n = FeedbackStore(s.store).add(rows)
    kinds = Counter(r.action for r in rows)
    return (f"{s.store}: added {n} simulated rows ({kinds['keep']} keep, {kinds['drop']} drop) "
            f"over {trace.n_events} events of {s.trace} (trace {trace.sha256[:12]}, "
            f"author {s.simulated_user.config_hash()})")  # fmt: skip


def show(s: ShowSettings) -> str:
    rows = FeedbackStore(s.store).rows(source=s.source)
    if s.trace is not None:  # a prefix of the hash, as ``show`` prints it, is enough
        rows = [r for r in rows if r.trace_sha256.startswith(s.trace)]
    counts = Counter((r.source, r.action) for r in rows)
    traces = len({r.trace_sha256 for r in rows})
    lines = [f"{s.store}: {len(rows)} rows about {traces} traces"]
    lines += [f"  {src:<10} {act:<5} {n}" for (src, act), n in sorted(counts.items())]
    if rows and s.limit:
        lines.append(f"{'trace':<12} {'event':>7} {'source':<10} {'action':<6} {'value':>5}  item")
        for r in rows[: s.limit]:
            value = "" if r.value is None else f"{r.value:.2f}"
            note = f"  ({r.note})" if r.note else ""
            lines.append(f"{r.trace_sha256[:12]} {r.event_index:>7} {r.source:<10} "
                         f"{r.action:<6} {value:>5}  {r.item_id}{note}")  # fmt: skip
        if len(rows) > s.limit:
            lines.append(f"... {len(rows) - s.limit} more (limit={s.limit})")
    return "\n".join(lines)


def apply(s: ApplySettings) -> str:
    trace = load_trace(s.trace)
    rows = FeedbackStore(s.store).rows(trace_sha256=trace.sha256, source=s.source)
    n = write_trace(s.out, feedback_events(trace, rows))
    return (f"{s.out}: {n} lines ({trace.n_events} events of {s.trace} + {len(rows)} feedback "
            f"events from {s.store})")  # fmt: skip


COMMANDS: dict[str, Callable] = {"import-trace": import_trace, "simulate": simulate, "show": show,
                                 "apply": apply}  # fmt: skip
ERRORS = (ValueError, OSError, OmegaConfBaseException)


def _task(command: str) -> Callable[[DictConfig], None]:
    body = COMMANDS[command]

    def task(cfg: DictConfig) -> None:
        try:
            text = body(resolve(cfg))
        except ERRORS as exc:
            print(f"error: {error_message(exc)}", file=sys.stderr)
            sys.exit(2)
        print(text)

    return task


def _overrides(rest: list[str]) -> list[str]:
    """A bare ``TRACE`` argument becomes ``trace=TRACE`` (quoted for Hydra's grammar)."""
    out = []
    for arg in rest:
        if arg.startswith("-") or "=" in arg:
            out.append(arg)
        else:
            out.append("trace='" + arg.replace("\\", "\\\\").replace("'", "\\'") + "'")
    return out


def main(argv: list[str]) -> int:
    """``memlens feedback <command> [overrides]``; returns the exit code."""
    picked = subcommand(argv, USAGE)
    if picked is None:
        return 0
    command, rest = picked
    problem = None
    if command not in COMMANDS:
        problem = f"unknown feedback command {command!r} (commands: {', '.join(COMMANDS)})"
    elif {"-m", "--multirun"} & set(rest):
        problem = "feedback commands run once: -m/--multirun is not supported"
    elif sum(1 for a in rest if not a.startswith("-") and "=" not in a) > 1:
        problem = "give one TRACE (or trace=PATH)"
    if problem:
        print(f"error: {problem}", file=sys.stderr)
        return 2
    try:
        run_hydra(_config_name(command), _task(command), _overrides(rest), check=resolve)
    except SystemExit as exc:
        return exc.code if isinstance(exc.code, int) else int(exc.code is not None)
    return 0
