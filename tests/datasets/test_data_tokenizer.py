"""The pluggable tokenizer: offline approximation and refusal of unavailable backends."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from memlens.trace.tokenizer import TokenizerUnavailable, approx_tokens, get_tokenizer


@pytest.mark.parametrize(
    "text, n",
    [
        ("", 0),
        ("Hello, world!", 4),  # Hello | , | ␣world | !   (cl100k: 4)
        ("12345", 2),  # 123 | 45
        ("   ", 1),
        ("I'm fine", 3),  # I | 'm | ␣fine
        ("internationalization", 2),  # a long rare word splits
        ("----------", 5),  # long punctuation runs: about two characters per token
        ("日本語", 3),  # one per non-ASCII character
    ],
)
def test_approx_hand_counted(text, n):
    assert approx_tokens(text) == n


@given(st.text(min_size=1, max_size=300))
def test_approx_bounds(text):
    n = approx_tokens(text)
    assert 1 <= n <= len(text)  # never zero for real text, never more than one per character


@given(st.text(alphabet="abc xyz.,\n", max_size=80), st.text(alphabet="abc xyz.,\n", max_size=80))
def test_approx_roughly_additive(a, b):
    # splitting text in two changes at most the pieces at the cut
    assert abs(approx_tokens(a + b) - approx_tokens(a) - approx_tokens(b)) <= 2


def test_default_is_approx_and_recorded():
    tok = get_tokenizer()
    assert tok.spec == "approx" and tok.describe() == {"tokenizer": "approx"}
    assert tok.count("Hello, world!") == 4


@pytest.mark.parametrize(
    "spec", ["bogus", "tiktoken", "hf:/nonexistent/tokenizer.json", "approx:x"]
)
def test_unavailable_backends_are_errors_not_fallbacks(spec):
    with pytest.raises(TokenizerUnavailable):
        get_tokenizer(spec)


def test_tiktoken_never_downloads(tmp_path, monkeypatch):
    # with an empty cache the backend must refuse (whether or not tiktoken is installed)
    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", str(tmp_path))
    get_tokenizer.cache_clear()
    with pytest.raises(TokenizerUnavailable):
        get_tokenizer("tiktoken:cl100k_base")
    assert list(tmp_path.iterdir()) == []


def test_bpe_openai_backend_if_installed():
    pytest.importorskip("bpe_openai")
    tok = get_tokenizer("bpe_openai:cl100k_base")
    assert tok.describe() == {"tokenizer": "bpe_openai:cl100k_base"}
    # cl100k: "Hello" "," " world" "!" and "123" "45"
    assert tok.count("Hello, world!") == 4 and tok.count("12345") == 2 and tok.count("") == 0
