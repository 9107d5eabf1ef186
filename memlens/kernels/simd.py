"""Explicit vector loops for Generative Agents' scan (``scantree``), as numba intrinsics.

Why hand-written: LLVM does not vectorise a floating-point minimum or maximum reduction
without fast-math flags (numba's ``fastmath`` did not make it either), and a scalar loop is
bound by the processor's scalar throughput: the three spreads and the lowest score of 318
candidates cost about 450 ns per victim choice, most of Generative Agents' replay at budget
65536.  Here the loops work on vectors of 8 doubles (16 int16 or int32 terms), with four
accumulators in the main loop so no chain of dependent compares limits it; LLVM lowers the
vectors to whatever the processor has (AVX-512, AVX2 or SSE), with the same results
(``tests/kernels/test_kernels_simd.py``; ``tests/kernels/test_kernels_avx2.py`` compiles for AVX2).

Exactness: a score is the reference's expression, ``p0 * (p3 * x0) + p1 * x1 + p2 * x2``,
with IEEE multiplications and additions in that order (no fused multiply-add: the IR carries
no fast-math flag), and the argmin is the least ``(score, recency rank)`` pair, the rank
being unique, so the order in which the lanes meet the items does not change the winner.
Minima and maxima do not depend on order either.  What the vectors cannot match is the
scalar loop's treatment of NaN: :func:`argmin3` reports a NaN score and the caller scans.

:func:`minmax3` and :func:`argmin3` need at least one whole vector (8 items): the last vector
is the one ending at ``stop`` (it may overlap the previous ones, which changes no minimum and
no argmin).  :func:`term_masks` reads a whole vector of terms from each item's first, so the
caller pads the term array.
"""

from __future__ import annotations

import numpy as np
from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic

LANES = 8  # doubles per vector
UNROLL = 4  # independent accumulators in the main loop
TERM_LANES = 16  # terms per vector

_F64, _I64, _I32 = ir.DoubleType(), ir.IntType(64), ir.IntType(32)
_VF, _VI = ir.VectorType(_F64, LANES), ir.VectorType(_I64, LANES)


def _i64(v: int) -> ir.Constant:
    return ir.Constant(_I64, v)


