"""A cheaper proof that a stream's replay is optimal, before HiGHS's integer program (issue 34).

A stream is *open* (``memlens.oracle.solve.open_gaps``) when its best replay scored ``lower``
hits and its LP bound, ``floor`` of the LP after ``cut_rounds`` rounds of cover cuts, is
higher.  ``close_gaps`` then asks HiGHS to prove that no 0/1 schedule plans ``lower + 1``
hits (``bounds.none_reaches``), where it can; on many short streams that proof costs ~20 ms
each, nearly all inside HiGHS's branch and bound.

Most of those proofs are within reach of a few more rounds of cuts: re-solving the stream's
chain LP with the cover inequalities its last optimum still violates
(up to :data:`ROUNDS_BEYOND` rounds more than the LP stage did) often takes the LP's optimum
below ``lower + 1``.  That is a proof of the same fact, and sound for the same reasons as the LP
bound itself (``memlens.oracle.bounds``, ``memlens.oracle.cuts``): every schedule of the
policy class is a feasible 0/1 point of the chain LP, every cover cut holds at every such
point, so the LP's optimum with any set of cuts bounds every schedule's planned hits, which
bound every policy's hits; ``bounds._tolerant_floor`` never rounds a true integer down.  So
where it proves ``hits <= lower``, ``lower`` is the stream's upper bound, exactly what
``none_reaches`` returning True gives, and HiGHS's integer program is not needed.

Where the LP does not prove it, ``close_gaps`` goes on as before (HiGHS's feasibility
problem, then ``milp_schedule``; the feasibility problem is asked of the stream's last cut LP
in chain form, ``bounds.none_reaches_chain``, the same question), so the bounds are unchanged wherever HiGHS would have settled the
question as well.  The one case where they could move is a stream whose optimum is ``lower``
but whose proof HiGHS does not finish within its node limit: the LP's proof then gives the
upper bound ``lower`` (proven) where HiGHS's dual bound gave more.  On the golden traces and
the generated many-stream traces it never happens (tests/oracle/test_oracle_proofs.py); every
LP proof there is one HiGHS also finds.

The same rounds settle the opposite case too.  After each round, the LP point is rounded
(``memlens.oracle.rounding.round_schedule``) and, where the 0/1 schedule it gives is feasible
(``model.schedule_load_ok``, an exact integer check) and plans more than ``lower`` hits, HiGHS's
feasibility problem (is there a schedule planning ``lower + 1``?) has a solution, so
``none_reaches`` could only answer False: ``close_gaps`` then goes straight to the branch and
bound, which it would have run next anyway, and the result is the same.  A settled stream
leaves the later rounds (a proof is a proof whatever else shares its LP).  On the generated
5,800-stream trace at budget 512 this leaves HiGHS 127 of its 257 feasibility problems
(``benchmarks/bench_oracle_phases.py``).

The LPs of a call are solved in batches (one HiGHS call per round), one per window of
:data:`WINDOWS_PER_PROOF` x ``batch_streams`` consecutive streams counted from stream 0 (the
LP stage's windows, eight at a time: few of their streams are open): which streams share a
batch then depends on the open streams only, never on how a sweep
spreads them over its workers (``memlens.oracle.batch`` cuts its pieces between windows), so
the proofs, like every number, do not depend on the machine.  Streams with alternatives
(whose LP is not in chain form) and ``batch_streams=0`` (no batching: a lone LP per stream
costs about what HiGHS's proof does) are left to HiGHS.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from memlens.oracle.bounds import ChainLP, _gap_values, _solve_blocks, _tolerant_floor
from memlens.oracle.model import GapModel, schedule_load_ok
from memlens.oracle.rounding import round_schedule

#: Cut rounds beyond the LP stage's ``cut_rounds``: on the generated 5,800-stream agent trace
#: at budget 512 (713 open streams) one more round proves 456 of them, three more 520 (six:
#: 522); each round re-solves only the streams no earlier round settled.
ROUNDS_BEYOND = 3

#: LP windows per proof window: the open streams are a few per LP window (about 8 of 64 at
#: budget 512, 2 at 1024 on the generated trace), so eight LP windows' open streams share one
#: LP per round, and a sweep's pieces are cut between proof windows (``memlens.oracle.batch``).
WINDOWS_PER_PROOF = 8


def proof_window(batch_streams: int) -> int:
    """Consecutive streams (counted from stream 0) whose open streams' LPs are solved together
    (0: no batching, the proofs are left to HiGHS)."""
    return max(0, int(batch_streams)) * WINDOWS_PER_PROOF


@dataclass
class Settled:
    """What the LP rounds settled, {stream: seconds (its share of its window's)}: ``proven``,
    the streams whose LP proves that no schedule plans more than their replay scored;
    ``improvable``, those for which a rounded LP point plans more than that."""

    proven: dict[int, float] = field(default_factory=dict)
    improvable: dict[int, float] = field(default_factory=dict)
    #: the last LP (with its cuts) of every other stream the rounds solved, for HiGHS's
    #: feasibility problem (``bounds.none_reaches_chain``)
    lps: dict[int, ChainLP] = field(default_factory=dict)


def settle(models: dict[int, GapModel], lowers: dict[int, int], cut_rounds: int,
           window: int) -> Settled:  # fmt: skip
    """The streams of ``models`` (whose best replay scored ``lowers[stream]``) that the chain
    LP with up to ``cut_rounds +`` :data:`ROUNDS_BEYOND` rounds of cover cuts settles, one
    way or the other (module docstring)."""
    out = Settled()
    if window <= 0:
        return out
    batches: dict[int, list[int]] = {}
    for s, m in models.items():
        if m.n_gaps > 0 and not m.has_groups:
            batches.setdefault(s // window, []).append(s)
    for streams in batches.values():
        t0 = time.perf_counter()
        lps = {s: ChainLP(models[s]) for s in streams}
        found: dict[int, str] = {}
        active = list(streams)
        for round_ in range(cut_rounds + ROUNDS_BEYOND + 1):
            if round_ > 0:
                active = [s for s in active if lps[s].add_cuts()]
            if not active:
                break
            solved = _solve_blocks([lps[s] for s in active])
            for s, (x, value) in zip(active, solved, strict=True):
                lps[s].take(x, value)
                found[s] = _verdict(lps[s], lowers[s])
            active = [s for s in active if not found[s]]
        share = (time.perf_counter() - t0) / len(streams)
        for s, verdict in found.items():
            if verdict:
                getattr(out, verdict)[s] = share
            else:
                out.lps[s] = lps[s]
    return out


def _verdict(lp: ChainLP, lower: int) -> str:
    """``proven`` where the LP's last solve has its floor at most ``lower``, ``improvable``
    where its rounded point is a feasible schedule planning more than ``lower``, else ''."""
    model = lp.model
    if model.forced_hits + _tolerant_floor(-lp.objective, lp.G) <= lower:
        return "proven"
    selected = round_schedule(model, _gap_values(lp.x[: lp.G], model.prev))
    if model.planned_hits(selected) > lower and schedule_load_ok(model, selected):
        return "improvable"
    return ""


def proven_optimal(models: dict[int, GapModel], lowers: dict[int, int], cut_rounds: int,
                   window: int) -> dict[int, float]:  # fmt: skip
    """{stream: seconds} of :func:`settle`'s proven streams."""
    return settle(models, lowers, cut_rounds, window).proven
