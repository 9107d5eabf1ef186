"""A compiled scanner for the common lines of a trace: a block of JSON Lines into arrays.

The bulk parser (``memlens.trace.bulk.parse``) spent most of its time on a Python object per event
(msgspec's structs, then pulling fields out of them).  This module reads a block's bytes
directly, in numba (``nogil``: it can run beside the read-ahead thread), and writes per event
its kind and time, per write and request its numbers and codes, and every string field decoded
into packed columns (``memlens.trace.packed`` layout: bytes end to end plus end offsets), with no
Python object per event.

It recognises one shape of line, the one trace writers produce, and **gives up on the block**
(:meth:`BlockScanner.scan` returns ``False``; the bulk parser's msgspec path takes it) at
anything else, so that what it accepts it decodes exactly as orjson (the exact parser's decoder)
does:

* an object whose first key is ``"event"``: ``"write"`` and ``"request"`` lines are read field
  by field; ``"pin"``, ``"unpin"`` and ``"annotate"`` lines (rare) are only located, and decoded
  by orjson afterwards;
* keys of the event's known fields only, each at most once, written without escapes (an
  unknown field, kept in ``meta`` by the exact parser, or a duplicate key, where the last one
  wins, gives up);
* strings: every JSON escape is decoded (``\\uXXXX`` and surrogate pairs into UTF-8; a lone
  surrogate gives up), raw bytes must be valid UTF-8 (overlong forms, surrogates and code
  points past U+10FFFF give up), control characters give up;
* numbers in the JSON grammar whose value is exact by Clinger's fast path: at most 2**53 as
  digits, times or divided by a power of ten up to 10**22, one correctly rounded operation,
  so the float is bit for bit the correctly rounded one orjson reads; an integer form is the
  integer's float (``-0`` is ``0.0``, as orjson reads the integer 0), a fraction or exponent
  keeps the sign (``-0.0``).  ``tokens`` must be written as an integer; anything else gives up;
* ``needs``: a list of strings; ``meta``: an object, kept as its raw span (nesting at most 32
  deep) and interned: the bulk parser decodes each distinct span once, with orjson, which also
  validates it;
* blanks (space, tab) wherever JSON allows them; nothing after the closing brace but blanks.

Stream names, item types and metas repeat, so each is interned per block in a small hash table
(distinct values, and a code per event).  The checks of a single value that are errors (an
empty id, ``tokens`` out of range, a time or cost past ``MAX_MAGNITUDE``) give up too; the item
types' names and every check across events are left to the bulk parser.

How it is compiled matters as much as what it does: the functions take every buffer as an
argument and index two-dimensional ones in place, and are compiled without numba's reference
counting (``_nrt=False``: they allocate nothing, and counting the references of each array
passed to each call, an atomic operation per array, took more time than the parsing itself);
the hot helpers are inlined (inlining everything made compiling take minutes for little more).
Compiled once per checkout (``cache=True``; ``benchmarks/bench_parse.py``'s ``bulk-cold`` row
times that first load), then loaded from numba's cache.
"""

from __future__ import annotations

import numba
import numpy as np

from memlens.trace.limits import MAX_MAGNITUDE, MAX_TOKENS
from memlens.trace.model import ANNOTATE, PIN, REQUEST, UNPIN, WRITE

# String columns of a scanned block (rows of ``strings`` / ``ends``): appended per event,
# except STREAMS and TYPES, which hold each distinct value once.
ITEM_ID, ITEM_TEXT, ITEM_TASK, ITEM_SESSION, REQ_ID, REQ_TEXT, NEED_ID, STREAMS, TYPES = range(9)
N_STRINGS = 9
# Columns of ``writes`` (int64 per write) and ``requests`` (int64 per request), and ``targets``.
W_LINE, W_TOKENS, W_TYPE, W_STREAM, W_META = range(5)
R_LINE, R_STREAM, R_META, R_NEEDS = range(4)
T_LINE, T_START, T_END = range(3)
# Entries of ``counts``.
C_LINES, C_WRITES, C_REQUESTS, C_TARGETS, C_METAS = range(5)
# Rows of ``fill``: each string column's number of rows and of bytes.
ROWS, SIZE = 0, 1
# Interning hash tables.
H_STREAM, H_TYPE, H_META = 0, 1, 2

