"""The Anthropic Messages wire: what reaches the provider after compaction.

Real ``anthropic`` SDK (through :func:`ctxpolicy.integrations.anthropic.wrap`) against the
project's scripted server, which rejects a prompt over its window as the provider does.
"""

from __future__ import annotations

import base64
import copy
import json
import struct
import zlib
from pathlib import Path
from typing import Any

import pytest

from ctxpolicy.conversation import check_messages, content_text
from ctxpolicy.conversation.messages import with_text
from ctxpolicy.engine import Session
from ctxpolicy.testing.server import ScriptedLLMServer, count_anthropic_tokens
from ctxpolicy.wire.anthropic import (
    IMAGE_MAX_TOKENS,
    AnthropicConversation,
    AnthropicWire,
    image_tokens,
)
from tests.integrations.conftest import assert_pairing, make_policy
from tests.timing import assert_linear

anthropic = pytest.importorskip("anthropic", reason="the 'anthropic' extra is not installed")


def _client(srv: ScriptedLLMServer) -> Any:
    return anthropic.Anthropic(base_url=srv.anthropic_base_url, api_key="test", max_retries=0)


def _wrap(srv: ScriptedLLMServer, session: Session) -> Any:
    from ctxpolicy.integrations.anthropic import wrap

    return wrap(_client(srv), session)


def _read(i: int) -> list[dict[str, Any]]:
    return [
        {
            "role": "assistant",
            "content": [
                {"type": "tool_use", "id": f"toolu_r{i}", "name": "read", "input": {"p": i}}
            ],
        },
        {
            "role": "user",
            "content": [{"type": "tool_result", "tool_use_id": f"toolu_r{i}", "content": "ok"}],
        },
    ]


def _blocks(body: dict[str, Any], role: str) -> list[list[dict[str, Any]]]:
    return [
        m["content"]
        for m in body["messages"]
        if m["role"] == role and isinstance(m["content"], list)
    ]


BIG = "\n".join(f"line {i}: value = compute({i})  # the module being written" for i in range(600))


# --------------------------------------------------------------------------- squeezed input


WRITE = {"path": "a.py", "content": BIG}


def _write_history() -> list[dict[str, Any]]:
    """Two small rounds, then a large ``write_file`` input in the last round: it only
    fits the 6,000-token window shortened."""
    history: list[dict[str, Any]] = [{"role": "user", "content": "Task: write the module"}]
    history += _read(1) + _read(2)
    history += [
        {
            "role": "assistant",
            "content": [
                {"type": "text", "text": "Writing it."},
                {"type": "tool_use", "id": "toolu_w", "name": "write_file", "input": WRITE},
            ],
        },
        {
            "role": "user",
            "content": [{"type": "tool_result", "tool_use_id": "toolu_w", "content": "written"}],
        },
    ]
    return history


def _assert_squeezed_input(srv: ScriptedLLMServer) -> None:
    assert srv.rejections == 0 and srv.records
    for r in srv.records:
        (use,) = [
            b
            for blocks in _blocks(r.body, "assistant")
            for b in blocks
            if b["type"] == "tool_use" and b["name"] == "write_file"
        ]
        assert isinstance(use["input"], dict)  # Anthropic's input is an object
        assert len(json.dumps(use["input"])) < len(json.dumps(WRITE)) // 2
        assert use["input"]["path"] == "a.py" and "removed to fit" in use["input"]["content"]


def test_a_squeezed_tool_use_input_stays_a_squeezed_object(tmp_path: Path) -> None:
    session = Session(make_policy(tmp_path, window=6000))
    with ScriptedLLMServer(window=6000, script=[{"content": "ok"}] * 3) as srv:
        client = _wrap(srv, session)
        for _ in range(2):
            client.messages.create(model="m", max_tokens=256, messages=_write_history())
        _assert_squeezed_input(srv)


def test_through_the_gateway_a_squeezed_tool_use_input_fits(tmp_path: Path) -> None:
    from tests.gateway.conftest import config_for, run_gateway

    with (
        ScriptedLLMServer(window=6000, script=[{"content": "ok"}] * 3) as srv,
        run_gateway(config_for(tmp_path, srv)) as gw,
    ):
        client = anthropic.Anthropic(base_url=gw.url, api_key="test", max_retries=0)
        for _ in range(2):
            client.messages.create(model="m", max_tokens=256, messages=_write_history())
        _assert_squeezed_input(srv)


