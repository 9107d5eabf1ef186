"""The Hydra application every subcommand runs in: its arguments, validation before any work,
and one ``error:`` line for a setting that cannot run.

Here rather than in the dispatcher (``memlens.cli.main``) so that every subcommand module
(``memlens.cli.data``, ``memlens.cli.feedback``, ``memlens ui``) uses it without importing the
dispatcher back.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass

_INFO_FLAGS = {"--help", "-h", "--hydra-help", "--cfg", "-c", "--info", "-i",
               "--shell-completion", "-sc"}  # fmt: skip
_VALUE_FLAGS = {"--cfg", "-c", "--package", "-p", "--info", "-i", "--config-path", "-cp",
                "--config-name", "-cn", "--config-dir", "-cd", "--experimental-rerun"}  # fmt: skip


def split_args(argv: list[str]) -> tuple[list[str], list[str]]:
    """(Hydra flags with their values, overrides)."""
    flags, overrides = [], []
    it = iter(argv)
    for arg in it:
        if arg.startswith("-"):
            flags.append(arg)
            if arg in _VALUE_FLAGS and arg not in ("--info", "-i"):
                flags.append(next(it, ""))
        else:
            overrides.append(arg)
    return flags, overrides


def job_overrides(overrides: list[str], multirun: bool) -> list[list[str]]:
    """The override list of every job (a ``-m`` sweep expanded), ``hydra.*`` left out."""
    from hydra._internal.core_plugins.basic_sweeper import BasicSweeper
    from hydra.core.override_parser.overrides_parser import OverridesParser

    parsed = OverridesParser.create().parse_overrides(overrides)
    parsed = [o for o in parsed if not o.get_key_element().startswith("hydra")]
    if not multirun:
        return [[o.input_line for o in parsed]]
    if any(o.is_sweep_override() and not o.is_discrete_sweep() for o in parsed):
        # a range or interval sweep (an optimiser's): check what is fixed, the sweeper the rest
        parsed = [o for o in parsed if not o.is_sweep_override()]
    batches = BasicSweeper.split_arguments(parsed, max_batch_size=None)
    return [job for batch in batches for job in batch]


def error_message(exc: BaseException) -> str:
    """One line saying what is wrong with a setting (Hydra's and OmegaConf's errors too)."""
    from hydra.errors import MissingConfigException

    text = str(exc).strip()
    missing = getattr(exc, "missing_cfg_file", None)
    if isinstance(exc, MissingConfigException) and missing and "/" in missing:
        group, name = missing.rsplit("/", 1)
        if group == "policy":
            from memlens.config.store import registered_policies

            options = registered_policies()
        else:
            options = sorted(o for o in exc.options or [] if not o.endswith("_schema"))
        return f"unknown {group} {name!r} (registered: {', '.join(options)})"
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    first = lines[0] if lines else type(exc).__name__
    if first.endswith(":") and len(lines) > 1:  # "In 'experiment/x': ... composing config:"
        first = f"{first} {lines[1]}"
    cause = exc.__cause__
    if cause is not None and str(cause).strip():
        detail = str(cause).strip().splitlines()[0].strip()
        first = f"{first.rstrip('.')}: {detail}"
    return first


#: The ``hydra.*`` overrides the pre-flight checks keep: where the run folder goes.
DIR_KEYS = ("hydra.run.dir", "hydra.sweep.dir", "hydra.sweep.subdir", "hydra.output_subdir")


def dir_overrides(overrides: list[str]) -> list[str]:
    """The overrides of where Hydra puts the run folder (``job_overrides`` drops ``hydra.*``)."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    parsed = OverridesParser.create().parse_overrides(overrides)
    return [o.input_line for o in parsed if o.get_key_element().lstrip("+~") in DIR_KEYS]


def parse_error(overrides: list[str]) -> str | None:
    """One line naming the setting whose override Hydra's grammar cannot read (a path with
    ``[``, ``]`` or ``=`` in it must be quoted), or None."""
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.errors import OverrideParseException

    parser = OverridesParser.create()
    for text in overrides:
        try:
            parser.parse_overrides([text])
        except OverrideParseException:
            key, eq, value = text.partition("=")
            if not eq:
                return f"{text!r} is not a setting: write key=value (e.g. dataset={text})"
            example = f"{key}=['...']" if value.startswith("[") else f"{key}='{value}'"
            return (f"{key}={value}: Hydra's override grammar cannot read this value; quote a "
                    f"path that holds [ ] , = or spaces ({example})")  # fmt: skip
    return None


def check_run_folder(hydra: dict, cfg, multirun: bool) -> None:
    """Where Hydra will put the run's files (``hydra.run.dir``, ``hydra.sweep.dir`` for
    ``-m``), checked before Hydra creates anything (``memlens.config.paths.check_run_dir``);
    the folders on the way that do not exist yet are noted, so a failed run removes them."""
    from omegaconf import OmegaConf

    from memlens._util.folders import note_missing_parents
    from memlens.config.paths import check_run_dir

    key = "hydra.sweep.dir" if multirun else "hydra.run.dir"
    path = hydra.get(key)
    if path is None or hydra.get("hydra.output_subdir") is None:
        return  # (data, feedback and train write only the files they are told to)
    traces = [OmegaConf.select(cfg, "trace", default=None),
              *(OmegaConf.select(cfg, "traces", default=None) or [])]  # fmt: skip
    check_run_dir(key, str(path), [str(t) for t in traces if t])
    note_missing_parents(path)


@dataclass
class Composed:
    """What validation composed for one job: its ``hydra.mode`` and, for a single run, Hydra's
    whole composition (``memlens.config.compose.compose_with_hydra``'s ``keep_full``)."""

    mode: object
    full: object = None


