"""The OpenAI Chat Completions wire: the engine's own vocabulary, usage and stream events."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ctxpolicy.wire import WIRES, ChatWire, StreamTurn, Wire, WireError, for_path
from ctxpolicy.wire.sse import EventSplitter, format_event, parse_event

_msg = st.fixed_dictionaries(
    {"role": st.sampled_from(["system", "user", "assistant"]), "content": st.text(max_size=20)}
)


@settings(max_examples=50, deadline=None)
@given(st.lists(_msg, min_size=1, max_size=6), st.booleans())
def test_nothing_compacted_sends_the_same_request(
    messages: list[dict[str, Any]], stream: bool
) -> None:
    wire = ChatWire()
    body = {"model": "m", "messages": messages, "stream": stream}
    req = wire.extract(copy.deepcopy(body))
    assert json.loads(wire.build(req, req.messages)) == body


def test_malformed_bodies_are_wire_errors() -> None:
    for bad in ({}, {"messages": "x"}, {"messages": [1]}):
        with pytest.raises(WireError):
            ChatWire().extract(bad)


def test_stream_usage_opt_in_and_usage_only_chunk() -> None:
    wire = ChatWire()
    asked = wire.with_stream_usage({"stream": True, "stream_options": {"x": 1}})
    assert asked == {"stream": True, "stream_options": {"x": 1, "include_usage": True}}
    assert wire.with_stream_usage({"stream_options": {"include_usage": True}}) is None
    assert wire.is_usage_only_event({"choices": [], "usage": {"prompt_tokens": 3}})
    assert wire.stream_usage({"choices": [], "usage": {"prompt_tokens": 3}}) == 3
    assert wire.usage({"usage": {"prompt_tokens": True}}) is None


def test_a_streamed_recall_call_is_assembled() -> None:
    chunks = [
        {
            "id": "c1",
            "created": 1,
            "model": "m",
            "choices": [{"delta": {"role": "assistant", "content": ""}}],
        },
        {
            "choices": [
                {
                    "delta": {
                        "tool_calls": [
                            {
                                "index": 0,
                                "id": "call_1",
                                "function": {"name": "ctx_recall", "arguments": '{"ref"'},
                            }
                        ]
                    }
                }
            ]
        },
        {
            "choices": [
                {"delta": {"tool_calls": [{"index": 0, "function": {"arguments": ': "x"}'}}]}}
            ]
        },
    ]
    data = b"".join(format_event(c) for c in chunks) + b"data: [DONE]\n\n"
    turn, seen = ChatWire().stream_turn(), []
    splitter = EventSplitter()
    for i in range(len(data)):
        for ev in splitter.feed(data[i : i + 1]):
            obj = parse_event(ev)
            if obj is not None:
                seen.append(turn.event(obj))
    assert seen == [None, "call", "call"]
    msg = turn.answer()["choices"][0]["message"]
    assert msg["tool_calls"][0]["function"] == {"name": "ctx_recall", "arguments": '{"ref": "x"}'}


def test_every_wire_is_found_by_name_and_path() -> None:
    assert sorted(WIRES) == ["anthropic", "chat", "responses"]
    assert all(
        isinstance(w, Wire) and isinstance(w.stream_turn(), StreamTurn) for w in WIRES.values()
    )
    for name, path in (
        ("chat", "/v1/chat/completions"),
        ("anthropic", "/agents/a/v1/messages"),
        ("responses", "/v1/responses"),
    ):
        wire = for_path(path)
        assert wire is not None and wire.name == name
    assert for_path("/v1/models") is None
    assert WIRES["anthropic"].auth_headers("k") == {"x-api-key": "k"}
    assert WIRES["chat"].auth_headers("k") == {"authorization": "Bearer k"}
    recall = [
        {
            "type": "function",
            "function": {
                "name": "ctx_recall",
                "description": "d",
                "parameters": {"type": "object"},
            },
        }
    ]
    for wire in WIRES.values():
        (tool,) = wire.tools(recall)
        assert wire.tool_name(tool) == "ctx_recall"
