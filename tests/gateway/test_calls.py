"""One prepared call: a client that leaves cancels it, provider errors keep their headers,
a fixed prefix over the budget is a clear error, a huge body never stalls the loop."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from ctxpolicy.testing.server import ScriptedLLMServer

from .conftest import config_for, run_gateway

BODY = {"model": "m", "messages": [{"role": "user", "content": "Fix the failing test."}]}


def _wait_for(pred: Any, seconds: float = 5.0) -> bool:
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        if pred():
            return True
        time.sleep(0.02)
    return bool(pred())


@pytest.mark.parametrize("stream", [False, True])
def test_a_client_that_leaves_releases_its_conversation(tmp_path: Path, stream: bool) -> None:
    """The upstream is slow (5 s); the client gives up after 0.5 s and retries: the retry
    is answered at once (not after the abandoned call) and the upstream call is cancelled."""
    script = [{"content": "warm"}, {"content": "slow", "delay": 5.0}, {"content": "fast"}]
    with (
        ScriptedLLMServer(window=6000, script=script) as srv,
        run_gateway(config_for(tmp_path, srv)) as gw,
    ):
        headers = {"Authorization": "Bearer k", "X-Ctxpolicy-Conversation": "c1"}
        body = {**BODY, "stream": stream}
        warm = {**headers, "X-Ctxpolicy-Conversation": "warm-up"}  # tokenizer loaded
        assert httpx.post(gw.url + "/v1/chat/completions", json=body, headers=warm).is_success
        with pytest.raises(httpx.ReadTimeout):
            httpx.post(gw.url + "/v1/chat/completions", json=body, headers=headers, timeout=0.5)
        t0 = time.perf_counter()
        r = httpx.post(gw.url + "/v1/chat/completions", json=body, headers=headers, timeout=10)
        took = time.perf_counter() - t0
        assert r.status_code == 200 and "fast" in r.text
        assert took < 2.0, took
        assert _wait_for(lambda: srv.abandoned == 1)  # the upstream saw it cancelled
        m = httpx.get(gw.url + "/metrics").text
        assert "ctxpolicy_gateway_client_disconnects_total" in m


@pytest.mark.parametrize("path", ["/v1/chat/completions", "/v1/messages"])
def test_provider_errors_keep_their_headers(tmp_path: Path, path: str) -> None:
    headers = {
        "retry-after": "7",
        "x-should-retry": "true",
        "x-request-id": "req_123",
        "request-id": "req_123",
        "x-ratelimit-remaining-requests": "0",
        "anthropic-ratelimit-requests-remaining": "0",
    }
    script = [{"status": 429, "headers": headers}]
    with (
        ScriptedLLMServer(window=6000, script=script) as srv,
        run_gateway(config_for(tmp_path, srv)) as gw,
    ):
        r = httpx.post(gw.url + path, json=BODY, headers={"x-api-key": "k"})
    assert r.status_code == 429
    for k, v in headers.items():
        assert r.headers.get(k) == v, k


@pytest.mark.parametrize("path", ["/v1/chat/completions", "/v1/messages"])
def test_a_fixed_prefix_over_the_budget_is_a_clear_error(tmp_path: Path, path: str) -> None:
    system = " ".join(f"rule{i}" for i in range(7000))  # alone over 6000 - 512
    if path == "/v1/messages":
        body: dict[str, Any] = {**BODY, "system": system, "max_tokens": 10}
    else:
        body = {**BODY, "messages": [{"role": "system", "content": system}, *BODY["messages"]]}
    with (
        ScriptedLLMServer(window=6000) as srv,
        run_gateway(config_for(tmp_path, srv)) as gw,
    ):
        r = httpx.post(gw.url + path, json=body, headers={"x-api-key": "k"})
        m = httpx.get(gw.url + "/metrics").text
        assert not srv.records  # nothing forwarded, nothing retried
    assert r.status_code == 400
    text = r.text
    assert "'test_agent'" in text and "5488 tokens" in text and "fixed prefix" in text
    assert 'ctxpolicy_gateway_prefix_too_large_total{agent="test_agent"} 1' in m


def test_a_huge_body_does_not_stall_healthz(tmp_path: Path) -> None:
    """12,000 parallel tool results in one Messages body: /healthz keeps answering."""
    n = 12_000
    calls = [
        {"type": "tool_use", "id": f"t{i}", "name": "read_file", "input": {"p": i}}
        for i in range(n)
    ]
    results = [
        {"type": "tool_result", "tool_use_id": f"t{i}", "content": f"line {i}"} for i in range(n)
    ]
    body = {
        "model": "m",
        "max_tokens": 10,
        "messages": [
            {"role": "user", "content": "go"},
            {"role": "assistant", "content": calls},
            {"role": "user", "content": results},
        ],
    }
    with (
        ScriptedLLMServer(window=1_000_000) as srv,
        run_gateway(config_for(tmp_path, srv)) as gw,
    ):
        done = threading.Event()

        def big() -> None:
            try:
                httpx.post(
                    gw.url + "/v1/messages", json=body, headers={"x-api-key": "k"}, timeout=120
                )
            finally:
                done.set()

        t = threading.Thread(target=big)
        t.start()
        worst = 0.0
        with httpx.Client() as c:
            while not done.is_set():
                t0 = time.perf_counter()
                assert c.get(gw.url + "/healthz", timeout=30).status_code == 200
                worst = max(worst, time.perf_counter() - t0)
                time.sleep(0.02)
        t.join()
    assert worst < 1.0, worst


def test_the_clients_own_recall_named_tool_wins(tmp_path: Path) -> None:
    """A client with its own ``ctx_search``: the gateway offers no recall tools and hands
    the model's ``ctx_search`` call to the client instead of answering it."""
    own = {
        "type": "function",
        "function": {"name": "ctx_search", "description": "the client's search", "parameters": {}},
    }
    script = [{"tool_calls": [{"name": "ctx_search", "arguments": {"query": "x"}}]}]
    body = {**BODY, "tools": [own]}
    with (
        ScriptedLLMServer(window=6000, script=script) as srv,
        run_gateway(config_for(tmp_path, srv, recall=True)) as gw,
    ):
        r = httpx.post(gw.url + "/v1/chat/completions", json=body, headers={"x-api-key": "k"})
    assert r.status_code == 200
    (call,) = r.json()["choices"][0]["message"]["tool_calls"]
    assert call["function"]["name"] == "ctx_search"
    (sent,) = srv.records
    assert sent.body["tools"] == [own]


