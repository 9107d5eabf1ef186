"""Offline oracle bounds: the best any policy of the simulator's class could do at a budget.

``solve(trace, budget, demand_fetch)`` gives, per stream and summed, ``upper`` (no policy of the
class can score more hits) and ``lower`` (hits of a schedule the simulator replays as
``policy=oracle``).  ``memlens.analyze.oracle_report`` turns them into the ``oracle`` section of
metrics.json and the ``oracle_upper`` / ``regret`` columns.  See docs/concepts/oracle.md.

Importing the package costs no solver: scipy's sparse matrices and HiGHS are imported by the
functions that use them (``bounds``, ``cuts``), so a run with the oracle off, whose config
holds an ``OracleSettings``, never loads them (issue 34).
"""

from memlens.oracle.bounds import OracleSolveError
from memlens.oracle.result import OracleResult, StreamBound
from memlens.oracle.settings import OracleSettings
from memlens.oracle.solve import clear_memo, solve

__all__ = [
    "OracleResult",
    "OracleSettings",
    "OracleSolveError",
    "StreamBound",
    "clear_memo",
    "solve",
]
