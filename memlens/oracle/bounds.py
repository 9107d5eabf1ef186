"""Upper bounds on the hits of any policy of the class, from a stream's keep-interval model.

``lp_upper`` (FOO-L style, Berger et al., SIGMETRICS 2018).  Every policy run in the simulator
defines a 0/1 vector ``y`` over the gaps of ``memlens.oracle.model`` (``y[g] = 1`` iff the item
was resident throughout gap ``g``): an unpinned item resident just before a use was resident
since its last anchor, because the class has no other way in; its tokens counted against
``max(0, budget - pinned)`` after every event; and without demand fetch an item resident after a
use was resident before it.  So every policy's hits are ``forced_hits + sum(y)`` for some ``y``
feasible for the integer program, and the linear relaxation's optimum (``y`` in [0, 1]) is at
least that: it is an upper bound, rounded down to an integer because hits are integers.  For
unit sizes with demand fetch the constraint matrix is an interval matrix (totally unimodular),
the LP has an integral optimum, and the bound is exactly Belady's MIN.

The capacity rows are written in differenced form: ``row_k - row_{k-1}`` with a slack per check
point, so each gap variable appears in two rows (+size where it starts, -size where it stops)
instead of one row per check point it covers.  The matrix is then a network matrix (plus one
row per nesting chain, see ``lp_upper``) with O(gaps + points) non-zeros, which HiGHS solves
in seconds at 100k references.

Needs with alternatives (trace format 1.1; ``GapModel.has_groups``): a need is hit when any of
its alternatives' gaps is kept, so the program gets one hit variable per need, ``h_j <= sum of
y over the gaps serving j`` and ``h_j <= 1``, and maximises ``sum h`` (``_group_program``; gap
form, as a chain no longer has a fixed worth).  Every policy's hits are still ``forced_hits +
sum h`` for a feasible integer point, so the relaxation's optimum is still an upper bound.
With groups of one it is the same program as before.

``relaxed_upper`` (PFOO-L style): summing the capacity rows over every post-event state of the
stream gives one knapsack row ``sum size*length*y <= sum capacity``; dropping the nesting rows
only enlarges the feasible set, so the fractional knapsack optimum (greedy by cost) is still an
upper bound.  It is linear-time after a sort, for streams too large for the LP.
"""

from __future__ import annotations

import math

import numba as nb
import numpy as np

from memlens.oracle import rows
from memlens.oracle.cuts import cover_cuts
from memlens.oracle.model import GapModel


class OracleSolveError(RuntimeError):
    """HiGHS did not return an optimal solution."""


def _tolerant_floor(value: float, n_vars: int) -> int:
    # HiGHS's optimum is exact up to its tolerances (1e-7 per row); never round a true k down
    return int(math.floor(value + 1e-6 * max(n_vars, 1) + 1e-9))


def _matrices(model: GapModel):
    """Equality rows (differenced capacity) and nesting rows over variables [y, z]."""
    import scipy.sparse as sp

    G = model.n_gaps
    K = model.points.shape[0]
    size = model.size.astype(np.float64)
    row_at = [model.k_start, model.k_end[model.k_end < K]]
    cols = [np.arange(G), np.flatnonzero(model.k_end < K)]
    vals = [size, -size[model.k_end < K]]
    # slack z_k: +1 in row k, -1 in row k+1
    row_at += [np.arange(K), np.arange(1, K)]
    cols += [G + np.arange(K), G + np.arange(K - 1)]
    vals += [np.ones(K), -np.ones(max(K - 1, 0))]
    A_eq = sp.csr_matrix(
        (np.concatenate(vals), (np.concatenate(row_at), np.concatenate(cols))), shape=(K, G + K)
    )
    cap = model.capacity.astype(np.float64)
    b_eq = np.diff(cap, prepend=0.0)
    nested = np.flatnonzero(model.prev >= 0)
    n = nested.shape[0]
    A_ub = sp.csr_matrix(
        (
            np.concatenate([np.ones(n), -np.ones(n)]),
            (
                np.concatenate([np.arange(n), np.arange(n)]),
                np.concatenate([nested, model.prev[nested]]),
            ),
        ),
        shape=(n, G + K),
    )
    return A_eq, b_eq, A_ub


