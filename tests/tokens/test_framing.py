"""Exactness of the chat-overhead rules: messages, tool calls, tool schemas and images,
against the documented rules computed with tiktoken directly."""

from __future__ import annotations

import base64
import json
import struct

import pytest

from ctxpolicy.tokens import (
    image_tokens,
)

from .conftest import counter, n, shared_or_skip

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