# --------------------------------------------------------------------------- thinking

THINK = "private-reasoning " * 120


def _thinking_history() -> tuple[list[dict[str, Any]], dict[str, dict[str, Any]]]:
    """Assistant turns with signed thinking and long text (squeezed to fit): the first
    without a tool call, the next ones with one."""
    history: list[dict[str, Any]] = [{"role": "user", "content": "Task: fix it"}]
    thinking: dict[str, dict[str, Any]] = {}
    for i in range(3):
        block = {"type": "thinking", "thinking": f"{THINK}#{i}", "signature": f"sig-{i}=="}
        thinking[f"turn-{i}"] = block
        content: list[dict[str, Any]] = [copy.deepcopy(block)]
        content.append({"type": "text", "text": f"turn-{i} " + "explanation " * 4000})
        if i == 0:
            history += [
                {"role": "assistant", "content": content},
                {"role": "user", "content": "continue"},
            ]
            continue
        content.append({"type": "tool_use", "id": f"toolu_{i}", "name": "read", "input": {"p": i}})
        history += [
            {"role": "assistant", "content": content},
            {
                "role": "user",
                "content": [{"type": "tool_result", "tool_use_id": f"toolu_{i}", "content": "ok"}],
            },
        ]
    history.append({"role": "user", "content": "go on"})
    return history, thinking


def test_thinking_stays_a_signed_block_never_text(tmp_path: Path) -> None:
    history, thinking = _thinking_history()
    session = Session(make_policy(tmp_path, window=6000, keep_recent_rounds=10))
    with ScriptedLLMServer(window=6000, script=[{"content": "ok"}] * 3) as srv:
        _wrap(srv, session).messages.create(model="m", max_tokens=256, messages=history)
        assert srv.rejections == 0
        (body,) = [r.body for r in srv.records]
    squeezed = 0
    for blocks in _blocks(body, "assistant"):
        texts = [b["text"] for b in blocks if b["type"] == "text"]
        assert not any("private-reasoning" in t for t in texts)  # never visible text
        signed = [b for b in blocks if b["type"] in ("thinking", "redacted_thinking")]
        turn = next(t.split()[0] for t in texts)
        assert signed == [thinking[turn]]  # kept, once, byte-identical
        assert blocks[0] == thinking[turn]  # first in its turn
        squeezed += any("removed to fit" in t for t in texts)
    assert squeezed >= 1  # the case is exercised: a rewritten turn kept its thinking


@pytest.mark.parametrize("with_call", [False, True])
def test_a_rewritten_turn_keeps_its_thinking_once(with_call: bool) -> None:
    history, thinking = _thinking_history()
    conv = AnthropicConversation(history)
    turn = 3 if with_call else 1  # turn-1 (with a call) or turn-0 (without)
    prepared = list(conv.messages)
    head = content_text(prepared[turn]["content"])[:300]  # squeezing keeps a head and a tail
    prepared[turn] = with_text(prepared[turn], head + " [cut]")
    sent = conv.to_request(prepared).kwargs()["messages"]
    (blocks,) = [m["content"] for m in sent if "[cut]" in json.dumps(m)]
    key = "turn-1" if with_call else "turn-0"
    assert blocks[:2] == [thinking[key], {"type": "text", "text": head + " [cut]"}]
    assert not any("private-reasoning" in str(b.get("text")) for b in blocks)
    assert [b["type"] for b in blocks[2:]] == (["tool_use"] if with_call else [])


def test_redacted_thinking_and_signature_are_byte_identical() -> None:
    red = {"type": "redacted_thinking", "data": "EmwKAhgBEgy3va3pzix/LafPsn4a"}
    think = {"type": "thinking", "thinking": "🤔 x\u2028y", "signature": "c2ln/+=="}
    messages = [
        {"role": "user", "content": "hi"},
        {
            "role": "assistant",
            "content": [red, think, {"type": "text", "text": "long " * 50}],
        },
        {"role": "user", "content": "more"},
    ]
    conv = AnthropicConversation(messages)
    prepared = copy.deepcopy(conv.messages)
    parts = prepared[1]["content"]
    for p in parts:
        if p.get("type") == "text":
            p["text"] = "short"
    out = conv.to_request(prepared).kwargs()["messages"][1]["content"]
    assert out == [red, think, {"type": "text", "text": "short"}]
    assert json.dumps(out[:2]) == json.dumps([red, think])


