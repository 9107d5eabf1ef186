"""The ``oracle:`` settings block, apart from the solver: every command's typed config holds
one, and importing the solver (HiGHS through scipy) costs seconds a run with the oracle off
never needs (issue 34)."""

from __future__ import annotations

from dataclasses import asdict, dataclass

from memlens._util.values import number

METHODS = ("auto", "lp", "segmented", "relaxed")


@dataclass
class OracleSettings:
    """The ``oracle:`` settings block (typed; checked when a command's config is resolved)."""

    enabled: bool = True
    method: str = "auto"  # auto (segmented LP) | lp (one LP per stream) | segmented | relaxed
    lp_max_references: int = 5_000_000  # auto: larger streams use the relaxed bound
    # a stream of more than 4x this many references has its LP cut into segments of about this
    # many, at the check points the fewest gaps cross (memlens.oracle.segments; "segmented":
    # always cut); 0 = one LP per stream
    segment_references: int = 5_000
    n_jobs: int = 1  # processes for a stream's segments (-1: every core); not in the cache key
    milp_max_gaps: int = 150  # streams with at most this many gaps also try the integer optimum
    milp_node_limit: int = 500  # branch-and-bound nodes (deterministic, unlike a time limit)
    # LP re-solves with the cover inequalities the last optimum violates (memlens.oracle.cuts):
    # a tighter, still proven, upper bound where items are a large share of the budget; one
    # round takes a 1M-reference stream under a 1% gap (more: tighter, each one slower)
    cut_rounds: int = 1
    # streams whose LP is small (at most BATCH_MAX_COLUMNS columns) have their LPs solved
    # together, in windows of this many consecutive streams (memlens.oracle.solve: one HiGHS
    # call per window instead of one per stream; the same upper bounds); 0 = each stream alone
    batch_streams: int = 64
    # method auto: a version 1 stream whose integer program takes at most this many states of
    # memlens.oracle.exact's dynamic program (few keep-intervals open at once: short streams)
    # is solved exactly by it, both bounds equal, with no LP; 0 = never (the LP path for all).
    # Kept low so that a stream it gives up on costs little more than its LP (issue 34)
    exact_max_states: int = 1 << 16
    cache: bool = True  # cache results on disk
    cache_dir: str | None = None  # None: $MEMLENS_CACHE/oracle or ~/.cache/memlens/oracle
    # where HiGHS's own output goes (appended; memlens.oracle.quiet): None discards it, so the
    # solver never prints on the terminal; e.g. oracle.solver_log=${hydra:runtime.output_dir}/solver.log
    solver_log: str | None = None

    def __post_init__(self) -> None:
        if self.method not in METHODS:
            raise ValueError(f"oracle.method must be one of {METHODS}, got {self.method!r}")
        for key in (
            "lp_max_references",
            "milp_max_gaps",
            "segment_references",
            "cut_rounds",
            "batch_streams",
            "exact_max_states",
        ):
            number(f"oracle.{key}", getattr(self, key), low=0, integer=True)
        if self.n_jobs != -1 and not (type(self.n_jobs) is int and 1 <= self.n_jobs <= 256):
            raise ValueError(
                f"oracle.n_jobs must be -1 (every core) or 1..256, got {self.n_jobs!r}"
            )
        # HiGHS takes its node limit as a 32-bit integer option
        number("oracle.milp_node_limit", self.milp_node_limit, low=0, high=2**31 - 1, integer=True)

    def solver_key(self) -> dict:
        """The settings that change the numbers (not where they are cached)."""
        d = asdict(self)
        for name in ("enabled", "cache", "cache_dir", "n_jobs", "solver_log"):
            d.pop(name)
        return d