#: Lines shorter than this (line break included) on average give up: the buffers hold that many
#: lines per byte (a write or request line takes 40 bytes at least, ``{"event":"pin"}`` 15).
MIN_LINE = 24
MAX_META_DEPTH = 32  # deeper metas give up (the exact parser's limit is far above)
_EXACT = 2**53  # the largest digits Clinger's fast path takes
_POW10 = np.array([10.0**k for k in range(23)])  # exact in float64


def _pack(word: bytes) -> int:
    """An ASCII word of up to 8 bytes as one integer (the scanner compares keys this way)."""
    return int.from_bytes(word, "little")


_EVENT = _pack(b"event")
_K_WRITE, _K_REQUEST = _pack(b"write"), _pack(b"request")
_K_PIN, _K_UNPIN, _K_ANNOTATE = _pack(b"pin"), _pack(b"unpin"), _pack(b"annotate")
# Field codes (bits of the mask of fields seen) and their packed keys.
F_ID, F_TOKENS, F_TYPE, F_STREAM, F_T, F_TEXT, F_COST, F_TASK, F_SESSION, F_META, F_NEEDS = range(
    11
)
_K_ID, _K_TOKENS, _K_TYPE, _K_STREAM = (
    _pack(b"id"),
    _pack(b"tokens"),
    _pack(b"type"),
    _pack(b"stream"),
)
_K_T, _K_TEXT, _K_COST, _K_TASK = _pack(b"t"), _pack(b"text"), _pack(b"cost"), _pack(b"task")
_K_SESSION, _K_META, _K_NEEDS = _pack(b"session"), _pack(b"meta"), _pack(b"needs")
_WRITE_KEYS = sum(1 << f for f in range(F_NEEDS))  # every field but needs
_REQUEST_KEYS = sum(1 << f for f in (F_ID, F_STREAM, F_T, F_TEXT, F_META, F_NEEDS))
_WRITE_NEEDS = (1 << F_ID) | (1 << F_TOKENS) | (1 << F_TYPE)
_REQUEST_NEEDS = (1 << F_ID) | (1 << F_NEEDS)


# ------------------------------------------------------------------------- lexical pieces
@numba.njit(cache=True, nogil=True, _nrt=False, inline="always")
def _blanks(buf, i, end):
    """The first position from ``i`` that is not a space or a tab."""
    while i < end and (buf[i] == 0x20 or buf[i] == 0x09):
        i += 1
    return i


@numba.njit(cache=True, nogil=True, _nrt=False, inline="always")
def _word(buf, i, end):
    """``(packed word, position after it)`` for the string starting at ``buf[i]`` (a quote),
    if it is a plain ASCII word of 1 to 8 bytes; ``(-1, -1)`` otherwise."""
    if i >= end or buf[i] != 0x22:
        return -1, -1
    word = 0
    k = 0
    i += 1
    while i < end:
        c = buf[i]
        if c == 0x22:
            return (word, i + 1) if k > 0 else (-1, -1)
        if c == 0x5C or c < 0x20 or c >= 0x80 or k == 8:
            return -1, -1
        word |= np.int64(c) << (8 * k)
        k += 1
        i += 1
    return -1, -1


@numba.njit(cache=True, nogil=True, _nrt=False)
def _utf8_length(buf, i, end):
    """The length of the valid UTF-8 sequence at ``buf[i]`` (a non-ASCII byte), 0 if invalid
    (overlong forms, surrogates and code points past U+10FFFF are invalid, as for orjson)."""
    c = buf[i]
    lo, hi = 0x80, 0xBF
    if 0xC2 <= c <= 0xDF:
        n = 2
    elif 0xE0 <= c <= 0xEF:
        n = 3
        if c == 0xE0:
            lo = 0xA0
        elif c == 0xED:
            hi = 0x9F
    elif 0xF0 <= c <= 0xF4:
        n = 4
        if c == 0xF0:
            lo = 0x90
        elif c == 0xF4:
            hi = 0x8F
    else:
        return 0
    if i + n > end or not lo <= buf[i + 1] <= hi:
        return 0
    for k in range(2, n):
        if not 0x80 <= buf[i + k] <= 0xBF:
            return 0
    return n


@numba.njit(cache=True, nogil=True, _nrt=False)
def _hex4(buf, i, end):
    """The value of the four hex digits at ``buf[i]``, -1 if they are not."""
    if i + 4 > end:
        return -1
    value = 0
    for k in range(4):
        c = buf[i + k]
        if 0x30 <= c <= 0x39:
            d = c - 0x30
        elif 0x61 <= c <= 0x66:
            d = c - 0x57
        elif 0x41 <= c <= 0x46:
            d = c - 0x37
        else:
            return -1
        value = value * 16 + d
    return value


