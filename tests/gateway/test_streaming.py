"""Streaming passes through as it arrives: the client holds the first chunk while the
upstream is still waiting to send the rest (a real streaming upstream on uvicorn)."""

from __future__ import annotations

import json
import threading
from collections.abc import AsyncIterator, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import anyio
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import StreamingResponse
from starlette.routing import Route

from ctxpolicy.gateway.app import GatewayConfig
from tests.integrations.conftest import make_policy

from .conftest import RunningGateway, run_asgi, run_gateway

openai = pytest.importorskip("openai", reason="the 'openai' extra is not installed")
anthropic = pytest.importorskip("anthropic", reason="the 'anthropic' extra is not installed")


class StreamingUpstream:
    """Sends the first SSE event, then waits for ``release`` before the rest."""

    def __init__(self) -> None:
        self.release = threading.Event()
        self.bodies: list[dict[str, Any]] = []

    def app(self) -> Starlette:
        async def chat(request: Request) -> StreamingResponse:
            self.bodies.append(json.loads(await request.body()))

            def ev(delta: dict[str, Any], usage: Any = None, finish: Any = None) -> bytes:
                chunk = {
                    "id": "c1",
                    "object": "chat.completion.chunk",
                    "created": 0,
                    "model": "m",
                    "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
                }
                if usage:
                    chunk["usage"] = usage
                return b"data: " + json.dumps(chunk).encode() + b"\n\n"

            async def gen() -> AsyncIterator[bytes]:
                yield ev({"role": "assistant", "content": "Hel"})
                await anyio.to_thread.run_sync(self.release.wait, 10)
                yield ev({"content": "lo"})
                yield ev(
                    {}, {"prompt_tokens": 42, "completion_tokens": 2, "total_tokens": 44}, "stop"
                )
                yield b"data: [DONE]\n\n"

            return StreamingResponse(gen(), media_type="text/event-stream")

        async def messages(request: Request) -> StreamingResponse:
            self.bodies.append(json.loads(await request.body()))

            def ev(kind: str, data: dict[str, Any]) -> bytes:
                return f"event: {kind}\ndata: {json.dumps({'type': kind, **data})}\n\n".encode()

            async def gen() -> AsyncIterator[bytes]:
                msg = {
                    "id": "m1", "type": "message", "role": "assistant", "model": "m",
                    "content": [], "stop_reason": None, "stop_sequence": None,
                    "usage": {"input_tokens": 37, "output_tokens": 1},
                }  # fmt: skip
                yield ev("message_start", {"message": msg})
                yield ev(
                    "content_block_start",
                    {"index": 0, "content_block": {"type": "text", "text": ""}},
                )
                yield ev(
                    "content_block_delta",
                    {"index": 0, "delta": {"type": "text_delta", "text": "Hel"}},
                )
                await anyio.to_thread.run_sync(self.release.wait, 10)
                yield ev(
                    "content_block_delta",
                    {"index": 0, "delta": {"type": "text_delta", "text": "lo"}},
                )
                yield ev("content_block_stop", {"index": 0})
                yield ev(
                    "message_delta",
                    {
                        "delta": {"stop_reason": "end_turn", "stop_sequence": None},
                        "usage": {"output_tokens": 2},
                    },
                )
                yield ev("message_stop", {})

            return StreamingResponse(gen(), media_type="text/event-stream")

        return Starlette(
            routes=[
                Route("/v1/chat/completions", chat, methods=["POST"]),
                Route("/v1/messages", messages, methods=["POST"]),
            ]
        )


@contextmanager
def streaming_gateway(
    tmp_path: Path, **config: Any
) -> Iterator[tuple[StreamingUpstream, RunningGateway]]:
    """A gateway (agent ``a``, ``config`` added) in front of a ``StreamingUpstream``."""
    up = StreamingUpstream()
    with run_asgi(up.app()) as upstream:
        cfg = GatewayConfig(
            policies={"a": make_policy(tmp_path)},
            upstream=upstream.url,
            default_agent="a",
            secret=b"s",
            **config,
        )
        with run_gateway(cfg) as gw:
            yield up, gw


