"""The OpenAI Responses wire (stateless ``input`` lists): items ↔ engine messages, usage,
output items and stream events; the real ``openai`` SDK against the scripted server."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from ctxpolicy.conversation import check_messages
from ctxpolicy.conversation.messages import with_text
from ctxpolicy.engine import Session
from ctxpolicy.testing.server import ScriptedLLMServer
from ctxpolicy.wire import ResponsesInput, ResponsesWire
from ctxpolicy.wire.sse import EventSplitter, format_event, parse_event
from tests.integrations.conftest import make_policy

BIG = "\n".join(f"line {i}: value = compute({i})  # the module being written" for i in range(600))
REASONING = {
    "type": "reasoning",
    "id": "rs_1",
    "summary": [{"type": "summary_text", "text": "plan"}],
    "encrypted_content": "gAAAAB" + "x" * 300,
}


def _round(i: int, arguments: str, output: str = "ok") -> list[dict[str, Any]]:
    return [
        {
            "type": "function_call",
            "id": f"fc_{i}",
            "call_id": f"call_{i}",
            "name": "f",
            "arguments": arguments,
        },
        {"type": "function_call_output", "call_id": f"call_{i}", "output": output},
    ]


def _items() -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = [{"role": "user", "content": "Task: write the module"}]
    items += _round(1, '{"p": 1}') + _round(2, '{"p": 2}')
    write = json.dumps({"path": "a.py", "content": BIG})
    items += [copy.deepcopy(REASONING), *_round(3, write, "written")]
    return items


def test_squeezed_function_call_arguments_are_sent_squeezed(tmp_path: Path) -> None:
    openai = pytest.importorskip("openai", reason="the 'openai' extra is not installed")
    from ctxpolicy.integrations.openai import wrap

    session = Session(make_policy(tmp_path, window=6000))
    items = _items()
    with ScriptedLLMServer(window=6000, script=[{"content": "ok"}] * 2) as srv:
        client = wrap(openai.OpenAI(base_url=srv.base_url, api_key="t", max_retries=0), session)
        client.responses.create(model="m", input=items, instructions="be brief", store=False)
        assert srv.rejections == 0
        (body,) = srv.requests
    sent = body["input"]
    (call,) = [i for i in sent if i.get("call_id") == "call_3" and i["type"] == "function_call"]
    args = json.loads(call["arguments"])  # still JSON, and squeezed
    assert args["path"] == "a.py" and "removed to fit" in args["content"]
    assert len(call["arguments"]) < len(items[-2]["arguments"]) // 2
    reasoning = [i for i in sent if i.get("type") == "reasoning"]
    assert reasoning == [REASONING]  # once, byte-identical, before its call
    assert sent.index(reasoning[0]) == sent.index(call) - 1


def test_reasoning_is_never_text_and_goes_with_its_turn() -> None:
    items = [
        {"role": "user", "content": "hi"},
        copy.deepcopy(REASONING),
        {
            "type": "message",
            "role": "assistant",
            "content": [{"type": "output_text", "text": "long " * 99}],
        },
        {"role": "user", "content": "more"},
    ]
    conv = ResponsesInput(items)
    assert all("gAAAAB" not in str(p.get("text")) for p in conv.messages[1]["content"])
    prepared = list(conv.messages)
    prepared[1] = with_text(prepared[1], "short")
    assert conv.to_items(prepared) == [
        items[0],
        REASONING,
        {"role": "assistant", "content": "short"},
        items[3],
    ]
    dropped = [prepared[0], prepared[2]]
    assert conv.to_items(dropped) == [items[0], items[3]]  # gone with its turn


def test_wire_extract_build_usage_and_calls() -> None:
    wire = ResponsesWire()
    body = {
        "model": "m",
        "instructions": "sys",
        "input": _items(),
        "tools": [{"type": "function", "name": "f", "parameters": {"type": "object"}}],
        "store": False,
    }
    req = wire.extract(body)
    assert req.messages[0] == {"role": "system", "content": "sys"}
    assert not check_messages(req.messages)
    assert req.tools == [
        {"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}
    ]
    assert json.loads(wire.build(req, req.messages)) == body
    assert json.loads(
        wire.build(wire.extract({"input": "hello"}), [{"role": "user", "content": "hello"}])
    ) == {"input": "hello"}
    resp = {
        "object": "response",
        "output": [
            copy.deepcopy(REASONING),
            {
                "type": "function_call",
                "id": "fc_9",
                "call_id": "call_9",
                "name": "ctx_recall",
                "arguments": '{"ref": "x"}',
            },
        ],
        "usage": {"input_tokens": 321, "output_tokens": 5},
    }
    assert wire.usage(resp) == 321
    turn, calls = wire.assistant_and_calls(resp)
    assert [tuple(c) for c in calls] == [("call_9", "ctx_recall", '{"ref": "x"}')]
    assert turn is not None
    nxt = wire.with_round(req, turn, [("call_9", "recalled")])
    sent = json.loads(wire.build(nxt, nxt.messages))["input"]
    assert (
        sent[-3:]
        == [
            *resp["output"][:2],
            {"type": "function_call_output", "call_id": "call_9", "output": "recalled"},
        ][-3:]
    )
    assert wire.tools(
        [{"type": "function", "function": {"name": "g", "description": "d", "parameters": {}}}]
    ) == [{"type": "function", "name": "g", "description": "d", "parameters": {}}]
    assert wire.error_body(400, "bad")["error"]["message"] == "bad"
    assert wire.stateless(body) and not wire.stateless({**body, "previous_response_id": "resp_1"})


def test_stream_events_give_usage_calls_and_the_answer() -> None:
    wire = ResponsesWire()
    call = {
        "type": "function_call",
        "id": "fc_1",
        "call_id": "call_1",
        "name": "ctx_search",
        "arguments": "",
    }
    done = {
        "object": "response",
        "output": [dict(call, arguments='{"q": "x"}')],
        "usage": {"input_tokens": 77},
    }
    events = [
        {"type": "response.created", "response": {"object": "response", "output": []}},
        {"type": "response.output_item.added", "output_index": 0, "item": REASONING},
        {"type": "response.output_item.added", "output_index": 1, "item": call},
        {"type": "response.function_call_arguments.delta", "output_index": 1, "delta": '{"q": '},
        {"type": "response.function_call_arguments.delta", "output_index": 1, "delta": '"x"}'},
        {"type": "response.completed", "response": done},
    ]
    data = b"".join(format_event(e, e["type"]) for e in events)
    splitter, turn, usage, seen = EventSplitter(), wire.stream_turn(), None, []
    for i in range(0, len(data), 7):  # any chunking
        for ev in splitter.feed(data[i : i + 7]):
            obj = parse_event(ev)
            seen.append(turn.event(obj))
            usage = wire.stream_usage(obj) or usage
    assert usage == 77
    assert seen == [None, "thinking", "call", None, None, None]
    assert turn.names == ["ctx_search"]
    assert [tuple(c) for c in turn.calls()] == [("call_1", "ctx_search", '{"q": "x"}')]
    assert turn.answer() == done


# --------------------------------------------------------------------------- round trip

from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

_t = st.text(min_size=1, max_size=10)


@st.composite
def response_bodies(draw: st.DrawFn) -> dict[str, Any]:
    items: list[dict[str, Any]] = []
    for n in range(draw(st.integers(1, 6))):
        kind = draw(st.sampled_from(["user", "parts", "turn", "calls", "reference"]))
        if kind == "user":
            items.append({"role": "user", "content": draw(_t)})
        elif kind == "parts":
            items.append(
                {
                    "type": "message",
                    "role": "user",
                    "content": [{"type": "input_text", "text": draw(_t)}],
                }
            )
        elif kind == "reference":
            items.append({"type": "item_reference", "id": f"msg_{draw(_t)}"})
        else:
            if draw(st.booleans()):
                items.append(dict(REASONING, id=f"rs_{n}", encrypted_content=draw(_t)))
            if kind == "turn" or draw(st.booleans()):
                items.append(
                    {
                        "type": "message",
                        "role": "assistant",
                        "id": f"msg_{n}",
                        "content": [{"type": "output_text", "text": draw(_t)}],
                    }
                )
            calls = [
                f"call_{n}_{k}" for k in range(draw(st.integers(0 if kind == "turn" else 1, 3)))
            ]
            for cid in calls:
                items.append(
                    {
                        "type": "function_call",
                        "call_id": cid,
                        "name": "f",
                        "arguments": json.dumps({"a": draw(_t)}),
                    }
                )
            for cid in calls:
                items.append({"type": "function_call_output", "call_id": cid, "output": draw(_t)})
    body: dict[str, Any] = {"model": "m", "input": items, "store": False}
    if draw(st.booleans()):
        body["instructions"] = draw(_t)
    return body


@settings(max_examples=80, deadline=None)
@given(response_bodies())
def test_nothing_compacted_sends_the_same_request(body: dict[str, Any]) -> None:
    wire = ResponsesWire()
    req = wire.extract(copy.deepcopy(body))
    assert json.loads(wire.build(req, req.messages)) == body
    assert not check_messages(req.messages)
