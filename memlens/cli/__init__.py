"""The ``memlens`` command: the dispatcher (``main``) and one module per subcommand family:
``replay`` (simulate, compare, recommend), ``data``, ``feedback``, ``cache``; train, tune and
ui bodies live in ``memlens.learn`` and ``memlens.ui``.

May import: anything in MemLens; nothing imports it (``memlens.__main__`` and the console
script call ``memlens.cli.main:main``).
"""