def _chains(model: GapModel) -> tuple[np.ndarray, np.ndarray]:
    """Per gap: the first gap of its nesting chain, and its position in the chain (1-based)."""
    return _chain_heads(model.prev)


@nb.njit(cache=True)
def _chain_heads(prev):
    G = prev.shape[0]
    head = np.arange(G)
    depth = np.ones(G, np.int64)
    for g in range(G):  # a gap's predecessor always comes first
        p = prev[g]
        if p >= 0:
            head[g] = head[p]
            depth[g] = depth[p] + 1
    return head, depth


def _group_program(model: GapModel) -> tuple[np.ndarray, list, tuple[np.ndarray, np.ndarray]]:
    """Objective, constraints and bounds over ``[y, z, h]`` for a model with alternatives:
    capacity and nesting rows as in ``_matrices``, plus ``h_j - sum y_g <= 0`` per need."""
    import scipy.sparse as sp
    from scipy.optimize import LinearConstraint

    G, K = model.n_gaps, model.points.shape[0]
    needs, row = np.unique(model.link_ref, return_inverse=True)
    H = needs.shape[0]
    A_eq, b_eq, A_ub = _matrices(model)
    A_eq = sp.hstack([A_eq, sp.csr_matrix((K, H))]).tocsr()
    A_ub = sp.hstack([A_ub, sp.csr_matrix((A_ub.shape[0], H))]).tocsr()
    A_link = sp.csr_matrix(
        (np.concatenate([np.ones(H), -np.ones(row.shape[0])]),
         (np.concatenate([np.arange(H), row]), np.concatenate([G + K + np.arange(H),
                                                                model.link_gap]))),
        shape=(H, G + K + H),
    )  # fmt: skip
    cons = [LinearConstraint(A_eq, b_eq, b_eq), LinearConstraint(sp.vstack([A_ub, A_link]),
                                                                  -np.inf, 0.0)]  # fmt: skip
    c = np.concatenate([np.zeros(G + K), -np.ones(H)])
    upper = np.concatenate([np.ones(G), np.full(K, np.inf), np.ones(H)])
    return c, cons, (np.zeros(G + K + H), upper)


def _group_lp_upper(model: GapModel) -> tuple[int, np.ndarray]:
    """``lp_upper`` for a model with alternatives (``_group_program``)."""
    from scipy.optimize import linprog

    G = model.n_gaps
    c, cons, (lower, upper) = _group_program(model)
    eq, ub = cons
    res = linprog(c, A_eq=eq.A, b_eq=eq.lb, A_ub=ub.A, b_ub=ub.ub,
                  bounds=np.stack([lower, upper], axis=1), method="highs")  # fmt: skip
    if res.status != 0:
        raise OracleSolveError(f"stream {model.stream}: LP not solved ({res.message})")
    return model.forced_hits + _tolerant_floor(-res.fun, c.shape[0]), np.clip(res.x[:G], 0, 1)


def lp_upper(model: GapModel, cut_rounds: int = 0) -> tuple[int, np.ndarray]:
    """Integer upper bound on the stream's hits and the LP's fractional gap values
    (``lp_candidates``' bound and its last LP's values)."""
    bound, y = lp_candidates(model, cut_rounds)
    return bound, y[-1]