@numba.njit(cache=True, nogil=True, _nrt=False)
def _put_code_point(cp, out, col, o):
    """Write code point ``cp`` as UTF-8 at ``out[col, o]``; the position after it."""
    if cp < 0x80:
        out[col, o] = cp
        return o + 1
    if cp < 0x800:
        out[col, o] = 0xC0 | (cp >> 6)
        out[col, o + 1] = 0x80 | (cp & 0x3F)
        return o + 2
    if cp < 0x10000:
        out[col, o] = 0xE0 | (cp >> 12)
        out[col, o + 1] = 0x80 | ((cp >> 6) & 0x3F)
        out[col, o + 2] = 0x80 | (cp & 0x3F)
        return o + 3
    out[col, o] = 0xF0 | (cp >> 18)
    out[col, o + 1] = 0x80 | ((cp >> 12) & 0x3F)
    out[col, o + 2] = 0x80 | ((cp >> 6) & 0x3F)
    out[col, o + 3] = 0x80 | (cp & 0x3F)
    return o + 4


_SIMPLE_ESCAPES = np.zeros(128, np.uint8)  # escape letter -> the byte it stands for (0: none)
for _letter, _byte in zip(b'"\\/bfnrt', b'"\\/\b\f\n\r\t'):
    _SIMPLE_ESCAPES[_letter] = _byte


@numba.njit(cache=True, nogil=True, _nrt=False)
def _escape(buf, i, end, out, col, o):
    """Decode the escape whose letter is at ``buf[i]`` (after the backslash) into ``out[col, o]``:
    ``(position after it, position after the output)``, ``i = -1`` if it is not valid or is
    a lone surrogate."""
    if i >= end or buf[i] >= 128:
        return -1, o
    c = buf[i]
    if c != 0x75:  # not \u
        byte = _SIMPLE_ESCAPES[c]
        if byte == 0:
            return -1, o
        out[col, o] = byte
        return i + 1, o + 1
    cp = _hex4(buf, i + 1, end)
    i += 5
    if 0xDC00 <= cp <= 0xDFFF or cp < 0:
        return -1, o
    if 0xD800 <= cp <= 0xDBFF:  # a high surrogate: a low one must follow
        if i + 2 > end or buf[i] != 0x5C or buf[i + 1] != 0x75:
            return -1, o
        low = _hex4(buf, i + 2, end)
        if not 0xDC00 <= low <= 0xDFFF:
            return -1, o
        cp = 0x10000 + ((cp - 0xD800) << 10) + (low - 0xDC00)
        i += 6
    return i, _put_code_point(cp, out, col, o)


_PLAIN = np.ones(256, np.bool_)  # bytes a string holds as they are (not ", \\, controls, non-ASCII)
_PLAIN[:0x20] = _PLAIN[0x22] = _PLAIN[0x5C] = _PLAIN[0x80:] = False


@numba.njit(cache=True, nogil=True, _nrt=False)
def _special(buf, i, end, out, col, o):
    """Decode the escape or the UTF-8 sequence at ``buf[i]`` into ``out[col, o]``: ``(position after
    it, position after the output)``, ``i = -1`` if it is neither (or not valid)."""
    if i >= end:
        return -1, o
    c = buf[i]
    if c == 0x5C:
        return _escape(buf, i + 1, end, out, col, o)
    if c < 0x80:
        return -1, o  # a control character (or a quote: the caller's case)
    n = _utf8_length(buf, i, end)
    if n == 0:
        return -1, o
    for k in range(n):
        out[col, o + k] = buf[i + k]
    return i + n, o + n


@numba.njit(cache=True, nogil=True, _nrt=False, inline="always")
def _string(buf, i, end, out, col, o):
    """Decode the JSON string whose opening quote is at ``buf[i]`` into ``out[col, o]``:
    ``(position after the closing quote, position after the output)``, or ``i = -1``.
    (Inlined, and one byte a step: a separate copy loop costs more on short strings.)"""
    if i >= end or buf[i] != 0x22:
        return -1, o
    i += 1
    while i < end:
        c = buf[i]
        if _PLAIN[c]:
            out[col, o] = c
            i += 1
            o += 1
        elif c == 0x22:
            return i + 1, o
        elif c == 0x5C and i + 1 < end and buf[i + 1] < 128 and _SIMPLE_ESCAPES[buf[i + 1]]:
            out[col, o] = _SIMPLE_ESCAPES[buf[i + 1]]  # (\" and the like, inline: frequent)
            i += 2
            o += 1
        else:
            i, o = _special(buf, i, end, out, col, o)
            if i < 0:
                return -1, o
    return -1, o