def test_openai_and_anthropic_streams_pass_through(tmp_path: Path) -> None:
    with streaming_gateway(tmp_path) as (up, gw):
        client = openai.OpenAI(base_url=gw.url + "/v1", api_key="k", max_retries=0)
        stream = client.chat.completions.create(
            model="m", messages=[{"role": "user", "content": "hi"}], stream=True
        )
        it = iter(stream)
        first = next(it)  # arrives while the upstream still holds the rest
        assert first.choices[0].delta.content == "Hel"
        up.release.set()
        rest = "".join(c.choices[0].delta.content or "" for c in it if c.choices)
        assert rest == "lo"
        assert len(gw.gateway.pool.open_sessions) == 1

        up.release.clear()
        ac = anthropic.Anthropic(base_url=gw.url, api_key="k", max_retries=0)
        with ac.messages.stream(
            model="m", max_tokens=10, messages=[{"role": "user", "content": "hi"}]
        ) as s:
            texts = iter(s.text_stream)
            assert next(texts) == "Hel"
            up.release.set()
            assert "".join(texts) == "lo"
    assert up.bodies[0]["stream"] is True and up.bodies[0]["messages"][0]["content"] == "hi"


def test_sdk_streams_replay_like_prepare_and_record_usage(tmp_path: Path) -> None:
    from ctxpolicy.engine import Session
    from ctxpolicy.testing.server import ScriptedLLMServer

    from .conftest import config_for
    from .test_app import RESERVE, WINDOW, history

    with ScriptedLLMServer(window=WINDOW) as srv:
        with run_gateway(config_for(tmp_path, srv)) as gw:
            client = openai.OpenAI(base_url=gw.url + "/v1", api_key="k", max_retries=0)
            sent = []
            for steps in range(1, 10):
                msgs = history(steps)
                chunks = list(
                    client.chat.completions.create(model="m", messages=msgs, stream=True)  # type: ignore[call-overload]
                )
                assert "".join(c.choices[0].delta.content or "" for c in chunks) == "done"
                assert all(c.choices and c.usage is None for c in chunks)  # not asked for
                sent.append(msgs)
            ((key, session),) = list(gw.gateway.pool.open_sessions.items())
            assert session.state.usage_seen  # record_usage got the streamed prompt tokens
            ac = anthropic.Anthropic(base_url=gw.url, api_key="k", max_retries=0)
            with ac.messages.stream(
                model="m", max_tokens=10, messages=[{"role": "user", "content": "hi"}]
            ) as s:
                assert s.get_final_text() == "done"
            anth = [v for k, v in gw.gateway.pool.open_sessions.items() if k != key]
            assert anth and anth[0].state.usage_seen
        chat = [r for r in srv.accepted if r.api == "chat"]
        assert all(r.body["stream_options"] == {"include_usage": True} for r in chat)
        ref = Session(make_policy(tmp_path / "ref"), conv_id=key[1])
        for msgs, got in zip(sent, chat, strict=True):
            assert got.body["messages"] == ref.prepare(msgs)
        assert all(r.tokens <= WINDOW - RESERVE for r in srv.accepted)


def test_streamed_text_starts_at_once_with_recall(tmp_path: Path) -> None:
    """With --recall, a streamed answer that is not a recall call reaches the client
    while the upstream still holds the rest (the probe decides on the first text)."""
    with streaming_gateway(tmp_path, recall=True) as (up, gw):
        client = openai.OpenAI(base_url=gw.url + "/v1", api_key="k", max_retries=0)
        stream = client.chat.completions.create(
            model="m", messages=[{"role": "user", "content": "hi"}], stream=True
        )
        it = iter(stream)
        assert next(it).choices[0].delta.content == "Hel"
        up.release.set()
        assert "".join(c.choices[0].delta.content or "" for c in it if c.choices) == "lo"
    names = {t["function"]["name"] for t in up.bodies[0]["tools"]}
    assert names == {"ctx_recall", "ctx_search"}