# --------------------------------------------------------------------------- images, documents


def _png(width: int, height: int) -> str:
    head = b"\x89PNG\r\n\x1a\n" + struct.pack(">I", 13) + b"IHDR"
    ihdr = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return base64.b64encode(head + ihdr + struct.pack(">I", zlib.crc32(b"IHDR" + ihdr))).decode()


def test_image_tokens_follow_anthropics_rule() -> None:
    assert image_tokens(200, 200) == 54  # ceil(200*200/750)
    assert image_tokens(1092, 1092) == 1590
    assert image_tokens(4000, 3000) == IMAGE_MAX_TOKENS  # resized by the provider
    assert image_tokens(None, None) == IMAGE_MAX_TOKENS
    block = {"type": "image", "source": {"type": "base64", "media_type": "image/png"}}
    block["source"]["data"] = _png(300, 150)
    conv = AnthropicConversation([{"role": "user", "content": [block]}])
    (part,) = conv.messages[0]["content"]
    assert part["tokens"] == 60


def _pdf(pages: int) -> str:
    objs = b"".join(b"<< /Type /Page /Parent 2 0 R >>\n" for _ in range(pages))
    return base64.b64encode(b"%PDF-1.4\n<< /Type /Pages /Count 9 >>\n" + objs).decode()


def test_screenshots_and_pdfs_in_tool_results_never_overflow(tmp_path: Path) -> None:
    session = Session(make_policy(tmp_path, window=6000, max_chars=3000))

    def result(step: int) -> list[dict[str, Any]]:
        doc = {"type": "base64", "media_type": "application/pdf", "data": _pdf(1)}
        img = {"type": "url", "url": f"https://example.com/shot-{step}.png"}
        attach = (
            {"type": "document", "source": doc} if step % 2 else {"type": "image", "source": img}
        )
        return [{"type": "text", "text": f"screen {step}"}, attach]

    def provider(body: dict[str, Any]) -> dict[str, Any]:
        # the scripted server counts top-level images only; the provider counts every
        # image and document, tool results included (1,600 each here)
        nested = sum(
            1
            for blocks in _blocks(body, "user")
            for tr in blocks
            if tr["type"] == "tool_result" and isinstance(tr["content"], list)
            for b in tr["content"]
            if b["type"] in ("image", "document")
        )
        if count_anthropic_tokens(body) + 1600 * nested > 6000:
            return {"overflow": True}
        return {"tool_calls": [{"name": "shot", "arguments": {"n": len(body["messages"])}}]}

    with ScriptedLLMServer(window=6000, script=provider) as srv:
        client = _wrap(srv, session)
        history: list[dict[str, Any]] = [{"role": "user", "content": "Task: check the UI"}]
        for step in range(8):
            resp = client.messages.create(model="m", max_tokens=256, messages=history)
            history.append({"role": "assistant", "content": [b.model_dump() for b in resp.content]})
            (use,) = [b for b in resp.content if b.type == "tool_use"]
            history.append(
                {
                    "role": "user",
                    "content": [
                        {"type": "tool_result", "tool_use_id": use.id, "content": result(step)}
                    ],
                }
            )
        assert srv.rejections == 0
        assert len(srv.accepted) == 8
        last = srv.records[-1].body
        assert_pairing(AnthropicConversation(last["messages"]).messages)
        kept = [
            b["type"]
            for blocks in _blocks(last, "user")
            for tr in blocks
            if tr["type"] == "tool_result" and isinstance(tr["content"], list)
            for b in tr["content"]
        ]
        assert "image" in kept or "document" in kept  # recent ones are still sent


# --------------------------------------------------------------------------- linear time