def _load(builder, base, index, vtype):
    """The vector of ``vtype`` at ``base[index]`` (unaligned)."""
    ptr = builder.bitcast(builder.gep(base, [index]), vtype.as_pointer())
    width = 64 if isinstance(vtype.element, ir.DoubleType) else vtype.element.width
    return builder.load(ptr, align=width // 8)  # an element's own alignment


def _splat(builder, value, vtype):
    """A vector of ``vtype`` with ``value`` in every lane."""
    one = builder.insert_element(ir.Constant(vtype, ir.Undefined), value, ir.Constant(_I32, 0))
    zeros = ir.Constant(ir.VectorType(_I32, vtype.count), [0] * vtype.count)
    return builder.shuffle_vector(one, ir.Constant(vtype, ir.Undefined), zeros)


def _data(context, builder, signature, args, k):
    """The data pointer of array argument ``k``."""
    return context.make_array(signature.args[k])(context, builder, args[k]).data


def _blocks(builder, start, stop, body):
    """Call ``body(j, u)`` for the vector blocks of ``[start, stop)``: ``UNROLL`` at a time
    (accumulator ``u``), then one at a time, then the block ending at ``stop``
    (accumulator 0 for both)."""
    n = builder.sub(stop, start)
    step = LANES * UNROLL
    main_end = builder.add(start, builder.mul(builder.sdiv(n, _i64(step)), _i64(step)))
    one_end = builder.add(start, builder.mul(builder.sdiv(n, _i64(LANES)), _i64(LANES)))
    with cgutils.for_range_slice(builder, start, main_end, _i64(step), intp=_I64) as (j, _):
        for u in range(UNROLL):
            body(builder.add(j, _i64(LANES * u)), u)
    with cgutils.for_range_slice(builder, main_end, one_end, _i64(LANES), intp=_I64) as (j, _):
        body(j, 0)
    body(builder.sub(stop, _i64(LANES)), 0)


def _fold(builder, accs, less):
    """One vector tuple out of the accumulators' (``UNROLL`` of them, each a tuple of
    vectors), then one lane: pairwise, so the depth is logarithmic.  ``less(a, b)`` is the
    lane mask where tuple ``a`` beats ``b``; the result is the tuple of lane 0."""
    while len(accs) > 1:
        nxt = []
        for a, b in zip(accs[::2], accs[1::2]):
            m = less(a, b)
            nxt.append(tuple(builder.select(m, x, y) for x, y in zip(a, b)))
        accs = nxt
    acc = accs[0]
    width = acc[0].type.count
    while width > 2:
        width //= 2
        idx = ir.Constant(ir.VectorType(_I32, LANES),
                          [(k + width) % LANES for k in range(LANES)])  # fmt: skip
        moved = tuple(builder.shuffle_vector(x, x, idx) for x in acc)
        m = less(moved, acc)
        acc = tuple(builder.select(m, x, y) for x, y in zip(moved, acc))
    # the last step on scalars: a shuffle here was miscompiled (LLVM 22, AVX-512: the scores
    # of lane 1 were read as lane 0's)
    a = tuple(builder.extract_element(x, ir.Constant(_I32, 0)) for x in acc)
    b = tuple(builder.extract_element(x, ir.Constant(_I32, 1)) for x in acc)
    m = less(b, a)
    return tuple(builder.select(m, x, y) for x, y in zip(b, a))


@intrinsic
def minmax3(typingctx, x0, x1, x2, start, stop):
    """``(lo0, hi0, lo1, hi1, lo2, hi2)``: the least and greatest of ``x0[start:stop]``,
    ``x1[...]`` and ``x2[...]`` (a NaN is skipped: :func:`argmin3` reports it).  Needs
    ``stop - start >= 8``."""
    ret = types.UniTuple(types.float64, 6)
    sig = ret(x0, x1, x2, start, stop)

    def codegen(context, builder, signature, args):
        rows = [_data(context, builder, signature, args, k) for k in range(3)]
        inf = float("inf")
        lo = [[cgutils.alloca_once_value(builder, ir.Constant(_VF, [inf] * LANES))
               for _ in range(UNROLL)] for _ in rows]  # fmt: skip
        hi = [[cgutils.alloca_once_value(builder, ir.Constant(_VF, [-inf] * LANES))
               for _ in range(UNROLL)] for _ in rows]  # fmt: skip

        def body(j, u):
            for r, base in enumerate(rows):
                v = _load(builder, base, j, _VF)
                a, b = builder.load(lo[r][u]), builder.load(hi[r][u])
                builder.store(builder.select(builder.fcmp_ordered("<", v, a), v, a), lo[r][u])
                builder.store(builder.select(builder.fcmp_ordered(">", v, b), v, b), hi[r][u])

        _blocks(builder, args[3], args[4], body)
        out = []
        for r in range(3):
            for acc, op in ((lo[r], "<"), (hi[r], ">")):
                vecs = [(builder.load(a),) for a in acc]
                out.append(_fold(builder, vecs, lambda a, b, op=op: builder.fcmp_ordered(
                    op, a[0], b[0]))[0])  # fmt: skip
        return context.make_tuple(builder, ret, out)

    return sig, codegen


def _lexi_less(builder, s, r, best_s, best_r):
    """``(s, r) < (best_s, best_r)`` lexicographically (vectors or scalars)."""
    tie = builder.and_(builder.fcmp_ordered("==", s, best_s), builder.icmp_signed("<", r, best_r))
    return builder.or_(builder.fcmp_ordered("<", s, best_s), tie)


#: what :func:`argmin3` returns when a score is NaN (the caller then scans as before)
NAN_SCORE = -2


def _argmin3_codegen(unit_p3: bool):
    """:func:`argmin3`'s code; with ``unit_p3`` the product by ``p3`` is left out (the
    caller passes 1.0, and ``1.0 * x`` is ``x`` for every double)."""

    def codegen(context, builder, signature, args):
        d0, d1, d2, dr = (_data(context, builder, signature, args, k) for k in range(4))
        w0, w1, w2, w3 = (_splat(builder, args[k], _VF) for k in (6, 7, 8, 9))
        inf, top = float("inf"), np.iinfo(np.int64).max

        def accumulators(value, vtype):
            return [cgutils.alloca_once_value(builder, ir.Constant(vtype, [value] * LANES))
                    for _ in range(UNROLL)]  # fmt: skip

        bs, br, bj = accumulators(inf, _VF), accumulators(top, _VI), accumulators(0, _VI)
        nan = cgutils.alloca_once_value(builder, ir.Constant(ir.VectorType(ir.IntType(1), LANES),
                                                             [0] * LANES))  # fmt: skip

        def body(j, u):
            a, b, c = (_load(builder, d, j, _VF) for d in (d0, d1, d2))
            r = _load(builder, dr, j, _VI)
            s = builder.fmul(w0, a if unit_p3 else builder.fmul(w3, a))
            s = builder.fadd(builder.fadd(s, builder.fmul(w1, b)), builder.fmul(w2, c))
            builder.store(builder.or_(builder.load(nan), builder.fcmp_unordered("uno", s, s)), nan)
            cs, cr, cj = builder.load(bs[u]), builder.load(br[u]), builder.load(bj[u])
            m = _lexi_less(builder, s, r, cs, cr)
            builder.store(builder.select(m, s, cs), bs[u])
            builder.store(builder.select(m, r, cr), br[u])
            builder.store(builder.select(m, _splat(builder, j, _VI), cj), bj[u])

        _blocks(builder, args[4], args[5], body)
        iota = ir.Constant(_VI, list(range(LANES)))
        vecs = [(builder.load(bs[u]), builder.load(br[u]), builder.add(builder.load(bj[u]), iota))
                for u in range(UNROLL)]  # fmt: skip
        best_k = _fold(builder, vecs, lambda a, b: _lexi_less(builder, a[0], a[1], b[0], b[1]))[2]
        any_nan = builder.bitcast(builder.load(nan), ir.IntType(LANES))
        is_nan = builder.icmp_unsigned("!=", any_nan, ir.Constant(ir.IntType(LANES), 0))
        return builder.select(is_nan, _i64(NAN_SCORE), best_k)

    return codegen


@intrinsic
def argmin3(typingctx, x0, x1, x2, rank, start, stop, p0, p1, p2, p3):
    """The position ``k`` in ``[start, stop)`` of the least ``(p0 * (p3 * x0[k]) + p1 *
    x1[k] + p2 * x2[k], rank[k])``, or ``NAN_SCORE`` when a score is NaN (the vectors'
    compares would skip it, the scalar loop's would not).  Needs ``stop - start >= 8``."""
    sig = types.int64(x0, x1, x2, rank, start, stop, p0, p1, p2, p3)
    return sig, _argmin3_codegen(unit_p3=False)


@intrinsic
def argmin3_unit(typingctx, x0, x1, x2, rank, start, stop, p0, p1, p2, p3):
    """:func:`argmin3` for ``p3 == 1.0`` (its value is not read): one product less."""
    sig = types.int64(x0, x1, x2, rank, start, stop, p0, p1, p2, p3)
    return sig, _argmin3_codegen(unit_p3=True)


#: the most terms an item may have for :func:`term_masks` (more: the caller's scalar path)
MASK_TERMS = 2 * TERM_LANES
#: entries :func:`term_masks` may read past an item's first term (the caller pads the array)
TERM_PAD = MASK_TERMS
#: what :func:`term_masks` writes for an item with more than ``MASK_TERMS`` terms
LONG_ITEM = -1
#: a mask's last bit: ``lowest_bit(mask | LAST_TERM_BIT)`` is a readable (padding) entry
LAST_TERM_BIT = 1 << (MASK_TERMS - 1)


#: the most query terms :func:`term_masks` takes (more: the caller's scalar path)
QUERY_TERMS = 32


def _query_table(builder, dq, qstart, qstop, vtype):
    """The query's terms, each in every lane of a vector of ``vtype``, in a stack table
    (built once per pass, so each compare reads its vector from the first-level cache);
    returns (table, number of terms)."""
    table = cgutils.alloca_once(builder, ir.ArrayType(vtype, QUERY_TERMS))
    nq = builder.sub(qstop, qstart)
    with cgutils.for_range_slice(builder, _i64(0), nq, _i64(1), intp=_I64) as (q, _):
        term = builder.load(builder.gep(dq, [builder.add(qstart, q)]))
        term = builder.trunc(term, vtype.element)
        builder.store(_splat(builder, term, vtype), builder.gep(table, [_i64(0), q]))
    return table, nq


def _matches(builder, table, nq, item):
    """The lanes of ``item`` (16 terms) equal to one of the table's query terms, as an i64
    (one compare per query term: measured faster than unrolled groups padded to 2-4)."""
    mtype = ir.VectorType(ir.IntType(1), TERM_LANES)
    acc = cgutils.alloca_once_value(builder, ir.Constant(mtype, [0] * TERM_LANES))
    builder.store(ir.Constant(mtype, [0] * TERM_LANES), acc)
    with cgutils.for_range_slice(builder, _i64(0), nq, _i64(1), intp=_I64) as (q, _):
        term = builder.load(builder.gep(table, [_i64(0), q]))
        builder.store(builder.or_(builder.load(acc), builder.icmp_signed("==", item, term)), acc)
    return builder.zext(builder.bitcast(builder.load(acc), ir.IntType(TERM_LANES)), _I64)


@intrinsic
def term_masks(typingctx, terms, starts, ends, lo, hi, qterms, qstart, qstop, out, shared):
    """For every slot ``k`` in ``[lo, hi)``, into ``out[k]``: a bit mask of which of its
    item's terms ``terms[starts[k]:ends[k]]`` (int16 or int32; the array readable up to
    ``starts[k] + TERM_PAD``) equal one of the query's ``qterms[qstart:qstop]`` (int64, at
    most ``QUERY_TERMS``), bit ``j`` for term ``starts[k] + j``; ``LONG_ITEM`` for an item
    with more than ``MASK_TERMS`` terms.  The item's terms, 16 to a vector, are compared
    with each query term (held in a table of vectors built once): with int16 terms a vector
    is half as wide, and the compares twice as fast where a processor works on 256 bits at a
    time (AMD Zen 4 runs 512-bit operations in two halves).  Returns how many slots
    have a mask other than 0, their positions listed in ``shared`` (without a branch per
    slot: which items share a term is not predictable)."""
    sig = types.int64(terms, starts, ends, lo, hi, qterms, qstart, qstop, out, shared)

    def codegen(context, builder, signature, args):
        dt, ds, de, dq, do, dl = (_data(context, builder, signature, args, k)
                                  for k in (0, 1, 2, 5, 8, 9))  # fmt: skip
        width = signature.args[0].dtype.bitwidth
        vtype = ir.VectorType(ir.IntType(width), TERM_LANES)
        table, nq = _query_table(builder, dq, args[6], args[7], vtype)
        count = cgutils.alloca_once_value(builder, _i64(0))
        high = cgutils.alloca_once_value(builder, _i64(0))
        with cgutils.for_range_slice(builder, args[3], args[4], _i64(1), intp=_I64) as (k, _):
            start = builder.load(builder.gep(ds, [k]))
            n = builder.sub(builder.load(builder.gep(de, [k])), start)
            low = _matches(builder, table, nq, _load(builder, dt, start, vtype))
            builder.store(_i64(0), high)
            with builder.if_then(builder.icmp_signed(">", n, _i64(TERM_LANES)), likely=False):
                second = _load(builder, dt, builder.add(start, _i64(TERM_LANES)), vtype)
                builder.store(_matches(builder, table, nq, second), high)
            bits = builder.or_(low, builder.shl(builder.load(high), _i64(TERM_LANES)))
            keep = builder.sub(builder.shl(_i64(1), n), _i64(1))
            long_item = builder.icmp_signed(">", n, _i64(MASK_TERMS))
            mask = builder.select(long_item, _i64(LONG_ITEM), builder.and_(bits, keep))
            builder.store(mask, builder.gep(do, [k]))
            c = builder.load(count)
            builder.store(k, builder.gep(dl, [c]))
            shared = builder.zext(builder.icmp_signed("!=", mask, _i64(0)), _I64)
            builder.store(builder.add(c, shared), count)
        return builder.load(count)

    return sig, codegen


@intrinsic
def lowest_bit(typingctx, mask):
    """The index of ``mask``'s lowest set bit (``mask`` not 0)."""
    sig = types.int64(mask)

    def codegen(context, builder, signature, args):
        return builder.cttz(args[0], ir.Constant(ir.IntType(1), 1))

    return sig, codegen