def lp_candidates(model: GapModel, cut_rounds: int = 0) -> tuple[int, np.ndarray]:
    """Integer upper bound on the stream's hits and the LP's fractional gap values as rows:
    with ``cut_rounds`` > 0 the first (uncut) LP's, then the last LP's, so the rounding can
    keep the better of both (rounding the tighter LP's values is not always better; on a tie
    the uncut LP's schedule, the one ``cut_rounds=0`` gives, is kept); else only the LP's.

    Solved in *chain* form, equivalent to the gap form with nesting rows: for a nesting chain
    g1 -> g2 -> ... (one item between two free starts) the variable ``d_m = y_m - y_{m+1}``
    means "kept from the chain's start through its m-th gap, then dropped": an interval (two
    non-zeros in the differenced capacity rows) worth ``m`` hits, with ``sum_m d_m <= 1`` per
    chain.  That replaces one nesting row per gap by one row per chain and solves about 40%
    faster without demand fetch; with demand fetch every chain has one gap and nothing changes.

    ``cut_rounds`` > 0 re-solves up to that many times with the cover inequalities the last
    optimum violates (``memlens.oracle.cuts``): valid for every schedule, so the optimum stays
    an upper bound, and lower where items are a large share of the budget.
    """
    G = model.n_gaps
    n_points = 2 if cut_rounds > 0 else 1
    if G == 0:
        return model.forced_hits, np.zeros((n_points, 0))
    if model.has_groups:
        bound, y = _group_lp_upper(model)
        return bound, np.tile(y, (n_points, 1))
    lp = ChainLP(model)
    for round_ in range(max(cut_rounds, 0) + 1):
        if round_ > 0 and not lp.add_cuts():
            break
        lp.take(*_solve_blocks([lp])[0])
    return lp.candidates(n_points)


def lp_candidates_many(models: list[GapModel], cut_rounds: int = 0) -> list[tuple[int, np.ndarray]]:
    """:func:`lp_candidates` of several small streams, their LPs solved as one (issue 34).

    Streams share nothing, so the LP of a batch is block-diagonal: its optimum is the sum of
    the blocks' optima and its solution, restricted to a block, is an optimum of that block
    (a better block would make a better whole).  Each stream's bound is the floor of its own
    block's objective, exactly the bound it gets alone (HiGHS's tolerances are per row and per
    column, not per problem); on thousands of short streams one HiGHS call per batch replaces
    one per stream, whose set-up cost (SciPy's checks, the sparse conversions, HiGHS's model
    pass) was most of the oracle's time.  Cut rounds go on for the streams that still have
    violated cuts, again as one LP.  Where a stream's LP has several optima, the batch may
    return another of them than the stream's own solve: the rounding then starts from other
    fractional values, so a lower bound can differ by a few hits either way.  Which streams
    share a batch is fixed by the caller (``memlens.oracle.solve``), never by how a sweep
    spreads streams over its workers, so the numbers do not depend on the machine."""
    n_points = 2 if cut_rounds > 0 else 1
    lps = [ChainLP(m) for m in models]
    for lp in lps:
        if lp.G == 0 or lp.model.has_groups:
            raise ValueError(f"stream {lp.model.stream}: no chain LP to batch")
    active = lps
    for round_ in range(max(cut_rounds, 0) + 1):
        if round_ > 0:
            active = [lp for lp in active if lp.add_cuts()]
        if not active:
            break
        for lp, (x, value) in zip(active, _solve_blocks(active), strict=True):
            lp.take(x, value)
    return [lp.candidates(n_points) for lp in lps]


