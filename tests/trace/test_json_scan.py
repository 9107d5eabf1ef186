"""The compiled scanner's pieces (memlens.trace.bulk.scan) against orjson, the exact parser's decoder.

What the scanner accepts it must read exactly as orjson does: numbers bit for bit (sign of
zero included), strings byte for byte after decoding escapes, and nothing orjson refuses
(invalid UTF-8, lone surrogates, bad escapes, control characters).  Giving up is always
allowed (the block then takes the msgspec path); the common forms must not give up.
"""

from __future__ import annotations

import json
import struct

import numpy as np
import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from memlens.trace.bulk import scan as json_scan


def scan_number(text: str) -> tuple[int, float, int]:
    raw = text.encode() + b","  # (a delimiter after it, as in a line)
    return json_scan._number(np.frombuffer(raw, np.uint8), 0, len(raw))


def bits(x: float) -> bytes:
    return struct.pack("<d", x)


NUMBERS = st.one_of(
    st.floats(allow_nan=False, allow_infinity=False).map(repr),
    st.integers(-(2**70), 2**70).map(str),
    st.from_regex(r"-?(0|[1-9][0-9]{0,20})(\.[0-9]{1,20})?([eE][+-]?[0-9]{1,3})?", fullmatch=True),
    st.from_regex(r"-?[0-9]{1,4}(\.[0-9]{0,3})?([eE][+-]?)?[0-9]{0,2}[.eE+-]?", fullmatch=True),
)


@settings(max_examples=max(500, settings().max_examples))
@given(text=NUMBERS)
def test_numbers_are_orjsons_bit_for_bit(text):
    end, value, integer = scan_number(text)
    try:
        expected = orjson.loads(text)
    except orjson.JSONDecodeError:
        assert end < 0 or end < len(text)  # refused, or a number followed by more (the line
        return  # then fails at the next byte)
    if end < 0:
        return  # given up: allowed
    if end < len(text):
        return  # a number followed by more text: the line's grammar refuses it
    assert bits(value) == bits(float(expected)), (text, value, expected)
    assert (integer >= 0) == (type(expected) is int and expected >= 0 and "-" not in text)
    if integer >= 0:
        assert integer == expected


@pytest.mark.parametrize(
    "text", ["15.594", "0.023827", "1278", "0", "-0", "-0.0", "1e3", "-2.5E-3", "1E+2",
             "123456789012345", "9007199254740992", "0.1", "1.5e22", "4.35e-20", "1.50"],
)  # fmt: skip
def test_common_numbers_are_not_given_up(text):
    end, value, _ = scan_number(text)
    assert end == len(text)
    assert bits(value) == bits(float(orjson.loads(text)))


@pytest.mark.parametrize("text", ["01", "1.", ".5", "+1", "1e", "--1", "-", "1e400",
                                  "9007199254740993", "0.1e-30", "true", "NaN"])  # fmt: skip
def test_forms_it_cannot_read_exactly_are_given_up(text):
    assert scan_number(text)[0] < 0


def scan_string(raw: bytes) -> bytes | None:
    """The decoded bytes of the JSON string ``raw`` (quotes included), None if refused."""
    out = np.zeros((1, len(raw) + 1), np.uint8)
    end, o = json_scan._string(np.frombuffer(raw, np.uint8), 0, len(raw), out, 0, 0)
    return None if end != len(raw) else out[0, :o].tobytes()


@settings(max_examples=max(300, settings().max_examples))
@given(value=st.text(), ascii_only=st.booleans(), slash=st.booleans())
def test_strings_decode_as_orjson_does(value, ascii_only, slash):
    raw = json.dumps(value, ensure_ascii=ascii_only).encode()
    if slash:
        raw = raw.replace(b"/", b"\\/")
    assert scan_string(raw) == orjson.loads(raw).encode()