@pytest.mark.parametrize("stream", [False, True])
def test_recall_only_after_thinking_is_answered_inside(tmp_path: Path, stream: bool) -> None:
    """A recall-only answer that starts with a signed thinking block (Claude's default) is
    answered inside the gateway, streamed or not; the thinking block goes back to the
    provider byte-identical in the next round."""
    script = [
        {
            "thinking": "I should search the old output.",
            "signature": "sig-abc",
            "tool_calls": [{"name": "ctx_search", "arguments": {"query": "value"}}],
        },
        {"content": "found it"},
    ]
    body = {**BODY, "max_tokens": 100, "stream": stream}
    with (
        ScriptedLLMServer(window=6000, script=script) as srv,
        run_gateway(config_for(tmp_path, srv, recall=True)) as gw,
    ):
        r = httpx.post(gw.url + "/v1/messages", json=body, headers={"x-api-key": "k"})
    assert r.status_code == 200 and "found it" in r.text
    assert "ctx_search" not in r.text
    _, second = srv.records
    (turn,) = [m for m in second.body["messages"] if m["role"] == "assistant"]
    assert turn["content"][0] == {
        "type": "thinking",
        "thinking": "I should search the old output.",
        "signature": "sig-abc",
    }


@pytest.mark.parametrize("overflow", [False, True])
def test_a_large_request_is_built_in_the_engine_steps_hop(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, overflow: bool
) -> None:
    """A body over INLINE_BYTES: read in a worker thread, then prepared and its outgoing
    body built in the same worker-thread hop (also a retry's after an overflow), never
    a third hop of its own for building."""
    from ctxpolicy.gateway import calls

    hops: list[str] = []
    real = calls.off_loop

    async def counted(fn: Any, /, *args: Any, **kw: Any) -> Any:
        hops.append(getattr(fn, "__name__", repr(fn)))
        return await real(fn, *args, **kw)

    monkeypatch.setattr(calls, "off_loop", counted)
    history = "\n".join(f"line {i}: " + "x" * 60 for i in range(600))  # ~40 KB
    body = {
        "model": "m",
        "messages": [
            {"role": "user", "content": "Read the file."},
            {"role": "assistant", "content": history},
            {"role": "user", "content": "Now fix it."},
        ],
    }
    assert len(json.dumps(body)) > calls.INLINE_BYTES
    script = [{"overflow": True}, {"content": "fixed"}] if overflow else [{"content": "fixed"}]
    with (
        ScriptedLLMServer(window=1_000_000, script=script) as srv,
        run_gateway(config_for(tmp_path, srv)) as gw,
    ):
        r = httpx.post(
            gw.url + "/v1/chat/completions", json=body, headers={"Authorization": "Bearer k"}
        )
        assert r.status_code == 200 and "fixed" in r.text, r.text
        sent = srv.requests[-1]["messages"]
    assert hops == ["parse"]
    assert sent[-1]["content"] == "Now fix it."
    assert len(srv.records) == (2 if overflow else 1)