class ChainLP:
    """One stream's chain-form LP (:func:`lp_candidates`) with its cut rows so far and the
    solutions it has had: the uncut one (``first``) and the last.  Its matrices are raw CSR
    arrays (``memlens.oracle.rows``): on many short streams scipy.sparse's per-matrix checks
    cost more than the arithmetic."""

    def __init__(self, model: GapModel) -> None:
        self.model, self.G = model, model.n_gaps
        self.first = self.x = None
        if self.G == 0 or model.has_groups:
            return
        self.K = model.points.shape[0]
        self.head, depth = _chains(model)
        self.A_eq, self.b_eq, self.A_ub, self.b_ub = _chain_program(model, self.head)
        self.upper = np.concatenate([np.ones(self.G), np.full(self.K, np.inf)])
        self.c = np.concatenate([-depth.astype(np.float64), np.zeros(self.K)])
        self.a = model.k_start[self.head]
        self.n_base = self.b_ub.size

    def add_cuts(self) -> bool:
        """Add the cover cuts the last optimum violates; False when there are none.  Earlier
        cuts the last optimum does not touch are dropped (a smaller LP; any set of valid cuts
        gives a valid bound)."""
        m, G, K, n_base = self.model, self.G, self.K, self.n_base
        cut_rows, rhs = cover_cuts(self.a, m.k_end, self.head, m.size, self.x[:G], m.capacity,
                                   G + K)  # fmt: skip
        if rhs.size == 0:
            return False
        old_cuts = self.A_ub.take(np.arange(n_base, self.A_ub.n_rows))
        tight = old_cuts.matvec(self.x) >= self.b_ub[n_base:] - 1e-7
        keep = np.concatenate([np.arange(n_base), n_base + np.flatnonzero(tight)])
        self.A_ub = rows.vstack([self.A_ub.take(keep), cut_rows])
        self.b_ub = np.concatenate([self.b_ub[keep], rhs])
        return True

    def take(self, x: np.ndarray, objective: float) -> None:
        self.x, self.objective = x, objective
        self.first = x[: self.G] if self.first is None else self.first

    def candidates(self, n_points: int) -> tuple[int, np.ndarray]:
        """The bound (floor of this block's objective) and the gap values of the uncut and
        last LPs (the last only, with one point)."""
        points = [self.first, self.x[: self.G]][-n_points:]
        return self.model.forced_hits + _tolerant_floor(-self.objective, self.G), np.stack(
            [_gap_values(d, self.model.prev) for d in points]
        )


def _solve_blocks(lps: list[ChainLP]) -> list[tuple[np.ndarray, float]]:
    """One HiGHS solve of the LPs side by side; each one's solution and objective (one LP:
    exactly its own call, and HiGHS's objective)."""
    if len(lps) == 1:
        (lp,) = lps
        A_eq, b_eq, A_ub, b_ub, c, upper = lp.A_eq, lp.b_eq, lp.A_ub, lp.b_ub, lp.c, lp.upper
    else:
        A_eq = rows.block_diag([lp.A_eq for lp in lps])
        A_ub = rows.block_diag([lp.A_ub for lp in lps])
        b_eq, b_ub = (
            np.concatenate([lp.b_eq for lp in lps]),
            np.concatenate([lp.b_ub for lp in lps]),
        )
        c, upper = np.concatenate([lp.c for lp in lps]), np.concatenate([lp.upper for lp in lps])
    x, fun, message = highs_lp(c, A_eq.to_scipy(), b_eq, A_ub.to_scipy() if b_ub.size else None,
                               b_ub if b_ub.size else None, upper)  # fmt: skip
    if x is None:
        streams = ", ".join(str(lp.model.stream) for lp in lps[:5])
        raise OracleSolveError(f"stream {streams}: LP not solved ({message})")
    if len(lps) == 1:
        return [(x, fun)]
    ends = np.cumsum([lp.c.size for lp in lps])
    xs = np.split(x, ends[:-1])
    return [(x, float(lp.c @ x)) for lp, x in zip(lps, xs, strict=True)]


