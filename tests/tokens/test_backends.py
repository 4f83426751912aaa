"""The backends: quicktok identical to the reference vocabularies, the heuristic within
its documented error."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ctxpolicy.components import TokenizerUnavailable
from ctxpolicy.policy.models import ModelSpec
from ctxpolicy.tokens import (
    HeuristicTokenizer,
    QuicktokTokenizer,
    TokenCounter,
    resolve_tokenizer,
)
from tests.shared_data import SHARED
from tests.tokens_reference import ReferenceUnavailable, o200k_tiktoken, qwen_reference

from .conftest import DATA, n, shared_or_skip

# --------------------------------------------------------------------------- quicktok


def _corpus_texts() -> list[str]:
    texts = [p.read_text(encoding="utf-8") for p in sorted(DATA.glob("*")) if p.is_file()]
    texts += [
        "<|endoftext|> hi <|fim_prefix|>",
        "😀👨‍👩‍👧‍👦🇺🇸 mixed 中文 text",
        "   \n\n\t  trailing   ",
        "1234567890" * 20,
        # decomposed accents (NFD) and combining marks: where NFC-normalizing vocabularies differ
        "Cafe\u0301 na\u0131\u0308ve re\u0301sume\u0301 \u1100\u1161\u11a8 Å Å",
        "Ελληνικά Русский язык עברית العربية हिन्दी ไทย 日本語のテキスト 한국어",
        "def f(x):\r\n    return x  # CRLF\r\n\r\n\u00a0\u2003 nbsp",
    ]
    traces = SHARED / "traces"
    if traces.exists():
        for p in sorted(traces.glob("*.jsonl"))[:6]:
            for line in p.read_text(encoding="utf-8").splitlines():
                texts.append(json.loads(line)["content"] or "")
    seeds = SHARED / "seeds"
    if seeds.exists():
        texts += [p.read_text(encoding="utf-8") for p in sorted(seeds.glob("*.txt"))]
    return texts


def _quicktok(encoding: str) -> QuicktokTokenizer:
    try:
        return QuicktokTokenizer.load(encoding, None)
    except TokenizerUnavailable as exc:  # a base dependency: missing is a broken install
        pytest.fail(f"quicktok (a base dependency) cannot load {encoding}: {exc}")


def _reference(load, *args):
    try:
        return load(*args)
    except ReferenceUnavailable as exc:
        if os.environ.get("CI"):
            pytest.fail(f"{exc}; CI installs the dev extra")
        pytest.skip(str(exc))


def _assert_identical(qt: QuicktokTokenizer, reference, texts: list[str]) -> None:
    tokens = 0
    for t in texts:
        ref = reference(t)
        assert qt.encode(t) == ref, t[:120]
        assert qt.count(t) == len(ref), t[:120]
        tokens += len(ref)
    assert tokens > 10_000  # the corpus really was there


@settings(max_examples=150, deadline=None)
@given(
    st.lists(
        st.one_of(
            st.sampled_from(["<|endoftext|>", "<|fim_prefix|>", "<|im_start|>", " ", "\n", "é"]),
            st.text(max_size=12),  # lone surrogates included: scrubbed as tiktoken does
        ),
        max_size=10,
    ).map("".join)
)
def test_quicktok_count_is_the_length_of_encode(text: str) -> None:
    """``count`` (quicktok's counter, no token list) == ``len(encode(text))`` on
    every bundled encoding, special-token text and lone surrogates included."""
    for encoding in ("cl100k_base", "o200k_base", "llama3", "qwen3"):
        qt = _quicktok(encoding)
        assert qt.count(text) == len(qt.encode(text)), (encoding, text)


def test_quicktok_identical_to_tiktoken_on_cl100k(cl100k):
    _assert_identical(
        _quicktok("cl100k_base"), lambda t: list(cl100k.encode_ordinary(t)), _corpus_texts()
    )


def test_quicktok_identical_to_tiktoken_on_o200k(tmp_path):
    """OpenAI's o200k_base file, hash-checked and loaded by tiktoken (tests/tokens_reference.py)."""
    ref = _reference(o200k_tiktoken, tmp_path / "tiktoken-cache")
    _assert_identical(
        _quicktok("o200k_base"), lambda t: list(ref.encode_ordinary(t)), _corpus_texts()
    )


def test_quicktok_qwen3_is_qwen25_vocabulary():
    """quicktok's qwen3 == Qwen's own BPE (qwen.tiktoken, Qwen2.5 regex and NFC)."""
    _assert_identical(_quicktok("qwen3"), _reference(qwen_reference), _corpus_texts())


def test_shipped_models_count_exactly_with_the_base_install():
    """Every model of policies/ resolves to an exact counter, without a network."""
    import tomllib

    from ruamel.yaml import YAML

    from ctxpolicy.sim.replay import load_policy_file

    root = Path(__file__).resolve().parents[2] / "policies"
    seen = {}
    for file in sorted([*root.glob("*.yaml"), *root.glob("*.toml")]):
        text = file.read_text(encoding="utf-8")
        raw = tomllib.loads(text) if file.suffix == ".toml" else YAML(typ="safe").load(text)
        for agent in raw.get("policies", {}):
            pol = load_policy_file(file, agent)
            res = resolve_tokenizer(pol.model, pol.model_name)
            seen[pol.model.name or pol.model_name] = res
            if pol.model_name and pol.model_name.startswith("claude"):
                continue  # no public tokenizer: cl100k is an admitted approximation
            assert res.exact, (file.name, agent, res)
            assert res.name.split(":")[0] in {"tiktoken", "quicktok"}, (file.name, agent, res)
    assert seen["Qwen/Qwen2.5-Coder-32B-Instruct"].name == "quicktok:qwen3"


def test_fallback_is_visible_in_resolution_and_logged_once(caplog):
    import logging

    import ctxpolicy.tokens as tokens_mod

    tokens_mod._warned.clear()
    spec = ModelSpec(context_window=1000, tokenizer=["no_such_encoding", "heuristic"])
    with caplog.at_level(logging.WARNING, logger="ctxpolicy.tokens"):
        a = TokenCounter(spec, model_name="m1")
        TokenCounter(spec, model_name="m1")
    res = a.resolution
    assert (res.name, res.exact, res.wanted) == ("heuristic", False, "tiktoken:no_such_encoding")
    assert res.fallback and "no_such_encoding" in res.fallback
    assert "APPROXIMATE" in res.describe()
    warnings = [r for r in caplog.records if "APPROXIMATE" in r.getMessage()]
    assert len(warnings) == 1 and "'m1'" in warnings[0].getMessage()


# --------------------------------------------------------------------------- heuristic


@pytest.mark.parametrize("name", ["english.txt", "chinese.txt", "code_python.txt", "records.json"])
def test_heuristic_within_15_percent(name, cl100k):
    text = (DATA / name).read_text(encoding="utf-8")
    est = HeuristicTokenizer().count(text)
    ref = n(cl100k, text)
    assert abs(est - ref) / ref <= 0.15, (name, est, ref)


def test_heuristic_on_real_chinese_seeds(cl100k):
    seeds = sorted(shared_or_skip("seeds").glob("*.txt"))
    assert seeds
    h = HeuristicTokenizer()
    for p in seeds:
        text = p.read_text(encoding="utf-8")
        ref = n(cl100k, text)
        est = h.count(text)
        assert abs(est - ref) / ref <= 0.15, (p.name, est, ref)
        assert (len(text) // 4) < 0.75 * ref  # why len//4 is not good enough


def test_heuristic_basics():
    h = HeuristicTokenizer()
    assert h.count("") == 0
    assert h.count("a") == 1
    assert h.count("word " * 100) > h.count("word " * 10)
