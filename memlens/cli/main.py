"""The ``memlens`` command: subcommands on top of Hydra 1.3, one grammar (``key=value``).

``memlens simulate key=value ...``  one replay (Hydra overrides; ``-m`` for sweeps)
``memlens compare key=value ...``   every registered policy at several budgets, one table
``memlens recommend target=T ...``  compare's runs, then the cheapest setting meeting a target
``memlens data ...``                trace tools (generate, convert, stats)

Each subcommand has its own primary config in ``conf/`` and its typed schema in
``memlens.config.schema``.  Before Hydra launches anything, :func:`run_hydra` composes the config of
every job the command line asks for (each combination of a ``-m`` sweep), resolves it into the
typed settings and runs the command's checks, so a bad setting stops the command with exit
code 2 and one ``error:`` line before any job starts or any file is written.
"""

from __future__ import annotations

import sys

USAGE = """usage: memlens <command> [key=value ...]

commands:
  simulate   replay a trace against one policy at one budget (writes metrics.json)
  compare    replay traces against every registered policy at several budgets
             (reference=lru: paired differences to lru, with intervals)
  recommend  compare, then the cheapest policy x budget whose metric reaches target=T
  data       trace tools: generate, convert, stats  (memlens data --help)
  cache      the caches: info, clear [KIND], warm  (memlens cache --help)
  feedback   feedback store: import-trace, simulate, show, apply  (memlens feedback --help)
  train      a model for policy=learned from a split (split=taubench label.kind=hindsight)
  tune       Optuna over a policy's constants on a split (hparams_search=rule split=locomo
             target=0.3): least total_cost_usd with request_success >= target
  report     one Markdown/HTML report of an MLflow experiment (memlens report EXPERIMENT)
  ui         the local analytics page (root=outputs port=8765; memlens ui --help)
  serve      a warm process for the other commands (--socket PATH; then MEMLENS_SERVER=PATH)

examples:
  memlens simulate trace=my.jsonl policy=lru budget=2048 demand_fetch=false
  memlens simulate -m policy=window,lru budget=512,1024,2048
  memlens compare budgets=[512,1024,2048,4096] policies=[rule] policy.admit_threshold=0.3
  memlens compare reference=lru stats.bootstrap=2000 stats.ci=0.95
  memlens recommend target=0.6 metric=request_success budgets=[1024,2048,4096]

every command: --cfg job (show the composed config), --help (Hydra's help)
"""


#: Hydra flags after which nothing runs (help, config printing): no validation needed.
def policy_overrides_to_list(argv: list[str]) -> list[str]:
    """``compare``: ``policy.<param>=v`` arguments become one ``policy_overrides=[...]``
    (and so do ``policy@NAME.<param>=v``, which set the parameter of policy NAME only).

    ``compare`` has no single policy node to override; each job composes its policy with
    these overrides exactly as ``simulate`` would.  ``policy=NAME`` (simulate's way of choosing
    one policy) is refused with a pointer to ``policies=[...]``.
    """
    if any(a.startswith("policy=") for a in argv):
        print("error: this command compares several policies: use policies=[NAME,...] "
              "(and policy.<param>=value to override a parameter)", file=sys.stderr)  # fmt: skip
        sys.exit(2)
    picked = [a for a in argv if a.lstrip("+~").startswith(("policy.", "policy@"))]
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
    from memlens._util.safecache import environment_error
    from memlens.config.app import run_hydra  # here: a client of memlens serve needs none of it

    if problem := environment_error():  # a bad MEMLENS_CACHE_MAX_BYTES: before any work
        print(f"error: {problem}", file=sys.stderr)
        sys.exit(2)
    if command == "simulate":
        from memlens.cli.replay import check_simulate, simulate_task

        run_hydra("simulate", simulate_task, rest, check_simulate)
    elif command == "compare":
        from memlens.cli.replay import check_compare, compare_task

        run_hydra("compare", compare_task, policy_overrides_to_list(rest), check_compare)
    elif command == "recommend":
        from memlens.cli.replay import check_recommend, recommend_task

        run_hydra("recommend", recommend_task, policy_overrides_to_list(rest), check_recommend)
    elif command == "train":
        from memlens.learn.splits import split_argument
        from memlens.learn.train import check_train, train_task

        run_hydra("train", train_task, split_argument(rest), check_train)
    elif command == "tune":
        from memlens.learn.tune import check_tune, tune_task

        run_hydra("tune", tune_task, rest, check_tune)
    elif command == "report":
        from memlens.present.experiment_report import main as report_main

        sys.exit(report_main(rest))
    elif command == "data":
        from memlens.cli.data import main as data_main

        sys.exit(data_main(rest))
    elif command == "cache":
        from memlens.cli.cache import main as cache_main

        sys.exit(cache_main(rest))
    elif command == "feedback":
        from memlens.cli.feedback import main as feedback_main

        sys.exit(feedback_main(rest))
    elif command == "ui":
        from memlens.ui.server import main as ui_main

        sys.exit(ui_main(rest))
    elif command == "serve":
        from memlens.cli.serve import main as serve_main

        sys.exit(serve_main(rest, main))
    else:
        print(f"memlens: unknown command {command!r}\n\n{USAGE}", file=sys.stderr)
        sys.exit(2)


def _served(argv: list[str]) -> int | None:
    """The exit code of ``argv`` run by the warm server ``MEMLENS_SERVER`` names (memlens
    serve), or None: no server is asked, or none ran it (this process runs it)."""
    import os

    path = os.environ.get("MEMLENS_SERVER")
    if not path or not argv:
        return None
    from memlens.cli.serve import run_through

    return run_through(path, argv)


def run() -> None:
    """The ``memlens`` command line (its console script and ``python -m memlens``):
    :func:`main`, then the process ends without its modules' teardown
    (``memlens._util.exits.exit_now``: threads, ``atexit`` handlers and streams are seen to
    first).  An uncaught exception ends it as Python would.  Under a profiler, tracer or
    debugger (``python -m cProfile -m memlens``, coverage, pdb) the process exits as Python
    does: the tool writes its results after the command returns."""
    from memlens._util.exits import exit_now, watched

    if watched():
        main()
        return
    served = _served(sys.argv[1:])
    if served is not None:
        exit_now(served)
    try:
        main()
    except SystemExit as exc:
        exit_now(exc.code)
    exit_now(0)


if __name__ == "__main__":
    run()