def _parallel(n: int) -> dict[str, Any]:
    uses = [
        {"type": "tool_use", "id": f"toolu_{i:06d}", "name": "read", "input": {"p": i}}
        for i in range(n)
    ]
    results = [
        {"type": "tool_result", "tool_use_id": f"toolu_{i:06d}", "content": f"r{i}"}
        for i in range(n)
    ]
    return {
        "model": "m",
        "max_tokens": 10,
        "messages": [
            {"role": "user", "content": "go"},
            {"role": "assistant", "content": uses},
            {"role": "user", "content": [*results, {"type": "text", "text": "next"}]},
        ],
    }


def test_conversion_is_linear_in_the_number_of_blocks() -> None:
    wire = AnthropicWire()

    def run(body: dict[str, Any]) -> None:
        req = wire.extract(body)
        prepared = [dict(m) for m in req.messages]
        prepared[-1] = {**prepared[-1], "content": "next (rewritten)"}  # one rebuilt message
        wire.build(req, prepared)

    small, large = _parallel(1000), _parallel(8000)  # 8x the blocks (CPU time)
    assert_linear(run, small, large, floor=1e-3, what="tool_use blocks")


def test_parallel_results_come_back_in_one_user_turn() -> None:
    wire = AnthropicWire()
    body = _parallel(50)
    req = wire.extract(body)
    out = json.loads(wire.build(req, req.messages))
    assert out["messages"] == body["messages"]
    prepared = [m for m in req.messages if m.get("tool_call_id") != "toolu_000007"]
    prepared = [
        m
        if m["role"] != "assistant"
        else {**m, "tool_calls": m["tool_calls"][:7] + m["tool_calls"][8:]}
        for m in prepared
    ]
    turn = json.loads(wire.build(req, prepared))["messages"][2]["content"]
    assert [b["type"] for b in turn] == ["tool_result"] * 49 + ["text"]


# --------------------------------------------------------------------------- system in place


def test_a_mid_conversation_system_message_stays_in_its_place() -> None:
    conv = AnthropicConversation(
        [{"role": "user", "content": "task"}, {"role": "assistant", "content": "a1"}],
        system="You are helpful.",
    )
    prepared = [
        conv.messages[0],
        conv.messages[1],
        {"role": "system", "content": "[ledger] done: step 1"},
        conv.messages[2],
        {"role": "system", "content": "<system-reminder>be brief</system-reminder>"},
        {"role": "user", "content": "next"},
    ]
    kw = conv.to_request(prepared).kwargs()
    assert kw["system"] == "You are helpful."  # the client's own system prompt only
    assert kw["messages"] == [
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "task"},
                {"type": "text", "text": "[ledger] done: step 1"},
            ],
        },
        {"role": "assistant", "content": "a1"},
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "<system-reminder>be brief</system-reminder>"},
                {"type": "text", "text": "next"},
            ],
        },
    ]


# --------------------------------------------------------------------------- round trip

from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

_text = st.text(min_size=1, max_size=12)
_text_block = st.builds(lambda t: {"type": "text", "text": t}, _text)
_media = st.sampled_from(
    [
        {"type": "image", "source": {"type": "url", "url": "https://x/a.png"}},
        {
            "type": "image",
            "source": {"type": "base64", "media_type": "image/png", "data": _png(8, 8)},
        },
        {
            "type": "document",
            "source": {"type": "base64", "media_type": "application/pdf", "data": _pdf(2)},
        },
        {
            "type": "document",
            "source": {"type": "text", "media_type": "text/plain", "data": "d"},
            "title": "t",
        },
    ]
)
_thinking = st.one_of(
    st.builds(lambda t, s: {"type": "thinking", "thinking": t, "signature": s}, _text, _text),
    st.builds(lambda d: {"type": "redacted_thinking", "data": d}, _text),
)


