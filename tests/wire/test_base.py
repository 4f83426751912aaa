"""The helpers every wire shares: the outgoing body's encoding, the tools' memo."""

from __future__ import annotations

import json
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from ctxpolicy.conversation.samejson import KeyedList
from ctxpolicy.policy.models import ModelSpec
from ctxpolicy.tokens import TokenCounter
from ctxpolicy.wire.anthropic import tools_for_count
from ctxpolicy.wire.base import _Texts, dumps


def _tools(n: int = 6, **extra: Any) -> list[dict[str, Any]]:
    return [
        {
            "name": f"Tool{i}",
            "description": "Does one thing. é",
            "input_schema": {
                "type": "object",
                "properties": {"path": {"type": "string", "description": "where", **extra}},
            },
        }
        for i in range(n)
    ]


def _long_messages(n: int = 6) -> list[Any]:
    line = "déjà vu — line {} of a long tool result\n"
    return [
        {
            "role": "user",
            "content": [
                {
                    "type": "tool_result",
                    "tool_use_id": f"t{i}",
                    "content": "".join(line.format(j) for j in range(80)),
                }
            ],
        }
        if i % 2
        else {"role": "assistant", "content": f"step {i}", "n": i, "ok": True}
        for i in range(n)
    ]


def _plain(body: dict[str, Any]) -> bytes:
    return json.dumps(body, ensure_ascii=False, separators=(",", ":")).encode()


def test_dumps_with_the_tools_spliced_is_the_plain_encoding() -> None:
    for body in (
        {"model": "m", "tools": _tools(), "messages": [{"role": "user", "content": "hi"}]},
        {"tools": _tools(), "model": "m"},
        {"model": "m", "tools": _tools(2)},  # short: encoded whole
        {"model": "m", "tools": _tools(5, minimum=1)},
        {"model": "m", "tools": _tools(5, minimum=True)},  # 1 == True, not the same JSON
        {"model": "m", "tools": _tools(5, minimum=1.0)},
        {"model": "m", "messages": _long_messages(), "tools": _tools(), "stream": True},
        {"messages": _long_messages(3), "tools": []},  # short lists: encoded whole
        {"input": _long_messages(), "x": 1.5, "tools": _tools(5, minimum=-0.0)},
    ):
        assert dumps(body) == _plain(body)
        assert dumps(json.loads(json.dumps(body))) == _plain(body)  # a fresh parse, a memo hit


def test_tools_for_count_is_shared_and_counted_by_its_key() -> None:
    raw = json.dumps(_tools())
    a, b = tools_for_count(json.loads(raw)), tools_for_count(json.loads(raw))
    assert a is b and type(a) is KeyedList
    counter = TokenCounter(ModelSpec(context_window=8000, tokenizer="cl100k_base"))
    fresh = TokenCounter(ModelSpec(context_window=8000, tokenizer="cl100k_base"))
    assert counter.count_tools(a) == fresh.count_tools(list(a)) == counter.count_tools(list(a))


def test_count_tools_tells_apart_what_only_key_order_or_number_types_change() -> None:
    counter = TokenCounter(ModelSpec(context_window=8000, tokenizer="cl100k_base"))
    ordered = [
        {
            "type": "function",
            "function": {
                "name": "f",
                "parameters": {"properties": {"x": {"type": "string", "minimum": 1, "maximum": 2}}},
            },
        }
    ]
    swapped = [
        {
            "type": "function",
            "function": {
                "name": "f",
                "parameters": {"properties": {"x": {"type": "string", "maximum": 2, "minimum": 1}}},
            },
        }
    ]
    typed = [
        {
            "type": "function",
            "function": {
                "name": "f",
                "parameters": {
                    "properties": {"x": {"type": "string", "minimum": True, "maximum": 2}}
                },
            },
        }
    ]
    for tools in (ordered, swapped, typed, ordered):
        fresh = TokenCounter(ModelSpec(context_window=8000, tokenizer="cl100k_base"))
        assert counter.count_tools(tools) == fresh.count_tools(tools)


def test_the_texts_memo_keeps_its_bound() -> None:
    texts = _Texts(max_chars=100_000)
    msgs = _long_messages(40)
    for m in msgs:
        assert texts.text(m) == _plain(m)
        assert texts.text(json.loads(json.dumps(m))) == _plain(m)
    assert 50_000 < texts._chars <= 100_000  # 20 long messages of ~7.5 KB: some dropped


_json_like = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=5),
    lambda inner: (
        st.lists(inner, max_size=4)
        | st.dictionaries(st.text(max_size=3) | st.integers(), inner, max_size=4)
        | st.tuples(inner, inner)
    ),
    max_leaves=20,
)


@given(_json_like)
def test_to_plain_copies_json_like_values(value: Any) -> None:
    """Plain values come back equal (tuples as lists, keys as strings), dicts and lists
    as copies; the SDKs' "not given" sentinels are dropped from mappings."""
    from ctxpolicy.wire.base import to_plain

    def expected(v: Any) -> Any:
        if isinstance(v, dict):
            return {str(k): expected(x) for k, x in v.items()}
        if isinstance(v, list | tuple):
            return [expected(x) for x in v]
        return v

    out = to_plain(value)
    assert out == expected(value)
    if isinstance(value, dict | list):
        assert out is not value

    class NotGiven:
        pass

    assert to_plain({"a": NotGiven(), "b": None, "c": [1]}) == {"b": None, "c": [1]}