@numba.njit(cache=True, nogil=True, _nrt=False, inline="always")
def _digits(buf, i, end, m):
    """Read decimal digits from ``buf[i]`` onto ``m``: ``(position after them, m, digits read)``;
    ``m = -1`` once it passes 2**53."""
    start = i
    while i < end and 0x30 <= buf[i] <= 0x39:
        if m >= 0:
            m = m * 10 + (buf[i] - 0x30)
            if m > _EXACT:
                m = -1
        i += 1
    return i, m, i - start


@numba.njit(cache=True, nogil=True, _nrt=False, inline="always")
def _number(buf, i, end):
    """The JSON number at ``buf[i]``: ``(position after it, value, the integer if it is a
    non-negative integer form else -1)``; position -1 if it is not a number or its value is not
    exact by Clinger's fast path."""
    neg = False
    if i < end and buf[i] == 0x2D:
        neg = True
        i += 1
    if i >= end or not 0x30 <= buf[i] <= 0x39:
        return -1, 0.0, -1
    if buf[i] == 0x30 and i + 1 < end and 0x30 <= buf[i + 1] <= 0x39:
        return -1, 0.0, -1  # a leading zero
    i, m, _ = _digits(buf, i, end, 0)
    integer = m
    e10 = 0
    if i < end and buf[i] == 0x2E:  # a fraction
        i, m, n = _digits(buf, i + 1, end, m)
        if n == 0:
            return -1, 0.0, -1
        e10 -= n
        integer = -1
    if i < end and (buf[i] == 0x65 or buf[i] == 0x45):  # an exponent
        i += 1
        sign = 1
        if i < end and (buf[i] == 0x2B or buf[i] == 0x2D):
            sign = 1 - 2 * (buf[i] == 0x2D)
            i += 1
        i, e, n = _digits(buf, i, end, 0)
        if n == 0 or e < 0:
            return -1, 0.0, -1
        e10 += sign * e
        integer = -1
    if m < 0 or e10 < -22 or e10 > 22:
        return -1, 0.0, -1
    if integer >= 0:  # the integer's float; -0 is the integer 0
        return i, (-float(m) if neg and m else float(m)), (-1 if neg else integer)
    value = float(m) * _POW10[e10] if e10 >= 0 else float(m) / _POW10[-e10]
    return i, -value if neg else value, -1


@numba.njit(cache=True, nogil=True, _nrt=False, inline="always")
def _skip_object(buf, i, end):
    """The position after the object starting at ``buf[i]``, found by its brackets and strings
    only (orjson checks the text afterwards); -1 if it does not end on this line or nests more
    than ``MAX_META_DEPTH`` deep."""
    depth = 0
    while i < end:
        c = buf[i]
        if c == 0x22:
            i += 1
            while i < end and buf[i] != 0x22 and buf[i] != 0x0A:
                i += 2 if buf[i] == 0x5C else 1
            if i >= end or buf[i] != 0x22:
                return -1
        elif c == 0x7B or c == 0x5B:
            depth += 1
            if depth > MAX_META_DEPTH:
                return -1
        elif c == 0x7D or c == 0x5D:
            depth -= 1
            if depth == 0:
                return i + 1
        elif c == 0x0A:
            return -1
        i += 1
    return -1


