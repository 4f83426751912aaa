"""The gateway end to end: real uvicorn, the real openai/anthropic SDKs, the scripted
server as upstream over real HTTP."""

from __future__ import annotations

import contextlib
import json
import threading
from collections.abc import Callable, Iterator
from email.message import Message
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import pytest

from ctxpolicy.engine import Session
from ctxpolicy.gateway.app import environment_proxy
from ctxpolicy.gateway.config import GatewayConfig
from ctxpolicy.testing.server import ScriptedLLMServer
from tests.integrations.conftest import big_output, make_policy, read_history

from .conftest import config_for, run_gateway

openai = pytest.importorskip("openai", reason="the 'openai' extra is not installed")
anthropic = pytest.importorskip("anthropic", reason="the 'anthropic' extra is not installed")

WINDOW = 6000
RESERVE = 512


#: a chat completion, as a hand-written upstream answers
REPLY = json.dumps(
    {
        "id": "c",
        "object": "chat.completion",
        "model": "m",
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": "ok"},
                "finish_reason": "stop",
            }
        ],
        "usage": {"prompt_tokens": 5, "completion_tokens": 1, "total_tokens": 6},
    }
).encode()

_PROXY_VARS = ("http_proxy", "https_proxy", "all_proxy", "no_proxy")

#: a hand-written upstream's answer: the body and its headers (``content-length`` added)
Answer = tuple[bytes, dict[str, str]]


def one_agent_config(tmp_path: Path, upstream: str, **kw: Any) -> GatewayConfig:
    """The gateway of ``test_agent`` alone in front of ``upstream``."""
    policies = {"test_agent": make_policy(tmp_path / "gw")}
    return GatewayConfig(
        policies=policies,
        upstream=upstream,
        default_agent="test_agent",
        secret=b"test-secret",
        **kw,
    )