PIECES = [b"a", b"\\", b"\\u", b"d83d", b"\\ud83d", b"\\ude00", b"\\uDBFF\\uDFFF", b"00e9",
          b"\\u00E9", b"\xc3\xa9", b"\xed\xa0\x80", b"\xed\x9f\xbf", b"\xc0\x80", b"\xc1\xbf",
          b"\xe0\x80\x80", b"\xe0\xa0\x80", b"\xf0\x90\x80\x80", b"\xf4\x8f\xbf\xbf",
          b"\xf4\x90\x80\x80", b"\xf5\x80\x80\x80", b"\xff", b"\x80", b"\xc3", b"\x01", b"\x1f",
          b"\x7f", b"\\n", b"\\t", b"\\b", b"\\f", b"\\r", b"\\/", b"\\x", b"\\0", b"\\'"]  # fmt: skip


@settings(max_examples=max(500, settings().max_examples))
@given(parts=st.lists(st.sampled_from(PIECES), max_size=6))
def test_any_string_bytes_accepted_only_if_orjson_accepts(parts):
    raw = b'"' + b"".join(parts) + b'"'
    try:
        expected = orjson.loads(raw).encode("utf-8", "surrogatepass")
    except orjson.JSONDecodeError:
        assert scan_string(raw) is None
        return
    got = scan_string(raw)
    assert got is None or got == expected


def test_block_with_every_supported_form():
    line = (b'{"event":"write" , "id":"a\\u00e9\\ud83d\\ude00","tokens":7,"type":"user_input",'
            b'"t":-0.0,"cost":1e-3,"text":"x\\"y\\\\z\\/\xc3\xa9","task":"","session":"s",'
            b'"stream":"\\u0073","meta":{"k":[1,{"j":"}"}]}}  \t')  # fmt: skip
    request = b'{"event":"request","needs":[ "a\\u00e9\\ud83d\\ude00" ],"id":"r","t":0}'
    pin = b'{"event":"pin","target":"anything, decoded later"}'
    scan = json_scan.BlockScanner()
    assert scan.scan(b"\n".join([line, request, pin]))
    assert scan.counts[:4].tolist() == [3, 1, 1, 1]
    column = {c: bytes(scan.column(c)[0]) for c in range(json_scan.N_STRINGS)}
    assert column[json_scan.ITEM_ID] == "aé😀".encode() == column[json_scan.NEED_ID]
    assert column[json_scan.ITEM_TEXT] == 'x"y\\z/é'.encode()
    assert column[json_scan.STREAMS] == b"s" and column[json_scan.TYPES] == b"user_input"
    assert scan.ev_t[:2].tolist() == [-0.0, 0.0] and str(scan.ev_t[0]) == "-0.0"
    a, b = scan.metas[0]
    assert b"\n".join([line, request, pin])[a:b] == b'{"k":[1,{"j":"}"}]}'


@pytest.mark.parametrize("line", [
    b'{"id":"a","event":"write","tokens":1,"type":"user_input"}',  # event not first
    b'{"event":"write","id":"a","tokens":1,"type":"user_input","x":1}',  # unknown key
    b'{"event":"write","id":"a","tokens":1,"type":"user_input","id":"b"}',  # duplicate
    b'{"event":"write","\\u0069d":"a","tokens":1,"type":"user_input"}',  # escaped key
    b'{"event":"write","id":"a","tokens":1.0,"type":"user_input"}',  # tokens not an integer
    b'{"event":"write","id":"a","tokens":1,"type":"user_input","t":null}',
    b'{"event":"write","id":"a","tokens":1,"type":"user_input","meta":[]}',
    b'{"event":"write","id":"a","tokens":1,"type":"user_input","meta":' + b"[" * 40 + b"]" * 40
    + b"}",
    b'{"event":"write","id":"a","tokens":1,"type":"user_input"} x',
    b'{"event":"write","id":"a","tokens":1}',  # type missing
    b'{"event":"request","id":"r","needs":[["a"]]}',
    b'{"event":"request","id":"r","needs":["a"],"tokens":1}',
    b'{"event":"header","version":1}',
    b"",
    b"  ",
])  # fmt: skip
def test_lines_it_does_not_read_are_given_up(line):
    assert not json_scan.BlockScanner().scan(line)


def test_gather():
    texts = [b"", b"ab", b"cde"]
    data, lengths = json_scan.gather(texts, np.array([2, 1, 1, 0, 2]))
    assert data == b"cdeababcde" and lengths.tolist() == [3, 2, 2, 0, 3]
