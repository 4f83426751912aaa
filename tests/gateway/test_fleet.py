"""Two gateway workers sharing PostgreSQL state: one conversation whose calls alternate
between the workers gets byte-identical upstream requests to a single worker."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from ctxpolicy.gateway.app import GatewayConfig
from ctxpolicy.testing.server import ScriptedLLMServer
from tests.integrations.conftest import make_policy

from .conftest import run_gateway
from .test_app import WINDOW, history

openai = pytest.importorskip("openai", reason="the 'openai' extra is not installed")
pytest.importorskip("psycopg", reason="the 'postgres' extra is not installed")


def policy(tmp: Path, store: str, dsn: str | None = None) -> Any:
    p = make_policy(tmp)
    opts = {"dsn": dsn} if dsn else {}
    return p.model_copy(
        update={"state": p.state.model_copy(update={"store": store, "options": opts})}
    )


def run(urls: list[str], srv: ScriptedLLMServer) -> list[Any]:
    for i, steps in enumerate(range(1, 10)):
        client = openai.OpenAI(base_url=urls[i % len(urls)] + "/v1", api_key="k", max_retries=0)
        client.chat.completions.create(model="m", messages=history(steps))  # type: ignore[arg-type]
    return [r.body for r in srv.accepted]


def test_two_workers_alternate_like_one(tmp_path: Path, postgres_server: Any) -> None:
    shared = policy(tmp_path / "fleet", "postgres", postgres_server.dsn)
    with ScriptedLLMServer(window=WINDOW) as srv:
        cfg = {"upstream": srv.url, "default_agent": "a", "secret": b"fleet-secret"}
        with (
            run_gateway(GatewayConfig(policies={"a": shared}, **cfg)) as w1,
            run_gateway(GatewayConfig(policies={"a": shared}, **cfg)) as w2,
        ):
            fleet = run([w1.url, w2.url], srv)
    single_policy = policy(tmp_path / "single", "sqlite")
    with ScriptedLLMServer(window=WINDOW) as srv:
        cfg = {"upstream": srv.url, "default_agent": "a", "secret": b"fleet-secret"}
        with run_gateway(GatewayConfig(policies={"a": single_policy}, **cfg)) as one:
            alone = run([one.url], srv)
    assert len(fleet) == len(alone) == 9
    assert fleet == alone
    assert len(fleet[-1]["messages"]) < len(history(9))  # it compacted along the way