@contextlib.contextmanager
def hand_server(answer: Callable[[str, str, Message], Answer]) -> Iterator[int]:
    """A hand-written HTTP/1.1 upstream on loopback, for what the scripted server does
    not do: each GET and POST (its body read) is answered 200 with ``answer(method,
    path, headers)``. Yields its port; shut down on exit."""

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: Any) -> None:
            pass

        def _answer(self) -> None:
            body, headers = answer(self.command, self.path, self.headers)
            self.send_response(200)
            for name, value in headers.items():
                self.send_header(name, value)
            self.send_header("content-length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_GET(self) -> None:
            self._answer()

        def do_POST(self) -> None:
            self.rfile.read(int(self.headers.get("content-length") or 0))
            self._answer()

    srv = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    try:
        yield srv.server_address[1]
    finally:
        srv.shutdown()
        srv.server_close()


def history(steps: int) -> list[dict[str, Any]]:
    return read_history(steps, 60, "Fix the failing test in the repository.")


def test_openai_sdk_upstream_gets_what_prepare_sends(
    tmp_path: Path, upstream: ScriptedLLMServer
) -> None:
    with run_gateway(config_for(tmp_path, upstream)) as gw:
        client = openai.OpenAI(base_url=gw.url + "/v1", api_key="key-a", max_retries=0)
        sent: list[list[dict[str, Any]]] = []
        for steps in range(1, 12):
            msgs = history(steps)
            resp = client.chat.completions.create(model="m", messages=msgs)  # type: ignore[arg-type]
            assert resp.choices[0].message.content == "done"
            sent.append(msgs)
        (key,) = list(gw.gateway.pool.open_sessions)
    received = [r.body["messages"] for r in upstream.accepted]
    assert len(received) == len(sent)
    ref = Session(make_policy(tmp_path / "ref"), conv_id=key[1])
    for msgs, got in zip(sent, received, strict=True):
        assert got == ref.prepare(msgs)
    assert all(r.tokens <= WINDOW - RESERVE for r in upstream.accepted)
    assert max(len(m) for m in received) < len(sent[-1])  # it did compact


def test_anthropic_sdk(tmp_path: Path, upstream: ScriptedLLMServer) -> None:
    with run_gateway(config_for(tmp_path, upstream)) as gw:
        client = anthropic.Anthropic(base_url=gw.url, api_key="key-a", max_retries=0)
        for i in range(6):
            msgs: list[dict[str, Any]] = [{"role": "user", "content": "Summarise the logs."}]
            for j in range(i):
                msgs.append(
                    {
                        "role": "assistant",
                        "content": [
                            {
                                "type": "tool_use",
                                "id": f"t{j}",
                                "name": "read_file",
                                "input": {"p": j},
                            }
                        ],
                    }
                )
                msgs.append(
                    {
                        "role": "user",
                        "content": [
                            {
                                "type": "tool_result",
                                "tool_use_id": f"t{j}",
                                "content": big_output(j, 60),
                            }
                        ],
                    }
                )
            resp = client.messages.create(
                model="m", max_tokens=100, system="Be brief.", messages=msgs
            )  # type: ignore[arg-type]
            assert resp.content[0].text == "done"  # type: ignore[union-attr]
    assert upstream.accepted and all(r.api == "anthropic" for r in upstream.accepted)
    assert all(r.tokens <= WINDOW - RESERVE for r in upstream.accepted)
    assert (
        upstream.accepted[-1].body["system"] == "Be brief." or upstream.accepted[-1].body["system"]
    )


def test_overflow_is_retried_through_the_reactive_layer(tmp_path: Path) -> None:
    with ScriptedLLMServer(window=WINDOW, script=[{"overflow": True}, {"content": "ok"}]) as srv:
        with run_gateway(config_for(tmp_path, srv)) as gw:
            client = openai.OpenAI(base_url=gw.url + "/v1", api_key="k", max_retries=0)
            resp = client.chat.completions.create(model="m", messages=history(3))  # type: ignore[arg-type]
            assert resp.choices[0].message.content == "ok"
            assert "ctxpolicy_gateway_overflow_retries_total" in httpx.get(gw.url + "/metrics").text
        assert srv.rejections == 1 and len(srv.accepted) == 1


def test_tenants_get_separate_conversations(tmp_path: Path, upstream: ScriptedLLMServer) -> None:
    with run_gateway(config_for(tmp_path, upstream)) as gw:
        for key in ("tenant-one-secret", "tenant-two-secret"):
            client = openai.OpenAI(base_url=gw.url + "/v1", api_key=key, max_retries=0)
            client.chat.completions.create(model="m", messages=history(2))  # type: ignore[arg-type]
        keys = list(gw.gateway.pool.open_sessions)
        assert len(keys) == 2 and keys[0][1] != keys[1][1]
        assert not any("tenant" in k[1] for k in keys)  # credentials never in ids
    for p in (tmp_path / "gw").rglob("*"):
        if p.is_file():
            assert b"tenant-one-secret" not in p.read_bytes()


def test_routing_limits_health_and_forwarding(tmp_path: Path, upstream: ScriptedLLMServer) -> None:
    with run_gateway(config_for(tmp_path, upstream, default_agent=None, max_body_bytes=4096)) as gw:
        body = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
        r = httpx.post(gw.url + "/v1/chat/completions", json=body)
        assert r.status_code == 404 and "other_agent" in r.text and "test_agent" in r.text
        r = httpx.post(gw.url + "/agents/nope/v1/chat/completions", json=body)
        assert r.status_code == 404 and "'nope'" in r.text
        r = httpx.post(gw.url + "/agents/other_agent/v1/chat/completions", json=body)
        assert r.status_code == 200, r.text
        r = httpx.post(
            gw.url + "/v1/chat/completions", json=body, headers={"X-Ctxpolicy-Agent": "test_agent"}
        )
        assert r.status_code == 200
        big = {"model": "m", "messages": [{"role": "user", "content": "x" * 5000}]}
        r = httpx.post(gw.url + "/agents/test_agent/v1/chat/completions", json=big)
        assert r.status_code == 413 and "--max-body-bytes" in r.text
        r = httpx.post(gw.url + "/agents/test_agent/v1/chat/completions", content=b"{nope")
        assert r.status_code == 400
        assert httpx.get(gw.url + "/healthz").json()["status"] == "ok"
        r = httpx.get(gw.url + "/v1/models")
        assert r.status_code == 200 and r.json()["data"]
        m = httpx.get(gw.url + "/metrics").text
        assert (
            'ctxpolicy_gateway_requests_total{api="chat",agent="other_agent",status="200"} 1' in m
        )


def test_recall_answered_inside_the_gateway(tmp_path: Path) -> None:
    script = [
        {"tool_calls": [{"name": "ctx_search", "arguments": {"query": "value_0_5"}}]},
        {"content": "found it"},
    ]
    with ScriptedLLMServer(window=WINDOW, script=script) as srv:
        with run_gateway(config_for(tmp_path, srv, recall=True)) as gw:
            client = openai.OpenAI(base_url=gw.url + "/v1", api_key="k", max_retries=0)
            resp = client.chat.completions.create(model="m", messages=history(2))  # type: ignore[arg-type]
            assert resp.choices[0].message.content == "found it"
        first, second = srv.accepted
        names = {t["function"]["name"] for t in first.body["tools"]}
        assert {"ctx_recall", "ctx_search"} <= names
        assert second.body["messages"][-1]["role"] == "tool"
        assert all(r.tokens <= WINDOW - RESERVE for r in srv.accepted)


def test_record_writes_each_conversation_as_a_replayable_trace(
    tmp_path: Path, upstream: ScriptedLLMServer
) -> None:
    """``--record DIR`` (issue 31.4): one trace per conversation, the messages as the
    client sent them (tool results raw), replayed by simulate's importer."""
    from ctxpolicy.sim.importers import load_trace

    rec = tmp_path / "traces"
    with run_gateway(config_for(tmp_path, upstream, record=str(rec))) as gw:
        for conv in ("alice", "bob"):
            client = openai.OpenAI(
                base_url=gw.url + "/v1",
                api_key="key-a",
                max_retries=0,
                default_headers={"X-Ctxpolicy-Conversation": conv},
            )
            for steps in (1, 2, 3):
                client.chat.completions.create(model="gpt-4o", messages=history(steps))  # type: ignore[arg-type]
    files = sorted(rec.glob("*.jsonl"))
    assert len(files) == 2  # never one file for two conversations
    for f in files:
        assert f.stat().st_mode & 0o777 == 0o600
        assert load_trace(f) == history(3)  # raw, once each, in order


def test_upstream_cookies_are_passed_on_never_kept(tmp_path: Path) -> None:
    """A cookie the upstream sets reaches the client that got it, and is never sent
    upstream with another client's request (the gateway keeps no cookie jar)."""
    seen: list[str | None] = []

    def answer(method: str, path: str, headers: Message) -> Answer:
        seen.append(headers.get("cookie"))
        kinds = {"content-type": "application/json"}
        return REPLY, {**kinds, "set-cookie": f"session=tenant{len(seen)}; Path=/"}

    with hand_server(answer) as port:
        cfg = one_agent_config(tmp_path, f"http://127.0.0.1:{port}")
        with run_gateway(cfg) as gw:
            body = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
            for key in ("Bearer a", "Bearer b"):
                with httpx.Client() as c:  # a fresh client: no cookie of its own
                    r = c.post(
                        gw.url + "/v1/chat/completions", json=body, headers={"Authorization": key}
                    )
                assert r.status_code == 200, r.text
                assert r.headers["set-cookie"].startswith(f"session=tenant{len(seen)}")
    assert seen == [None, None]


def test_a_compressed_upstream_answer_reaches_the_client_decoded(tmp_path: Path) -> None:
    """The upstream gzips its answers (as providers do when asked): a forwarded path and
    a streamed prepared call reach the client readable, whatever it asked for."""
    import gzip

    models = json.dumps({"object": "list", "data": [{"id": "m", "object": "model"}]}).encode()
    chunk = {
        "id": "c",
        "object": "chat.completion.chunk",
        "model": "m",
        "choices": [{"index": 0, "delta": {"content": "hello"}, "finish_reason": None}],
    }
    events = f"data: {json.dumps(chunk)}\n\ndata: [DONE]\n\n".encode()

    def answer(method: str, path: str, headers: Message) -> Answer:
        body, kind = (
            (models, "application/json") if method == "GET" else (events, "text/event-stream")
        )
        return gzip.compress(body), {"content-type": kind, "content-encoding": "gzip"}

    with hand_server(answer) as port:
        cfg = one_agent_config(tmp_path, f"http://127.0.0.1:{port}", stream_usage=False)
        with run_gateway(cfg) as gw, httpx.Client() as c:
            auth = {"Authorization": "Bearer k", "Accept-Encoding": "identity"}
            r = c.get(gw.url + "/v1/models", headers=auth)
            assert r.status_code == 200 and "content-encoding" not in r.headers
            assert r.json()["data"][0]["id"] == "m"
            body = {"model": "m", "stream": True, "messages": [{"role": "user", "content": "hi"}]}
            r = c.post(gw.url + "/v1/chat/completions", json=body, headers=auth)
            assert r.status_code == 200 and "content-encoding" not in r.headers
            assert '"hello"' in r.text and "[DONE]" in r.text


def test_environment_proxy_reads_the_variables_as_httpx_does(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    for name in _PROXY_VARS:
        monkeypatch.delenv(name, raising=False)
        monkeypatch.delenv(name.upper(), raising=False)
    assert environment_proxy("https://api.example.com") is None
    monkeypatch.setenv("HTTPS_PROXY", "proxy.corp:3128")  # no scheme: http://
    monkeypatch.setenv("ALL_PROXY", "http://all.corp:1")
    assert environment_proxy("https://api.example.com") == "http://proxy.corp:3128"
    assert environment_proxy("http://api.example.com") == "http://all.corp:1"
    monkeypatch.setenv("NO_PROXY", "localhost, example.com")
    assert environment_proxy("https://api.example.com/v1") is None
    assert environment_proxy("https://apiexample.com") == "http://proxy.corp:3128"
    assert environment_proxy("http://localhost:8080") is None
    monkeypatch.setenv("NO_PROXY", "*")
    assert environment_proxy("https://elsewhere.org") is None


def test_the_proxy_the_environment_names_carries_upstream_calls(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, upstream: ScriptedLLMServer
) -> None:
    """HTTP_PROXY is honoured for the upstream (the request reaches the proxy in absolute
    form, for a host only the proxy can reach), and NO_PROXY exempts a host from it."""
    for name in _PROXY_VARS:
        monkeypatch.delenv(name, raising=False)
        monkeypatch.delenv(name.upper(), raising=False)
    targets: list[str] = []

    def answer(method: str, path: str, headers: Message) -> Answer:
        targets.append(path)
        return REPLY, {"content-type": "application/json"}

    body = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
    auth = {"Authorization": "Bearer k"}
    cfg = one_agent_config(tmp_path, "http://llm.invalid:9/v1")
    # the test's own calls: not through the proxy
    with hand_server(answer) as port, httpx.Client(trust_env=False) as direct:
        monkeypatch.setenv("HTTP_PROXY", f"http://127.0.0.1:{port}")
        with run_gateway(cfg) as gw:
            r = direct.post(gw.url + "/v1/chat/completions", json=body, headers=auth)
            assert r.status_code == 200, r.text
            assert r.json()["choices"][0]["message"]["content"] == "ok"
        assert targets == ["http://llm.invalid:9/v1/chat/completions"]
        # the scripted upstream on loopback, exempt: reached directly, the proxy unused
        monkeypatch.setenv("NO_PROXY", "127.0.0.1")
        with run_gateway(config_for(tmp_path, upstream)) as gw:
            r = direct.post(gw.url + "/v1/chat/completions", json=body, headers=auth)
            assert r.status_code == 200, r.text
        assert len(targets) == 1 and len(upstream.requests) == 1