# ------------------------------------------------------------------------------ interning
# (Two-dimensional buffers are indexed in place, never sliced into rows: numba counts the
# references of every view it makes, an atomic operation that cost more than the parsing.)
@numba.njit(cache=True, nogil=True, _nrt=False, inline="always")
def _intern_string(strings, ends, fill, col, start, stop, tables, hashes, h_row):
    """The code of the value just decoded at the end of column ``col`` (``start:stop``) among
    the column's distinct values, kept as a new one if it is new."""
    h = np.int64(-3750763034362895579)
    for k in range(start, stop):
        h = (h ^ strings[col, k]) * 1099511628211
    mask = tables.shape[1] - 1
    slot = h & mask
    while tables[h_row, slot] >= 0:
        k = tables[h_row, slot]
        a = ends[col, k - 1] if k > 0 else 0
        n = ends[col, k] - a
        if hashes[h_row, k] == h and n == stop - start:
            same = True
            for m in range(n):
                if strings[col, a + m] != strings[col, start + m]:
                    same = False
                    break
            if same:
                return k
        slot = (slot + 1) & mask
    k = fill[ROWS, col]
    tables[h_row, slot] = k
    hashes[h_row, k] = h
    ends[col, k] = stop
    fill[ROWS, col] = k + 1
    fill[SIZE, col] = stop
    return k


@numba.njit(cache=True, nogil=True, _nrt=False, inline="always")
def _intern_span(buf, start, stop, tables, hashes, metas, counts):
    """The code of the raw text ``buf[start:stop]`` among the block's distinct metas."""
    h = np.int64(-3750763034362895579)
    for k in range(start, stop):
        h = (h ^ buf[k]) * 1099511628211
    mask = tables.shape[1] - 1
    slot = h & mask
    while tables[H_META, slot] >= 0:
        k = tables[H_META, slot]
        a, n = metas[k, 0], metas[k, 1] - metas[k, 0]
        if hashes[H_META, k] == h and n == stop - start:
            same = True
            for m in range(n):
                if buf[a + m] != buf[start + m]:
                    same = False
                    break
            if same:
                return k
        slot = (slot + 1) & mask
    k = counts[C_METAS]
    tables[H_META, slot] = k
    hashes[H_META, k] = h
    metas[k, 0], metas[k, 1] = start, stop
    counts[C_METAS] = k + 1
    return k


# ---------------------------------------------------------------------------------- fields
@numba.njit(cache=True, nogil=True, _nrt=False, inline="always")
def _append(buf, i, end, strings, ends, fill, col):
    """Decode the string at ``buf[i]`` as column ``col``'s next row; the position after it."""
    i, o = _string(buf, i, end, strings, col, fill[SIZE, col])
    if i >= 0:
        row = fill[ROWS, col]
        ends[col, row] = o
        fill[ROWS, col] = row + 1
        fill[SIZE, col] = o
    return i


@numba.njit(cache=True, nogil=True, _nrt=False, inline="always")
def _interned(buf, i, end, strings, ends, fill, col, tables, hashes, h_row):
    """``(position after the string at buf[i], its code among column col's values)``."""
    start = fill[SIZE, col]
    i, stop = _string(buf, i, end, strings, col, start)
    if i < 0:
        return -1, -1
    return i, _intern_string(strings, ends, fill, col, start, stop, tables, hashes, h_row)


@numba.njit(cache=True, nogil=True, _nrt=False, inline="always")
def _needs(buf, i, end, strings, ends, fill):
    """``(position after the list of ids at buf[i], how many)``, each appended to NEED_ID."""
    if i >= end or buf[i] != 0x5B:
        return -1, 0
    i = _blanks(buf, i + 1, end)
    if i < end and buf[i] == 0x5D:
        return i + 1, 0
    count = 0
    while True:
        i = _append(buf, i, end, strings, ends, fill, NEED_ID)
        if i < 0:
            return -1, 0
        count += 1
        i = _blanks(buf, i, end)
        if i >= end or (buf[i] != 0x5D and buf[i] != 0x2C):
            return -1, 0
        if buf[i] == 0x5D:
            return i + 1, count
        i = _blanks(buf, i + 1, end)


@numba.njit(cache=True, nogil=True, _nrt=False, inline="always")
def _field_code(word):
    """The field a packed key names (``F_*``), -1 for any other key."""
    codes = (_K_ID, _K_TOKENS, _K_TYPE, _K_STREAM, _K_T, _K_TEXT, _K_COST, _K_TASK,
             _K_SESSION, _K_META, _K_NEEDS)  # fmt: skip
    for f in range(len(codes)):
        if codes[f] == word:
            return f
    return -1


@numba.njit(cache=True, nogil=True, _nrt=False, inline="always")
def _meta(buf, i, end, tables, hashes, metas, counts):
    """``(position after the object at buf[i], its code among the block's metas)``."""
    if i >= end or buf[i] != 0x7B:
        return -1, -1
    stop = _skip_object(buf, i, end)
    if stop < 0:
        return -1, -1
    return stop, _intern_span(buf, i, stop, tables, hashes, metas, counts)


