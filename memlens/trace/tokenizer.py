"""Token counting for converters and generators: pluggable, offline by default.

Budgets in MemLens are in tokens, so every ``write`` carries a token count.  Which tokenizer
produced those counts matters (a trace tokenised for one model is a different workload for
another), so converters record :attr:`Tokenizer.spec` in the trace header.

Backends, chosen by a spec string:

``approx`` (default)
    An offline approximation of a GPT-style BPE (cl100k-like): the text is split the way such
    tokenizers pre-split it (letter runs with their leading space, digit groups of at most
    three, punctuation runs, whitespace runs) and each piece is charged by its length.  Needs
    no files and no network and is deterministic.  On the 11.5k distinct texts of LoCoMo and
    tau-bench it is within a few percent of cl100k in total (see docs/how-to/own-logs.md for the
    measured error); per text it can be off by a token or two.
``tiktoken:ENCODING``
    The ``tiktoken`` package, *only* if the encoding file is already in its local cache
    (``TIKTOKEN_CACHE_DIR`` or tiktoken's default cache).  MemLens never lets it download.
``bpe_openai:ENCODING``
    The ``bpe-openai`` package, which ships its BPE tables inside the wheel (fully offline).
``hf:PATH``
    A Hugging Face ``tokenizer.json`` file on disk, through the ``tokenizers`` package.

An unavailable backend is an error (:class:`TokenizerUnavailable`), never a silent fallback:
a silent fallback would record one tokenizer and count with another.
"""

from __future__ import annotations

import os
import re
from functools import lru_cache

DEFAULT_SPEC = "approx"

# Pre-split pattern modelled on GPT-style tokenizers: contractions, a letter run with an
# optional leading space, digit groups of at most three, a punctuation run with an optional
# leading space, whitespace runs.  Non-ASCII characters fall in the "other" class.
_PIECES = re.compile(
    r"'(?:[sdmt]|ll|ve|re)"  # contractions
    r"|[^\r\n A-Za-z0-9]?[A-Za-z]+"  # words, with one leading punctuation character
    r"| [A-Za-z]+"  # words with their leading space
    r"|[0-9]{1,3}"  # numbers, in groups of up to three digits
    r"| ?[^\sA-Za-z0-9\x80-\U0010ffff]+[\r\n]*"  # ASCII punctuation runs
    r"|[\x80-\U0010ffff]"  # any non-ASCII character, one at a time
    r"|\s*[\r\n]+|\s+(?!\S)|\s+",  # newlines, whitespace
)


class TokenizerUnavailable(RuntimeError):
    """The configured tokenizer cannot run here (package or local files missing)."""


class Tokenizer:
    """Counts tokens in text.  ``spec`` names the backend (recorded in trace headers)."""

    spec: str = DEFAULT_SPEC

    def count(self, text: str) -> int:  # pragma: no cover - interface
        raise NotImplementedError

    def describe(self) -> dict:
        """What to record in a trace header."""
        return {"tokenizer": self.spec}


class ApproxTokenizer(Tokenizer):
    """The offline approximation (see module docstring)."""

    spec = "approx"

    def count(self, text: str) -> int:
        return approx_tokens(text)


def _piece_cost(piece: str) -> int:
    """Tokens charged for one pre-split piece (coefficients fitted against cl100k, rounded)."""
    if piece.isspace():
        return 1
    body = piece.lstrip(" ")
    if not body[-1:].isascii():
        return 1  # one non-ASCII character
    if body[-1:].isalpha():
        # a BPE vocabulary of ~100k holds nearly every word of up to ~10 letters whole
        return 1 if len(body) <= 11 else 2
    if body[:1].isdigit():
        return 1
    # punctuation: short runs (``",``, ``.\n``) are one token, long runs (``----``) ~2 chars each
    return 1 if len(body) <= 2 else (len(body) + 1) // 2


def approx_tokens(text: str) -> int:
    """Approximate GPT-style token count of ``text`` (at least 1 for non-empty text)."""
    if not text:
        return 0
    return sum(_piece_cost(p) for p in _PIECES.findall(text)) or 1


class _CallableTokenizer(Tokenizer):
    def __init__(self, spec: str, encode):
        self.spec = spec
        self._encode = encode

    def count(self, text: str) -> int:
        return len(self._encode(text)) if text else 0


def _tiktoken(encoding: str) -> Tokenizer:
    try:
        import tiktoken
        import tiktoken.load as tiktoken_load
    except ImportError as exc:
        raise TokenizerUnavailable(f"tokenizer 'tiktoken:{encoding}': {exc}") from None
    # tiktoken fetches an encoding file it has not cached (``read_file_cached`` -> ``read_file``).
    # Swap ``read_file`` for one that refuses remote paths, so only the local cache can serve.
    original = tiktoken_load.read_file

    def local_only(blobpath: str) -> bytes:
        if "://" in blobpath and not blobpath.startswith("file://"):
            raise TokenizerUnavailable(
                f"tokenizer 'tiktoken:{encoding}': {blobpath} is not in the local tiktoken cache "
                "(set TIKTOKEN_CACHE_DIR to a directory holding it; MemLens never downloads)"
            )
        return original(blobpath)

    tiktoken_load.read_file = local_only
    try:
        enc = tiktoken.get_encoding(encoding)
    except TokenizerUnavailable:
        raise
    except Exception as exc:
        raise TokenizerUnavailable(f"tokenizer 'tiktoken:{encoding}': {exc}") from None
    finally:
        tiktoken_load.read_file = original
    return _CallableTokenizer(
        f"tiktoken:{encoding}", lambda s: enc.encode(s, disallowed_special=())
    )


def _bpe_openai(encoding: str) -> Tokenizer:
    try:
        import bpe_openai
    except ImportError as exc:
        raise TokenizerUnavailable(f"tokenizer 'bpe_openai:{encoding}': {exc}") from None
    try:
        enc = bpe_openai.get_encoding(encoding)
    except Exception as exc:
        raise TokenizerUnavailable(f"tokenizer 'bpe_openai:{encoding}': {exc}") from None
    return _CallableTokenizer(f"bpe_openai:{encoding}", enc.encode)


def _hf(path: str) -> Tokenizer:
    if not os.path.isfile(path):
        raise TokenizerUnavailable(f"tokenizer 'hf:{path}': no such tokenizer.json file")
    try:
        from tokenizers import Tokenizer as HFTokenizer
    except ImportError as exc:
        raise TokenizerUnavailable(f"tokenizer 'hf:{path}': {exc}") from None
    tok = HFTokenizer.from_file(path)
    return _CallableTokenizer(
        f"hf:{os.path.basename(path)}", lambda s: tok.encode(s, add_special_tokens=False).ids
    )


@lru_cache(maxsize=8)
def get_tokenizer(spec: str | None = None) -> Tokenizer:
    """The tokenizer for ``spec`` (``approx``, ``tiktoken:NAME``, ``bpe_openai:NAME``, ``hf:PATH``).

    Raises :class:`TokenizerUnavailable` when the backend cannot run offline here.
    """
    spec = spec or DEFAULT_SPEC
    kind, _, arg = spec.partition(":")
    if kind == "approx" and not arg:
        return ApproxTokenizer()
    if kind == "tiktoken" and arg:
        return _tiktoken(arg)
    if kind == "bpe_openai" and arg:
        return _bpe_openai(arg)
    if kind == "hf" and arg:
        return _hf(arg)
    raise TokenizerUnavailable(
        f"unknown tokenizer {spec!r} (use approx, tiktoken:ENCODING, bpe_openai:ENCODING or hf:PATH)"
    )