def _recall_script() -> Any:
    """The model recalls the truncated output's original line, then says what it got."""
    import re

    want = "value_0_350 = compute(350, step=0)"

    def texts(msg: dict[str, Any]) -> str:
        return json.dumps(msg.get("content"))

    def script(body: dict[str, Any]) -> dict[str, Any]:
        msgs = body["messages"]
        last = json.dumps(msgs[-1])
        if "ctx_recall_1" in last:  # the gateway's answer to the recall call
            return {"content": "recalled: " + ("yes" if want in last else "no")}
        refs = re.findall(r"ctxsnap://[^\s)\]\"\\]+", "".join(texts(m) for m in msgs))
        if not refs:
            return {"content": "no ref"}
        args = {"ref": refs[-1], "grep": "value_0_350"}
        return {"tool_calls": [{"id": "ctx_recall_1", "name": "ctx_recall", "arguments": args}]}

    return script


def test_recall_inside_the_gateway_with_openai_and_anthropic_streams(tmp_path: Path) -> None:
    from ctxpolicy.testing.server import ScriptedLLMServer
    from tests.integrations.conftest import big_output

    from .conftest import config_for

    call = {"name": "read_file", "arguments": '{"path": "f0.py"}'}
    chat = [
        {"role": "system", "content": "You are a coding agent."},
        {"role": "user", "content": "Fix the failing test."},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [{"id": "c0", "type": "function", "function": call}],
        },
        {"role": "tool", "tool_call_id": "c0", "content": big_output(0, 400)},
    ]
    anth = [
        {"role": "user", "content": "Fix the failing test."},
        {
            "role": "assistant",
            "content": [
                {"type": "tool_use", "id": "c0", "name": "read_file", "input": {"path": "f0.py"}}
            ],
        },
        {
            "role": "user",
            "content": [
                {"type": "tool_result", "tool_use_id": "c0", "content": big_output(0, 400)}
            ],
        },
    ]
    with ScriptedLLMServer(window=20_000, script=_recall_script()) as srv:
        cfg = config_for(tmp_path, srv, recall=True)
        with run_gateway(cfg) as gw:
            client = openai.OpenAI(base_url=gw.url + "/v1", api_key="k", max_retries=0)
            chunks = list(client.chat.completions.create(model="m", messages=chat, stream=True))  # type: ignore[call-overload]
            text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
            assert text == "recalled: yes"
            assert not any(c.choices and c.choices[0].delta.tool_calls for c in chunks)
            ac = anthropic.Anthropic(base_url=gw.url, api_key="k", max_retries=0)
            with ac.messages.stream(
                model="m", max_tokens=10, system="You are a coding agent.", messages=anth
            ) as s:
                assert s.get_final_text() == "recalled: yes"
                assert [b.type for b in s.get_final_message().content] == ["text"]
        first, second, third, fourth = srv.accepted
    assert all(r.body["stream"] is True for r in (first, second, third, fourth))
    assert second.body["messages"][-1]["role"] == "tool"  # answered inside the gateway
    assert fourth.body["messages"][-1]["content"][0]["type"] == "tool_result"


def test_a_client_gone_mid_stream_releases_its_conversation(tmp_path: Path) -> None:
    """The next call of the conversation is served, not left waiting on its lock."""
    import httpx

    body = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "stream": True}
    with streaming_gateway(tmp_path) as (up, gw):
        with (
            httpx.Client(timeout=10) as c,
            c.stream("POST", gw.url + "/v1/chat/completions", json=body) as r,
        ):
            assert b"Hel" in next(r.iter_raw())
        # the client hung up while the upstream still holds the rest
        up.release.set()
        with httpx.Client(timeout=10) as c:
            r = c.post(gw.url + "/v1/chat/completions", json=body)
            assert r.status_code == 200 and b"lo" in r.content
        assert len(gw.gateway.pool.open_sessions) == 1