def validate(config_name: str, argv: list[str], check: Callable | None) -> list[Composed]:
    """Compose and check every job's config; exit 2 with one ``error:`` line on a problem.

    ``check(cfg)`` raises on a bad setting and may return a deferred step (a callable: the
    trace parse), run once every job has passed, so a sweep's bad setting costs no parse.
    The run folder, for a command Hydra writes one for, is checked first.  Returns each
    composed job's :class:`Composed` (none for the flags after which nothing runs)."""
    from hydra.errors import HydraException
    from omegaconf.errors import OmegaConfBaseException

    from memlens.config.compose import compose_with_hydra

    flags, overrides = split_args(argv)
    if _INFO_FLAGS & set(flags):
        return []
    if "--experimental-rerun" in flags:
        print("error: --experimental-rerun loads a pickle, which can run code: rerun with the "
              "run's overrides (.hydra/overrides.yaml) instead", file=sys.stderr)  # fmt: skip
        sys.exit(2)
    if (problem := parse_error(overrides)) is not None:
        print(f"error: {problem}", file=sys.stderr)
        sys.exit(2)
    multirun = "-m" in flags or "--multirun" in flags
    try:
        deferred = []  # what a check defers (a trace parse) until every job's settings passed
        dirs, composed = dir_overrides(overrides), []
        for job in job_overrides(overrides, multirun):
            cfg, hydra = compose_with_hydra(config_name, [*job, *dirs], keep_full=not multirun)
            composed.append(Composed(hydra["hydra.mode"], hydra.get("full")))
            check_run_folder(hydra, cfg, multirun)
            later = check(cfg) if check is not None else None
            if callable(later):
                deferred.append(later)
        for step in deferred:
            step()
        return composed
    except (HydraException, OmegaConfBaseException, ValueError, TypeError, KeyError,
            OSError) as exc:  # fmt: skip
        print(f"error: {error_message(exc)}", file=sys.stderr)
        sys.exit(2)


def run_hydra(config_name: str, task: Callable, argv: list[str],
              check: Callable | None = None) -> None:  # fmt: skip
    """Validate, then run ``task(cfg)`` as a Hydra app with primary config ``config_name``."""
    import hydra

    from memlens.config.schema import register_configs
    from memlens.config.store import CONF_DIR

    register_configs()
    composed = validate(config_name, argv, check)
    app = hydra.main(version_base="1.3", config_path=str(CONF_DIR), config_name=config_name)(task)
    saved = sys.argv
    sys.argv = [f"memlens {config_name}", *argv]
    try:
        with known_mode(argv, composed):
            app()
    finally:
        sys.argv = saved


@contextlib.contextmanager
def known_mode(argv: list[str], composed: list[Composed]) -> Iterator[None]:
    """Hydra composes a run's config twice: the first time only to read ``hydra.mode``
    (``Hydra.get_mode``), the second for the run.  For a single run (no ``-m``) whose only
    ``hydra.*`` overrides are where its folder goes, :func:`validate` composed exactly that
    config already (the same overrides; ``tests/config/test_known_mode.py`` holds the run's
    files to Hydra's own compositions), so the mode is answered from there and the run is
    given that composition: two compositions fewer per command (issue 34)."""
    from hydra._internal.hydra import Hydra

    flags, overrides = split_args(argv)
    others = [o for o in overrides if o.lstrip("+~").startswith("hydra")
              and o.lstrip("+~").partition("=")[0] not in DIR_KEYS]  # fmt: skip
    if len(composed) != 1 or others or {"-m", "--multirun"} & set(flags):
        yield
        return
    get_mode, compose = Hydra.get_mode, Hydra.compose_config
    Hydra.get_mode = lambda self, config_name, overrides: composed[0].mode
    Hydra.compose_config = _composed_once(compose, composed[0].full)
    try:
        yield
    finally:
        Hydra.get_mode, Hydra.compose_config = get_mode, compose


def _composed_once(compose: Callable, full) -> Callable:
    """``Hydra.compose_config`` that gives the run validation's composition ``full`` once
    (configuring logging from it, as Hydra does), and composes anything else itself."""
    from hydra.core.utils import configure_log
    from hydra.types import RunMode

    held = [full]

    def compose_config(self, config_name, overrides, run_mode, with_log_configuration=False,
                       *args, **kwargs):  # fmt: skip
        cfg = held[0]
        seen = [] if cfg is None else [*cfg.hydra.overrides.task, *cfg.hydra.overrides.hydra]
        added = [o for o in overrides if o not in seen]
        if cfg is None or run_mode != RunMode.RUN or added not in ([], ["hydra.mode=RUN"]):
            return compose(self, config_name, overrides, run_mode, with_log_configuration,
                           *args, **kwargs)  # fmt: skip
        held[0] = None
        if added:  # Hydra's own override for a config that names no mode: applied as Hydra does
            cfg.hydra.overrides.hydra.append(added[0])
            cfg.hydra.mode = RunMode.RUN
        if with_log_configuration:
            configure_log(cfg.hydra.hydra_logging, cfg.hydra.verbose)
        return cfg

    return compose_config


def subcommand(argv: list[str], usage: str) -> tuple[str, list[str]] | None:
    """A subcommand family's first word and the rest, or None after printing ``usage`` (for no
    arguments or a help flag): how ``memlens data``, ``feedback`` and ``cache`` start."""
    if not argv or argv[0] in ("-h", "--help", "help"):
        print(usage)
        return None
    return argv[0], argv[1:]
