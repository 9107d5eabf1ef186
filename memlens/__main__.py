from memlens.cli.main import run

run()
