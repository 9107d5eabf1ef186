"""Configuration: where config files live, the typed schema, composition and value checks.

Owns: the config store and policy registry (``store``: ``conf/`` and ``registered_policies``),
the typed settings of every command registered in Hydra's ConfigStore (``schema``), composing
a config the way the CLI does (``compose``; compositions of policies kept between processes:
``memo``), the Hydra application every subcommand runs in
(``app``), and files a setting names (``paths``).

May import: ``memlens.analyze`` and everything below it; never ``runs``, ``learn``,
``present``, ``ui`` or ``cli``.
"""
