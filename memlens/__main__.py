from memlens.cli import main

main()
