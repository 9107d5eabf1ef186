"""Stage 4 of the pipeline, analyze: what a replay's result means.

Owns: the metric registry (``registry``) and the metrics declared in it (``metrics``), miss
costs (``costs``), intervals over streams (``stats``), verdict stability (``stability``), a
run's typed report (``report``), the recommendation (``recommend``), the event log
(``eventlog``), its DuckDB tables and queries (``prepared``, ``queries``: the page and the
static report share them), terminal tables (``table``) and the oracle's report section
(``oracle_report``).

May import: ``memlens.simulator``, ``memlens.policy``, ``memlens.kernels``, ``memlens.oracle``,
``memlens.retrieval``, ``memlens.trace``, ``memlens._util``; never ``config``, ``runs``,
``learn``, ``present``, ``ui`` or ``cli``.

Importing any module of this package declares every metric (``metrics`` is imported here), so
that ``registry.declared()`` is always the whole registry.
"""

from memlens.analyze import metrics as _declares_every_metric  # noqa: F401
