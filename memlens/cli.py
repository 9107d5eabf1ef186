"""The ``memlens`` command: subcommands on top of Hydra 1.3.

``memlens simulate key=value ...``  one replay (Hydra overrides; ``-m`` for sweeps)
``memlens compare key=value ...``   every registered policy at several budgets, one table
``memlens data ...``                trace tools (generate, convert, stats)

Each Hydra subcommand has its own primary config in ``conf/`` (``simulate.yaml``,
``compare.yaml``), so ``hydra.run.dir=DIR``, ``--cfg job`` and multirun work as usual.
"""

from __future__ import annotations

import sys

USAGE = """usage: memlens <command> [hydra overrides...]

commands:
  simulate   replay a trace against one policy at one budget (writes metrics.json)
  compare    replay traces against every registered policy at several budgets
  data       trace tools: generate, convert, stats  (memlens data --help)

examples:
  memlens simulate trace=my.jsonl policy=lru budget=2048 demand_fetch=false
  memlens simulate -m policy=window,lru budget=512,1024,2048
  memlens compare budgets=[512,1024,2048,4096]
"""


def run_hydra(config_name: str, task, argv: list[str]) -> None:
    """Run ``task(cfg)`` as a Hydra app with primary config ``conf/<config_name>.yaml``."""
    import hydra

    from memlens.config import CONF_DIR

    app = hydra.main(version_base="1.3", config_path=str(CONF_DIR), config_name=config_name)(task)
    saved = sys.argv
    sys.argv = [f"memlens {config_name}", *argv]
    try:
        app()
    finally:
        sys.argv = saved


def main(argv: list[str] | None = None) -> None:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help", "help"):
        print(USAGE)
        return
    command, rest = argv[0], argv[1:]
    if command == "simulate":
        from memlens.commands import simulate_task

        run_hydra("simulate", simulate_task, rest)
    elif command == "compare":
        from memlens.commands import compare_task

        run_hydra("compare", compare_task, rest)
    elif command == "data":
        from memlens.datacli import main as data_main

        sys.exit(data_main(rest))
    else:
        print(f"memlens: unknown command {command!r}\n\n{USAGE}", file=sys.stderr)
        sys.exit(2)


if __name__ == "__main__":
    main()
