"""Hostile input: oversized or malformed bodies get clear 4xx JSON errors, never a
traceback, and neither the answers nor the logs ever show the upstream credential."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest

from ctxpolicy.testing.server import ScriptedLLMServer

from .conftest import RunningGateway, config_for, run_gateway

KEY = "sk-server-side-SECRET-0123456789"
CLIENT_KEY = "client-credential-SECRET-9876"


@contextmanager
def keyed_gateway(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> Iterator[RunningGateway]:
    """A gateway holding the upstream key ``KEY``, logging at DEBUG into ``caplog``."""
    with (
        ScriptedLLMServer(window=6000) as srv,
        run_gateway(config_for(tmp_path, srv, api_key=KEY)) as gw,
    ):
        caplog.set_level(logging.DEBUG)
        yield gw


def assert_nothing_leaks(text: str, logs: str) -> None:
    """No traceback and neither credential in an answer or the logs."""
    assert "Traceback" not in text and KEY not in text and CLIENT_KEY not in text
    assert "Traceback" not in logs and KEY not in logs
    assert CLIENT_KEY not in logs


BAD_BODIES: list[tuple[bytes, str]] = [
    (b"{nope", "invalid request body"),
    (b"[1, 2]", "JSON object"),
    (b'"text"', "JSON object"),
    (b'{"model": "m"}', "'messages'"),
    (b'{"model": "m", "messages": "hi"}', "'messages'"),
    (b'{"model": "m", "messages": [1, 2]}', "'messages'"),
    (b"\xff\xfe\x00garbage", "invalid request body"),
    (
        b'{"messages": [{"role": "user", "content": "hi"}], "x": '
        + b"[" * 5000
        + b"]" * 5000
        + b"}",
        "invalid request body",
    ),
]


@pytest.mark.parametrize(("body", "expect"), BAD_BODIES)
@pytest.mark.parametrize("path", ["/v1/chat/completions", "/v1/messages"])
def test_malformed_bodies_are_clear_4xx(
    tmp_path: Path, body: bytes, expect: str, path: str, caplog: pytest.LogCaptureFixture
) -> None:
    with keyed_gateway(tmp_path, caplog) as gw:
        r = httpx.post(
            gw.url + path,
            content=body,
            headers={"authorization": f"Bearer {CLIENT_KEY}", "content-type": "application/json"},
        )
    assert r.status_code == 400, r.text
    err = r.json()["error"]
    assert expect in err["message"]
    assert_nothing_leaks(r.text, caplog.text)


ODD_MESSAGES: list[Any] = [
    [{"role": 5, "content": {"x": 1}}],
    [{"role": "user", "content": [{"type": "nope", "deep": [[[]]]}]}],
    [{"role": "assistant", "tool_calls": "call"}, {"role": "tool", "content": None}],
    [{"role": "user", "content": "hi"}, {"role": "tool", "tool_call_id": 7, "content": 1.5}],
    [{"role": "user", "content": "x" * 200_000}],
]


@pytest.mark.parametrize("messages", ODD_MESSAGES)
def test_odd_messages_never_a_traceback(
    tmp_path: Path, messages: Any, caplog: pytest.LogCaptureFixture
) -> None:
    with keyed_gateway(tmp_path, caplog) as gw:
        r = httpx.post(
            gw.url + "/v1/chat/completions",
            json={"model": "m", "messages": messages, "tools": "all", "stream": "yes"},
            headers={"authorization": f"Bearer {CLIENT_KEY}"},
            timeout=60,
        )
        assert httpx.get(gw.url + "/healthz").status_code == 200
    assert r.status_code < 500, r.text
    assert r.headers["content-type"].startswith("application/json")
    assert_nothing_leaks(r.text, caplog.text)


def test_oversized_bodies_413_declared_or_chunked(tmp_path: Path) -> None:
    with (
        ScriptedLLMServer(window=6000) as srv,
        run_gateway(config_for(tmp_path, srv, max_body_bytes=4096)) as gw,
    ):
        big = b'{"model": "m", "messages": [{"role": "user", "content": "' + b"x" * 10_000 + b'"}]}'
        r = httpx.post(gw.url + "/v1/messages", content=big)
        assert r.status_code == 413 and r.json()["error"]["type"] == "request_too_large"

        def chunks() -> Any:
            for _ in range(10):
                yield b"x" * 1000

        r = httpx.post(gw.url + "/v1/chat/completions", content=chunks())  # no Content-Length
        assert r.status_code == 413 and "4096" in r.json()["error"]["message"]
        r = httpx.post(gw.url + "/v1/embeddings", content=big)  # forwarded paths too
        assert r.status_code == 413


def test_upstream_unreachable_never_echoes_the_server_key(tmp_path: Path) -> None:
    with ScriptedLLMServer(window=6000) as srv:
        cfg = config_for(tmp_path, srv, api_key=KEY)
    # the upstream is gone now: a 502 naming the error class, not the request
    with run_gateway(cfg) as gw:
        r = httpx.post(
            gw.url + "/v1/chat/completions",
            json={"model": "m", "messages": [{"role": "user", "content": "hi"}]},
            headers={"Authorization": "Bearer client-a"},  # a tenant of its own
        )
    assert r.status_code == 502 and "upstream unreachable" in r.text and KEY not in r.text
    assert KEY not in repr(cfg)
