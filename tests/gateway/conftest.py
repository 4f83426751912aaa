"""Fixtures of the gateway tests: a real uvicorn on a free loopback port in front of the
project's scripted server (real HTTP both ways)."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("starlette", reason="the 'gateway' extra is not installed")
pytest.importorskip("uvicorn", reason="the 'gateway' extra is not installed")

import uvicorn

from ctxpolicy.cli.serve import KEEP_ALIVE_S
from ctxpolicy.gateway.app import GatewayConfig, create_app
from ctxpolicy.testing.server import ScriptedLLMServer
from tests.integrations.conftest import make_policy


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class RunningGateway:
    def __init__(self, app: Any, port: int, server: uvicorn.Server) -> None:
        self.app = app
        self.port = port
        self.server = server

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def gateway(self) -> Any:
        return self.app.state.gateway


@contextmanager
def run_gateway(config: GatewayConfig) -> Iterator[RunningGateway]:
    with run_asgi(create_app(config)) as gw:
        yield gw


@contextmanager
def run_asgi(app: Any) -> Iterator[RunningGateway]:
    """Any ASGI app on a real uvicorn on a free loopback port, stopped afterwards."""
    port = free_port()
    server = uvicorn.Server(
        uvicorn.Config(
            app,
            host="127.0.0.1",
            port=port,
            log_level="warning",
            lifespan="on",
            timeout_keep_alive=KEEP_ALIVE_S,
        )
    )
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not server.started:
        if time.monotonic() > deadline or not thread.is_alive():
            raise RuntimeError("the gateway did not start")
        time.sleep(0.01)
    try:
        yield RunningGateway(app, port, server)
    finally:
        server.should_exit = True
        thread.join(10)


@pytest.fixture
def upstream() -> Iterator[ScriptedLLMServer]:
    with ScriptedLLMServer(window=6000) as srv:
        yield srv


def config_for(tmp_path: Path, srv: ScriptedLLMServer, **kw: Any) -> GatewayConfig:
    policies = {
        "test_agent": make_policy(tmp_path / "gw"),
        "other_agent": make_policy(tmp_path / "gw_other"),
    }
    kw.setdefault("default_agent", "test_agent")
    return GatewayConfig(policies=policies, upstream=srv.url, secret=b"test-secret", **kw)
