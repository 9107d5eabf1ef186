"""The ``memlens`` command: subcommands on top of Hydra 1.3, one grammar (``key=value``).

``memlens simulate key=value ...``  one replay (Hydra overrides; ``-m`` for sweeps)
``memlens compare key=value ...``   every registered policy at several budgets, one table
``memlens recommend target=T ...``  compare's runs, then the cheapest setting meeting a target
``memlens data ...``                trace tools (generate, convert, stats)

Each subcommand has its own primary config in ``conf/`` and its typed schema in
``memlens.settings``.  Before Hydra launches anything, :func:`run_hydra` composes the config of
every job the command line asks for (each combination of a ``-m`` sweep), resolves it into the
typed settings and runs the command's checks, so a bad setting stops the command with exit
code 2 and one ``error:`` line before any job starts or any file is written.
"""

from __future__ import annotations

import sys
from collections.abc import Callable

USAGE = """usage: memlens <command> [key=value ...]

commands:
  simulate   replay a trace against one policy at one budget (writes metrics.json)
  compare    replay traces against every registered policy at several budgets
             (reference=lru: paired differences to lru, with intervals)
  recommend  compare, then the cheapest policy x budget whose metric reaches target=T
  data       trace tools: generate, convert, stats  (memlens data --help)
  cache      the caches: info, clear [KIND]  (memlens cache --help)
  feedback   feedback store: import-trace, simulate, show, apply  (memlens feedback --help)
  train      a model for policy=learned from a split (split=taubench label.kind=hindsight)
  tune       Optuna over a policy's constants on a split (hparams_search=rule split=locomo
             target=0.3): least total_cost_usd with request_success >= target
  report     one Markdown/HTML report of an MLflow experiment (memlens report EXPERIMENT)
  ui         the local analytics page (root=outputs port=8765; memlens ui --help)

examples:
  memlens simulate trace=my.jsonl policy=lru budget=2048 demand_fetch=false
  memlens simulate -m policy=window,lru budget=512,1024,2048
  memlens compare budgets=[512,1024,2048,4096] policies=[lru,rule] policy.admit_threshold=0.3
  memlens compare reference=lru stats.bootstrap=2000 stats.ci=0.95
  memlens recommend target=0.6 metric=request_success budgets=[1024,2048,4096]

every command: --cfg job (show the composed config), --help (Hydra's help)
"""

#: Hydra flags after which nothing runs (help, config printing): no validation needed.
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
            from memlens.config import registered_policies

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


def validate(config_name: str, argv: list[str], check: Callable | None) -> None:
    """Compose and check every job's config; exit 2 with one ``error:`` line on a problem.

    ``check(cfg)`` raises on a bad setting and may return a deferred step (a callable: the
    trace parse), run once every job has passed, so a sweep's bad setting costs no parse."""
    from hydra.errors import HydraException
    from omegaconf.errors import OmegaConfBaseException

    from memlens.config import compose_config

    flags, overrides = split_args(argv)
    if _INFO_FLAGS & set(flags):
        return
    multirun = "-m" in flags or "--multirun" in flags
    try:
        deferred = []  # what a check defers (a trace parse) until every job's settings passed
        for job in job_overrides(overrides, multirun):
            cfg = compose_config(config_name, job)
            later = check(cfg) if check is not None else None
            if callable(later):
                deferred.append(later)
        for step in deferred:
            step()
    except (HydraException, OmegaConfBaseException, ValueError, TypeError, KeyError,
            OSError) as exc:  # fmt: skip
        print(f"error: {error_message(exc)}", file=sys.stderr)
        sys.exit(2)


def run_hydra(config_name: str, task: Callable, argv: list[str],
              check: Callable | None = None) -> None:  # fmt: skip
    """Validate, then run ``task(cfg)`` as a Hydra app with primary config ``config_name``."""
    import hydra

    from memlens.config import CONF_DIR
    from memlens.settings import register_configs

    register_configs()
    validate(config_name, argv, check)
    app = hydra.main(version_base="1.3", config_path=str(CONF_DIR), config_name=config_name)(task)
    saved = sys.argv
    sys.argv = [f"memlens {config_name}", *argv]
    try:
        app()
    finally:
        sys.argv = saved


def policy_overrides_to_list(argv: list[str]) -> list[str]:
    """``compare``: ``policy.<param>=v`` arguments become one ``policy_overrides=[...]``.

    ``compare`` has no single policy node to override; each job composes its policy with
    these overrides exactly as ``simulate`` would.  ``policy=NAME`` (simulate's way of choosing
    one policy) is refused with a pointer to ``policies=[...]``.
    """
    if any(a.startswith("policy=") for a in argv):
        print("error: this command compares several policies: use policies=[NAME,...] "
              "(and policy.<param>=value to override a parameter)", file=sys.stderr)  # fmt: skip
        sys.exit(2)
    picked = [a for a in argv if a.lstrip("+~").startswith("policy.")]
    if not picked:
        return argv
    quoted = ",".join("'" + a.replace("\\", "\\\\").replace("'", "\\'") + "'" for a in picked)
    return [a for a in argv if a not in picked] + [f"policy_overrides=[{quoted}]"]


def main(argv: list[str] | None = None) -> None:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help", "help"):
        print(USAGE)
        return
    command, rest = argv[0], argv[1:]
    from memlens.safecache import environment_error

    if problem := environment_error():  # a bad MEMLENS_CACHE_MAX_BYTES: before any work
        print(f"error: {problem}", file=sys.stderr)
        sys.exit(2)
    if command == "simulate":
        from memlens.commands import check_simulate, simulate_task

        run_hydra("simulate", simulate_task, rest, check_simulate)
    elif command == "compare":
        from memlens.commands import check_compare, compare_task

        run_hydra("compare", compare_task, policy_overrides_to_list(rest), check_compare)
    elif command == "recommend":
        from memlens.commands import check_recommend, recommend_task

        run_hydra("recommend", recommend_task, policy_overrides_to_list(rest), check_recommend)
    elif command == "train":
        from memlens.train import check_train, train_task

        run_hydra("train", train_task, rest, check_train)
    elif command == "tune":
        from memlens.tune import check_tune, tune_task

        run_hydra("tune", tune_task, rest, check_tune)
    elif command == "report":
        from memlens.experiment_report import main as report_main

        sys.exit(report_main(rest))
    elif command == "data":
        from memlens.datacli import main as data_main

        sys.exit(data_main(rest))
    elif command == "cache":
        from memlens.cachecli import main as cache_main

        sys.exit(cache_main(rest))
    elif command == "feedback":
        from memlens.feedbackcli import main as feedback_main

        sys.exit(feedback_main(rest))
    elif command == "ui":
        from memlens.ui.server import main as ui_main

        sys.exit(ui_main(rest))
    else:
        print(f"memlens: unknown command {command!r}\n\n{USAGE}", file=sys.stderr)
        sys.exit(2)


if __name__ == "__main__":
    main()