@numba.njit(cache=True, nogil=True, _nrt=False, inline="always")
def _field(f, buf, i, end, line, is_write, ev_t, writes, costs, requests, strings, ends, fill,
           tables, hashes, metas, counts):  # fmt: skip
    """Read the value of field ``f`` at ``buf[i]`` into the current write or request; the
    position after it, -1 to give up."""
    w, r = counts[C_WRITES], counts[C_REQUESTS]
    code = 0
    if f == F_ID or f == F_TEXT or f == F_TASK or f == F_SESSION:
        col = ITEM_ID if f == F_ID else ITEM_TEXT if f == F_TEXT else (
            ITEM_TASK if f == F_TASK else ITEM_SESSION)  # fmt: skip
        if not is_write:
            col = REQ_ID if f == F_ID else REQ_TEXT
        before = fill[SIZE, col]
        i = _append(buf, i, end, strings, ends, fill, col)
        return -1 if f == F_ID and fill[SIZE, col] == before else i  # an empty id: an error
    if f == F_T or f == F_COST or f == F_TOKENS:
        i, value, integer = _number(buf, i, end)
        if abs(value) > MAX_MAGNITUDE:
            return -1  # an error
        if f == F_T:
            ev_t[line] = value
        elif f == F_COST:
            costs[w] = value
        elif integer <= 0 or integer > MAX_TOKENS:
            return -1  # tokens not written as a plain integer, or out of range (an error)
        else:
            writes[w, W_TOKENS] = integer
        return i
    if f == F_NEEDS:
        i, count = _needs(buf, i, end, strings, ends, fill)
        requests[r, R_NEEDS] = count
        return i
    if f == F_META:
        i, code = _meta(buf, i, end, tables, hashes, metas, counts)
    else:
        col, h_row = (TYPES, H_TYPE) if f == F_TYPE else (STREAMS, H_STREAM)
        i, code = _interned(buf, i, end, strings, ends, fill, col, tables, hashes, h_row)
    column = (W_META if is_write else R_META) if f == F_META else W_TYPE if f == F_TYPE else (
        W_STREAM if is_write else R_STREAM)  # fmt: skip
    if is_write:
        writes[w, column] = code
    else:
        requests[r, column] = code
    return i


@numba.njit(cache=True, nogil=True, _nrt=False, inline="always")
def _fields(buf, i, end, line, is_write, ev_t, writes, costs, requests, strings, ends, fill,
            tables, hashes, metas, counts):  # fmt: skip
    """Read the fields after ``"event"`` of a write or request line: ``(position of the line's
    end, mask of the fields seen)``, position -1 to give up."""
    allowed = _WRITE_KEYS if is_write else _REQUEST_KEYS
    seen = 0
    while True:
        i = _blanks(buf, i, end)
        if i >= end or (buf[i] != 0x2C and buf[i] != 0x7D):
            return -1, 0
        if buf[i] == 0x7D:  # the end of the object: only blanks may follow
            i = _blanks(buf, i + 1, end)
            return (i if i >= end or buf[i] == 0x0A else -1), seen
        word, i = _word(buf, _blanks(buf, i + 1, end), end)
        f = _field_code(word)
        if f < 0 or not (allowed >> f) & 1 or (seen >> f) & 1:
            return -1, 0  # a key it does not know (or escaped), or a duplicate
        seen |= 1 << f
        i = _blanks(buf, i, end)
        if i >= end or buf[i] != 0x3A:
            return -1, 0
        i = _field(f, buf, _blanks(buf, i + 1, end), end, line, is_write, ev_t, writes, costs,
                   requests, strings, ends, fill, tables, hashes, metas, counts)  # fmt: skip
        if i < 0:
            return -1, 0


@numba.njit(cache=True, nogil=True, _nrt=False, inline="always")
def _empty(ends, fill, col):
    """Append an empty string to column ``col`` (a field left out)."""
    row = fill[ROWS, col]
    ends[col, row] = fill[SIZE, col]
    fill[ROWS, col] = row + 1


