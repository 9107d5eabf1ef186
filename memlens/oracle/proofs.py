"""A cheaper proof that a stream's replay is optimal, before HiGHS's integer program (issue 34).

A stream is *open* (``memlens.oracle.solve.open_gaps``) when its best replay scored ``lower``
hits and its LP bound, ``floor`` of the LP after ``cut_rounds`` rounds of cover cuts, is
higher.  ``close_gaps`` then asks HiGHS to prove that no 0/1 schedule plans ``lower + 1``
hits (``bounds.none_reaches``), where it can; on many short streams that proof costs ~20 ms
each, nearly all inside HiGHS's branch and bound.

Most of those proofs are within reach of one more round of cuts: re-solving the stream's
chain LP with the cover inequalities its last optimum still violates
(:data:`ROUNDS_BEYOND` rounds more than the LP stage did) often takes the LP's optimum below
``lower + 1``.  That is a proof of the same fact, and sound for the same reasons as the LP
bound itself (``memlens.oracle.bounds``, ``memlens.oracle.cuts``): every schedule of the
policy class is a feasible 0/1 point of the chain LP, every cover cut holds at every such
point, so the LP's optimum with any set of cuts bounds every schedule's planned hits, which
bound every policy's hits; ``bounds._tolerant_floor`` never rounds a true integer down.  So
where it proves ``hits <= lower``, ``lower`` is the stream's upper bound, exactly what
``none_reaches`` returning True gives, and HiGHS's integer program is not needed.

Where the LP does not prove it, ``close_gaps`` goes on as before (``none_reaches``, then
``milp_schedule``), so the bounds are unchanged wherever HiGHS would have settled the
question as well.  The one case where they could move is a stream whose optimum is ``lower``
but whose proof HiGHS does not finish within its node limit: the LP's proof then gives the
upper bound ``lower`` (proven) where HiGHS's dual bound gave more.  On the golden traces and
the generated many-stream traces it never happens (tests/oracle/test_oracle_proofs.py); every
LP proof there is one HiGHS also finds.

The LPs of a call are solved in batches (``bounds.lp_candidates_many``), one per window of
``batch_streams`` consecutive streams counted from stream 0, as the LP stage batches them:
which streams share a batch then depends on the open streams only, never on how a sweep
spreads them over its workers (``memlens.oracle.batch`` cuts its pieces between windows), so
the proofs, like every number, do not depend on the machine.  Streams with alternatives
(whose LP is not in chain form) and ``batch_streams=0`` (no batching: a lone LP per stream
costs about what HiGHS's proof does) are left to HiGHS.
"""

from __future__ import annotations

import time

from memlens.oracle.bounds import lp_candidates_many
from memlens.oracle.model import GapModel

#: Cut rounds beyond the LP stage's ``cut_rounds``: the first one proves about two thirds of
#: the proofs on generated agent traces at budget 512, more rounds only a few more each.
ROUNDS_BEYOND = 1


def proven_optimal(models: dict[int, GapModel], lowers: dict[int, int], cut_rounds: int,
                   window: int) -> dict[int, float]:  # fmt: skip
    """{stream: seconds} for the streams of ``models`` whose LP with ``cut_rounds +``
    :data:`ROUNDS_BEYOND` rounds of cuts proves that no schedule plans more than
    ``lowers[stream]`` hits (module docstring); seconds: the stream's share of its batch's."""
    if window <= 0:
        return {}
    batches: dict[int, list[int]] = {}
    for s, m in models.items():
        if m.n_gaps > 0 and not m.has_groups:
            batches.setdefault(s // window, []).append(s)
    out = {}
    for streams in batches.values():
        t0 = time.perf_counter()
        solved = lp_candidates_many([models[s] for s in streams], cut_rounds + ROUNDS_BEYOND)
        share = (time.perf_counter() - t0) / len(streams)
        out.update({s: share for s, (bound, _) in zip(streams, solved, strict=True)
                    if bound <= lowers[s]})  # fmt: skip
    return out
