"""Bundled workloads (installed as ``memlens.datasets``): data folders and the code that makes them.

Data folders: ``default/`` (the simple archetype's default trace), ``locomo/`` and ``taubench/``
(third-party sources with their licenses, dataset cards and converted traces).  Modules:
``convert_locomo``, ``convert_taubench`` (converters), ``archetypes`` (synthetic generators),
``stats`` (``memlens data stats``), ``datacommands`` (CLI bodies), ``sources`` (source errors).
"""