def highs_lp(c: np.ndarray, A_eq, b_eq: np.ndarray, A_ub, b_ub: np.ndarray | None,
             upper: np.ndarray) -> tuple[np.ndarray | None, float, str]:  # fmt: skip
    """``scipy.optimize.linprog(c, A_ub, b_ub, A_eq, b_eq, bounds=(0, upper), method="highs")``
    without the Python around HiGHS that the oracle never reads: the solution ``x``, its
    objective and HiGHS's model status (``x`` None unless optimal).

    HiGHS is given the model and options ``linprog`` gives it (scipy's ``_linprog_highs``
    and ``_highs_wrapper``, scipy 1.17: the constraints stacked ``[A_ub; A_eq]`` through the
    same COO and CSC conversions, row bounds ``[-inf, b_ub]`` and ``[b_eq, b_eq]``, infinities
    as HiGHS's, presolve on, dual simplex, no output), so it returns the same solution to
    the last bit (tests/oracle/test_oracle_highs.py checks it against ``linprog`` on every LP
    of many-stream traces).  What it leaves out is the reduced costs' per-column Python
    loop and the result's residuals and marginals: on a batch of 64 short streams (about
    20,000 columns) the loop took longer than building the LP (issue 34)."""
    import scipy.sparse as sp

    try:  # scipy's own binding of HiGHS: private, so checked for, with linprog to fall back on
        from scipy.optimize._highspy import _core as h

        h.HighsLp, h._Highs, h.kHighsInf  # noqa: B018
    except (ImportError, AttributeError):
        return _linprog(c, A_eq, b_eq, A_ub, b_ub, upper)
    n = c.size
    A = sp.csc_array(sp.vstack((sp.coo_array((0, n) if A_ub is None else A_ub, dtype=float,
                                             copy=True),
                                sp.coo_array(A_eq, dtype=float, copy=True))))  # fmt: skip
    b_ub = np.zeros(0) if b_ub is None else np.asarray(b_ub, dtype=np.float64)
    b_eq = np.asarray(b_eq, dtype=np.float64)
    lhs = _highs_inf(np.concatenate((np.full(b_ub.size, -np.inf), b_eq)), h.kHighsInf)
    rhs = _highs_inf(np.concatenate((b_ub, b_eq)), h.kHighsInf)
    lp = h.HighsLp()
    lp.num_col_, lp.num_row_ = n, rhs.size
    lp.a_matrix_.num_col_, lp.a_matrix_.num_row_ = n, rhs.size
    lp.a_matrix_.format_ = h.MatrixFormat.kColwise
    lp.col_cost_ = np.array(c, dtype=np.float64)
    lp.col_lower_ = np.zeros(n)
    lp.col_upper_ = _highs_inf(np.array(upper, dtype=np.float64), h.kHighsInf)
    lp.row_lower_, lp.row_upper_ = lhs, rhs
    lp.a_matrix_.start_, lp.a_matrix_.index_, lp.a_matrix_.value_ = A.indptr, A.indices, A.data
    highs = h._Highs()
    options = h.HighsOptions()
    options.presolve = "on"
    options.highs_debug_level = h.HighsDebugLevel.kHighsDebugLevelNone
    options.log_to_console = False
    options.output_flag = False
    options.simplex_strategy = h.simplex_constants.SimplexStrategy.kSimplexStrategyDual
    if (highs.passOptions(options) == h.HighsStatus.kError
            or highs.passModel(lp) == h.HighsStatus.kError
            or highs.run() == h.HighsStatus.kError):  # fmt: skip
        return None, math.nan, "HiGHS error"
    status = highs.getModelStatus()
    if status != h.HighsModelStatus.kOptimal:
        return None, math.nan, highs.modelStatusToString(status)
    x = np.array(highs.getSolution().col_value)
    return x, float(highs.getInfo().objective_function_value), "optimal"


def _linprog(c, A_eq, b_eq, A_ub, b_ub, upper) -> tuple[np.ndarray | None, float, str]:
    """:func:`highs_lp` through ``linprog`` itself (a scipy whose private HiGHS binding is
    not the one :func:`highs_lp` was written against)."""
    from scipy.optimize import linprog

    res = linprog(c, A_ub=A_ub, b_ub=b_ub, A_eq=A_eq, b_eq=b_eq,
                  bounds=np.column_stack((np.zeros(c.size), upper)), method="highs")  # fmt: skip
    if res.status != 0:
        return None, math.nan, str(res.message)
    return res.x, float(res.fun), "optimal"


def _highs_inf(x: np.ndarray, highs_inf: float) -> np.ndarray:
    """Infinities as HiGHS's (scipy's ``_replace_inf``), in place."""
    infs = np.isinf(x)
    x[infs] = np.sign(x[infs]) * highs_inf
    return x


