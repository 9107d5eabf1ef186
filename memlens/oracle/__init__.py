"""Offline oracle bounds: the best any policy of the simulator's class could do at a budget.

``solve(trace, budget, demand_fetch)`` gives, per stream and summed, ``upper`` (no policy of the
class can score more hits) and ``lower`` (hits of a schedule the simulator replays as
``policy=oracle``).  ``memlens.analyze.oracle_report`` turns them into the ``oracle`` section of
metrics.json and the ``oracle_upper`` / ``regret`` columns.  See docs/oracle.md.
"""

from importlib import import_module

#: Where each public name lives; imported when first asked for, so that ``memlens.oracle.settings``
#: (every command's config) does not import the solver, and with it scipy.
_WHERE = {
    "OracleResult": "memlens.oracle.result",
    "OracleSettings": "memlens.oracle.settings",
    "OracleSolveError": "memlens.oracle.bounds",
    "StreamBound": "memlens.oracle.result",
    "clear_memo": "memlens.oracle.solve",
    "solve": "memlens.oracle.solve",
}


def __getattr__(name: str):
    if name in _WHERE:
        return getattr(import_module(_WHERE[name]), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "OracleResult",
    "OracleSettings",
    "OracleSolveError",
    "StreamBound",
    "clear_memo",
    "solve",
]