@numba.njit(cache=True, nogil=True, _nrt=False, inline="always")
def _finish(seen, line, is_write, ev_t, writes, costs, requests, strings, ends, fill, tables,
            hashes, counts):  # fmt: skip
    """Complete the current write or request with the exact parser's defaults for the fields
    left out (``t``: NaN, which marks it missing); False if a required one is missing."""
    required = _WRITE_NEEDS if is_write else _REQUEST_NEEDS
    if seen & required != required:
        return False
    if not (seen >> F_T) & 1:
        ev_t[line] = np.nan
    stream = -1
    if not (seen >> F_STREAM) & 1:  # the stream named ""
        start = fill[SIZE, STREAMS]
        stream = _intern_string(strings, ends, fill, STREAMS, start, start, tables, hashes,
                                H_STREAM)  # fmt: skip
    if not (seen >> F_TEXT) & 1:
        _empty(ends, fill, ITEM_TEXT if is_write else REQ_TEXT)
    if not is_write:
        r = counts[C_REQUESTS]
        requests[r, R_LINE] = line
        if not (seen >> F_META) & 1:
            requests[r, R_META] = -1
        if stream >= 0:
            requests[r, R_STREAM] = stream
        counts[C_REQUESTS] = r + 1
        return True
    w = counts[C_WRITES]
    writes[w, W_LINE] = line
    if not (seen >> F_META) & 1:
        writes[w, W_META] = -1
    if stream >= 0:
        writes[w, W_STREAM] = stream
    if not (seen >> F_COST) & 1:
        costs[w] = 0.0
    if not (seen >> F_TASK) & 1:
        _empty(ends, fill, ITEM_TASK)
    if not (seen >> F_SESSION) & 1:
        _empty(ends, fill, ITEM_SESSION)
    counts[C_WRITES] = w + 1
    return True


@numba.njit(cache=True, nogil=True, _nrt=False)
def _target(buf, i, end, start, line, targets, counts):
    """Record a pin, unpin or annotate line (decoded later by orjson); the line's end."""
    while i < end and buf[i] != 0x0A:
        i += 1
    k = counts[C_TARGETS]
    targets[k, T_LINE], targets[k, T_START], targets[k, T_END] = line, start, i
    counts[C_TARGETS] = k + 1
    return i


@numba.njit(cache=True, nogil=True, _nrt=False, inline="always")
def _line(buf, i, end, line, ev_kind, ev_t, writes, costs, requests, targets, strings, ends,
          fill, tables, hashes, metas, counts):  # fmt: skip
    """Read the line starting at ``buf[i]``: the position of its end, -1 to give up."""
    start = i
    i = _blanks(buf, i, end)
    if i >= end or buf[i] != 0x7B:
        return -1
    word, i = _word(buf, _blanks(buf, i + 1, end), end)
    i = _blanks(buf, i, end)
    if word != _EVENT or i < 0 or i >= end or buf[i] != 0x3A:
        return -1
    kind, i = _word(buf, _blanks(buf, i + 1, end), end)
    if kind == _K_WRITE or kind == _K_REQUEST:
        is_write = kind == _K_WRITE
        ev_kind[line] = WRITE if is_write else REQUEST
        i, seen = _fields(buf, i, end, line, is_write, ev_t, writes, costs, requests, strings,
                          ends, fill, tables, hashes, metas, counts)  # fmt: skip
        if i < 0 or not _finish(seen, line, is_write, ev_t, writes, costs, requests, strings,
                                ends, fill, tables, hashes, counts):  # fmt: skip
            return -1
        return i
    code = PIN if kind == _K_PIN else UNPIN if kind == _K_UNPIN else ANNOTATE
    if kind != _K_PIN and kind != _K_UNPIN and kind != _K_ANNOTATE:
        return -1
    ev_kind[line], ev_t[line] = code, np.nan
    return _target(buf, i, end, start, line, targets, counts)


@numba.njit(cache=True, nogil=True, _nrt=False)
def scan_block(buf, ev_kind, ev_t, writes, costs, requests, targets, strings, ends, fill,
               tables, hashes, metas, counts):  # fmt: skip
    """Read every line of ``buf`` (whole lines, no final line break) into the arrays (see
    :class:`BlockScanner`); False as soon as one is not of the shape this module reads."""
    end = buf.shape[0]
    counts[:] = 0
    fill[:] = 0
    tables[:] = -1
    i = line = 0
    while True:
        if line >= ev_kind.shape[0]:
            return False  # more lines than the buffers hold (short lines: not the usual shape)
        i = _line(buf, i, end, line, ev_kind, ev_t, writes, costs, requests, targets, strings,
                  ends, fill, tables, hashes, metas, counts)  # fmt: skip
        if i < 0:
            return False
        line += 1
        if i >= end:
            counts[C_LINES] = line
            return True
        i += 1  # past the line break