def _gap_values(d: np.ndarray, prev: np.ndarray) -> np.ndarray:
    """Chain-form values to gap values: ``y_g`` = sum of ``d`` over g and its successors."""
    y = np.clip(d, 0.0, 1.0)
    _add_successors(y, prev)
    return np.clip(y, 0.0, 1.0)


@nb.njit(cache=True)
def _add_successors(y, prev):
    """``y[prev[g]] += y[g]``, last gap first (the same float additions in the same order as
    the Python loop it replaced)."""
    for g in range(y.shape[0] - 1, -1, -1):
        if prev[g] >= 0:
            y[prev[g]] += y[g]


def _chain_program(model: GapModel, head: np.ndarray):
    """``lp_upper``'s rows over ``[d, z]`` (``memlens.oracle.rows``): the differenced capacity
    equalities (a chain interval starts at its chain's first check point) and one
    ``sum d <= 1`` row per chain of two gaps or more, in the order of their first gaps."""
    G, K = model.n_gaps, model.points.shape[0]
    size = model.size.astype(np.float64)
    inner = model.k_end < K
    A_eq = rows.from_coo(
        np.concatenate([model.k_start[head], model.k_end[inner], np.arange(K), np.arange(1, K)]),
        np.concatenate([np.arange(G), np.flatnonzero(inner), G + np.arange(K),
                        G + np.arange(K - 1)]),
        np.concatenate([size, -size[inner], np.ones(K), -np.ones(K - 1)]),
        (K, G + K),
    )  # fmt: skip
    b_eq = np.diff(model.capacity.astype(np.float64), prepend=0.0)
    long_chain = np.bincount(head, minlength=G)[head] > 1
    members = np.flatnonzero(long_chain)
    _, row = np.unique(head[members], return_inverse=True)
    n_rows = int(row.max()) + 1 if members.size else 0
    A_ub = rows.from_coo(row, members, np.ones(members.size), (n_rows, G + K))
    return A_eq, b_eq, A_ub, np.ones(n_rows)


def _integer_program(model: GapModel) -> tuple:
    """The stream's integer program for HiGHS: objective (minimised: minus the planned hits
    beyond ``forced_hits``), constraints, integrality and bounds over ``[y, z]`` (and ``h``,
    one per need, for a model with alternatives)."""
    from scipy.optimize import Bounds, LinearConstraint

    G, K = model.n_gaps, model.points.shape[0]
    if model.has_groups:  # h_j continuous: at an integer y its best value is integral anyway
        c, cons, (lower, upper) = _group_program(model)
        integrality = np.concatenate([np.ones(G), np.zeros(c.shape[0] - G)])
        return c, cons, integrality, Bounds(lower, upper)
    A_eq, b_eq, A_ub = _matrices(model)
    cons = [LinearConstraint(A_eq, b_eq, b_eq)]
    if A_ub.shape[0]:
        cons.append(LinearConstraint(A_ub, -np.inf, 0.0))
    c = np.concatenate([-np.ones(G), np.zeros(K)])
    integrality = np.concatenate([np.ones(G), np.zeros(K)])
    bounds = Bounds(np.zeros(G + K), np.concatenate([np.ones(G), np.full(K, np.inf)]))
    return c, cons, integrality, bounds


def milp_schedule(model: GapModel, node_limit: int) -> tuple[np.ndarray | None, int | None]:
    """The integer program solved by HiGHS's branch and bound within ``node_limit`` nodes.

    Returns the best 0/1 selection found (None if none) and an upper bound on the stream's hits
    from HiGHS's dual bound (valid whether or not the search finished: it bounds every integer
    solution, hence every policy; None if HiGHS gave none).
    """
    from scipy.optimize import milp

    G = model.n_gaps
    if G == 0:
        return np.zeros(0, dtype=bool), model.forced_hits
    c, cons, integrality, bounds = _integer_program(model)
    res = milp(c, constraints=cons, integrality=integrality, bounds=bounds,
               options={"node_limit": int(node_limit)})  # fmt: skip
    dual = getattr(res, "mip_dual_bound", None)
    bound = None
    if dual is not None and np.isfinite(dual):
        bound = model.forced_hits + _tolerant_floor(-float(dual), G)
    return (None if res.x is None else res.x[:G] > 0.5), bound