@st.composite
def anthropic_bodies(draw: st.DrawFn) -> dict[str, Any]:
    messages: list[dict[str, Any]] = []
    pending: list[str] = []
    n_calls = 0
    for _ in range(draw(st.integers(1, 6))):
        results = [
            {
                "type": "tool_result",
                "tool_use_id": cid,
                "content": draw(
                    st.one_of(
                        _text, st.lists(st.one_of(_text_block, _media), min_size=1, max_size=2)
                    )
                ),
                **({"is_error": True} if draw(st.booleans()) else {}),
            }
            for cid in pending
        ]
        others = draw(st.lists(st.one_of(_text_block, _media), max_size=2))
        content: Any = [*results, *others]
        if not content:
            content = draw(_text)
        messages.append({"role": "user", "content": content})
        blocks: list[dict[str, Any]] = draw(st.lists(_thinking, max_size=2))
        blocks += draw(st.lists(_text_block, max_size=2))
        pending = []
        for _ in range(draw(st.integers(0, 3))):
            n_calls += 1
            pending.append(f"toolu_{n_calls}")
            args = draw(
                st.dictionaries(st.sampled_from(["a", "b"]), st.integers() | _text, max_size=2)
            )
            blocks.append({"type": "tool_use", "id": pending[-1], "name": "f", "input": args})
        messages.append({"role": "assistant", "content": blocks or draw(_text)})
    if pending:
        messages.append(
            {
                "role": "user",
                "content": [
                    {"type": "tool_result", "tool_use_id": c, "content": "r"} for c in pending
                ],
            }
        )
    body: dict[str, Any] = {"model": "m", "max_tokens": 5, "messages": messages}
    system = draw(st.one_of(st.none(), _text, st.lists(_text_block, min_size=1, max_size=2)))
    if system is not None:
        body["system"] = system
    return body


@settings(max_examples=80, deadline=None)
@given(anthropic_bodies())
def test_nothing_compacted_sends_the_same_request(body: dict[str, Any]) -> None:
    wire = AnthropicWire()
    req = wire.extract(copy.deepcopy(body))
    assert json.loads(wire.build(req, req.messages)) == body
    assert not check_messages(req.messages)


def test_a_streamed_answer_keeps_its_signed_thinking_for_the_next_turn() -> None:
    from ctxpolicy.wire.sse import EventSplitter, parse_event

    think = {"type": "thinking", "thinking": "plan: recall it", "signature": "c2lnbmF0dXJl"}
    events = [
        {
            "type": "message_start",
            "message": {
                "id": "msg_1",
                "role": "assistant",
                "content": [],
                "usage": {"input_tokens": 40},
            },
        },
        {
            "type": "content_block_start",
            "index": 0,
            "content_block": {"type": "thinking", "thinking": "", "signature": ""},
        },
        {
            "type": "content_block_delta",
            "index": 0,
            "delta": {"type": "thinking_delta", "thinking": "plan: "},
        },
        {
            "type": "content_block_delta",
            "index": 0,
            "delta": {"type": "thinking_delta", "thinking": "recall it"},
        },
        {
            "type": "content_block_delta",
            "index": 0,
            "delta": {"type": "signature_delta", "signature": "c2lnbmF0dXJl"},
        },
        {
            "type": "content_block_start",
            "index": 1,
            "content_block": {
                "type": "tool_use",
                "id": "toolu_1",
                "name": "ctx_recall",
                "input": {},
            },
        },
        {
            "type": "content_block_delta",
            "index": 1,
            "delta": {"type": "input_json_delta", "partial_json": '{"ref": "x"}'},
        },
        {
            "type": "message_delta",
            "delta": {"stop_reason": "tool_use"},
            "usage": {"output_tokens": 9},
        },
    ]
    data = b"".join(b"event: e\ndata: " + json.dumps(e).encode() + b"\n\n" for e in events)
    wire, splitter = AnthropicWire(), EventSplitter()
    turn, seen, usage = wire.stream_turn(), [], None
    for i in range(0, len(data), 5):
        for ev in splitter.feed(data[i : i + 5]):
            obj = parse_event(ev)
            seen.append(turn.event(obj))
            usage = wire.stream_usage(obj) or usage
    assert usage == 40
    assert [s for s in seen if s] == ["thinking", "call"]
    answer = turn.answer()
    assert answer["content"] == [
        think,
        {"type": "tool_use", "id": "toolu_1", "name": "ctx_recall", "input": {"ref": "x"}},
    ]
    nxt = wire.with_round(
        wire.extract({"messages": [{"role": "user", "content": "q"}]}),
        answer,
        [("toolu_1", "found")],
    )
    sent = json.loads(wire.build(nxt, nxt.messages))["messages"]
    assert sent[1]["content"][0] == think  # byte-identical in the next request