class BlockScanner:
    """Buffers for :func:`scan_block`, grown as blocks need and reused from block to block
    (so what a block's reader keeps must be copied out before the next scan):

    * ``ev_kind`` (int8), ``ev_t`` (float64, NaN: not given; pins' times are left to their
      decoding) per line;
    * ``writes`` (int64: ``W_LINE``, ``W_TOKENS``, ``W_TYPE`` and ``W_STREAM`` codes,
      ``W_META`` code or -1) and ``costs`` (float64) per write; ``requests`` (``R_LINE``,
      ``R_STREAM``, ``R_META``, ``R_NEEDS``: how many ids) per request; ``targets``
      (``T_LINE``, and the line's ``T_START:T_END`` in the block) per pin, unpin or annotate;
    * ``strings[col, :fill[SIZE, col]]`` with ``ends[col, :fill[ROWS, col]]`` (each row's end
      offset): the string columns (``ITEM_ID`` ...); STREAMS and TYPES hold each distinct value
      once, in order of first appearance, and the codes above index them;
    * ``metas[k]``: the ``(start, stop)`` in the block of the k-th distinct meta text;
    * ``counts``: lines, writes, requests, targets, distinct metas.
    """

    def __init__(self):
        self.capacity = (-1, -1)

    def _reserve(self, size: int, lines: int) -> None:
        if size <= self.capacity[0] and lines <= self.capacity[1]:
            return
        size, lines = max(size, self.capacity[0]), max(lines, self.capacity[1])
        self.capacity = (size, lines)
        rows = max(lines, size // 3 + 2)  # each id in needs takes 3 bytes at least: "",
        table = 1 << max(4, (2 * lines).bit_length())
        self.ev_kind, self.ev_t = np.empty(lines, np.int8), np.empty(lines, np.float64)
        self.writes, self.costs = np.empty((lines, 5), np.int64), np.empty(lines, np.float64)
        self.requests, self.targets = np.empty((lines, 4), np.int64), np.empty((lines, 3), np.int64)
        self.strings = np.empty((N_STRINGS, size), np.uint8)
        self.ends = np.empty((N_STRINGS, rows), np.int64)
        self.fill = np.zeros((2, N_STRINGS), np.int64)
        self.tables, self.hashes = np.empty((3, table), np.int32), np.empty((3, lines), np.int64)
        self.metas, self.counts = np.empty((lines, 2), np.int64), np.zeros(5, np.int64)

    def scan(self, text: bytes) -> bool:
        """Read the block ``text`` (whole lines, no final line break) into the buffers; False
        if some line is not of the shape this module reads (the buffers are then garbage)."""
        if not text:
            return False
        self._reserve(len(text), len(text) // MIN_LINE + 1)
        return bool(scan_block(
            np.frombuffer(text, np.uint8), self.ev_kind, self.ev_t, self.writes, self.costs,
            self.requests, self.targets, self.strings, self.ends, self.fill, self.tables,
            self.hashes, self.metas, self.counts,
        ))  # fmt: skip

    def column(self, col: int) -> tuple[memoryview, np.ndarray]:
        """String column ``col`` of the last block: its bytes (a view) and each row's end."""
        return memoryview(self.strings[col, : self.fill[SIZE, col]]), self.ends[
            col, : self.fill[ROWS, col]
        ]


@numba.njit(cache=True, nogil=True, _nrt=False)
def _gather(src, starts, stops, picks, out):
    o = 0
    for p in picks:
        for k in range(starts[p], stops[p]):
            out[o] = src[k]
            o += 1
    return o


def gather(texts: list[bytes], picks: np.ndarray) -> tuple[bytes, np.ndarray]:
    """``b"".join(texts[p] for p in picks)`` and each picked text's length, without a Python
    object per pick (the metas of a block: few distinct texts, picked once per event)."""
    lengths = np.fromiter(map(len, texts), np.int64, len(texts))
    stops = np.cumsum(lengths)
    picked = lengths[picks]
    out = np.empty(int(picked.sum()), np.uint8)
    _gather(np.frombuffer(b"".join(texts), np.uint8), stops - lengths, stops, picks, out)
    return out.tobytes(), picked