def none_reaches(model: GapModel, hits: int, node_limit: int) -> bool:
    """Whether HiGHS proves that no 0/1 schedule plans ``hits`` hits or more (so the stream's
    hits are bounded by ``hits - 1``, for every policy: the planned hits bound a policy's).

    A feasibility problem (no objective, one more row: planned hits >= ``hits``), which HiGHS
    usually settles in a fraction of the branch and bound that proves the same bound by
    optimising (``milp_schedule``): where a replayed plan already scores ``hits - 1``, proving
    that nothing plans ``hits`` is all the integer program is needed for.  False when a
    schedule is found or the node limit ends the search first."""
    from scipy.optimize import LinearConstraint, milp

    if model.n_gaps == 0:
        return model.forced_hits < hits
    c, cons, integrality, bounds = _integer_program(model)
    # planned hits beyond forced_hits are -c @ x, integral at an integral y: a margin below
    # the integer keeps HiGHS's feasibility tolerance from admitting hits - 1 + 1e-7
    need = hits - model.forced_hits - 0.5
    cons = [*cons, LinearConstraint(-c[None, :], need, np.inf)]
    res = milp(np.zeros_like(c), constraints=cons, integrality=integrality, bounds=bounds,
               options={"node_limit": int(node_limit)})  # fmt: skip
    return res.status == 2  # HiGHS: the problem is infeasible (proven, not a limit)


def none_reaches_chain(lp: ChainLP, hits: int, node_limit: int) -> bool:
    """:func:`none_reaches` asked of the stream's chain-form program with the cover cuts its
    LP has so far (``ChainLP``, e.g. after ``memlens.oracle.proofs.settle``'s rounds): the
    same question, since the chain form's 0/1 points are the gap form's (``y_g`` = the sum of
    ``d`` over ``g`` and its successors) with the same planned hits, and every cover cut holds
    at every one of them; but HiGHS starts from the cut LP's tighter bound, and on the
    benchmark trace's open streams at budget 512 it answers in about half the time (the same
    answers: tests/oracle/test_oracle_proofs.py)."""
    from scipy.optimize import Bounds, LinearConstraint, milp

    need = hits - lp.model.forced_hits - 0.5  # as in none_reaches: planned hits are integers
    cons = [LinearConstraint(lp.A_eq.to_scipy(), lp.b_eq, lp.b_eq),
            LinearConstraint(-lp.c[None, :], need, np.inf)]  # fmt: skip
    if lp.b_ub.size:
        cons.append(LinearConstraint(lp.A_ub.to_scipy(), -np.inf, lp.b_ub))
    integrality = np.concatenate([np.ones(lp.G), np.zeros(lp.K)])
    res = milp(np.zeros_like(lp.c), constraints=cons, integrality=integrality,
               bounds=Bounds(np.zeros(lp.c.size), lp.upper),
               options={"node_limit": int(node_limit)})  # fmt: skip
    return res.status == 2  # HiGHS: the problem is infeasible (proven, not a limit)


def relaxed_upper(model: GapModel) -> int:
    """Time-averaged-capacity (PFOO-L) upper bound on the stream's hits."""
    G = model.n_gaps
    if G == 0:
        return model.forced_hits
    cost = model.size.astype(np.float64) * np.maximum(model.length, 1)
    order = np.argsort(cost, kind="stable")
    csum = np.cumsum(cost[order])
    cap = float(model.total_capacity)
    full = int(np.searchsorted(csum, cap, side="right"))
    value = float(full)
    if full < G:
        used = csum[full - 1] if full else 0.0
        value += (cap - used) / cost[order[full]]
    # with alternatives a kept gap is worth at most one need, and a need at most one hit
    return min(model.forced_hits + _tolerant_floor(value, 1), model.n_references)
