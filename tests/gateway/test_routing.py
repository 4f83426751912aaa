"""Routing by provider: every Anthropic path to the Anthropic upstream with its key, every
OpenAI path to the OpenAI upstream with its key, an unplaceable path a 404."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from ctxpolicy.gateway.routing import ANTHROPIC, OPENAI, Unplaced, provider_of
from ctxpolicy.testing.server import ScriptedLLMServer

from .conftest import config_for, run_asgi, run_gateway


@pytest.mark.parametrize(
    ("path", "headers", "provider"),
    [
        ("/v1/messages", {}, ANTHROPIC),
        ("/v1/messages/count_tokens", {}, ANTHROPIC),
        ("/v1/messages/batches/msgbatch_1/results", {}, ANTHROPIC),
        ("/v1/complete", {}, ANTHROPIC),
        ("/v1/models", {"anthropic-version": "2023-06-01"}, ANTHROPIC),
        ("/v1/files", {"anthropic-version": "2023-06-01"}, ANTHROPIC),
        ("/v1/models", {}, OPENAI),
        ("/v1/chat/completions", {}, OPENAI),
        ("/v1/responses", {}, OPENAI),
        ("/v1/responses/resp_1/input_items", {}, OPENAI),
        ("/v1/embeddings", {}, OPENAI),
        ("/v1/batches", {}, OPENAI),
    ],
)
def test_provider_of(path: str, headers: dict[str, str], provider: str) -> None:
    assert provider_of(path, headers) == provider


@pytest.mark.parametrize("path", ["/", "/chat/completions", "/v2/messages", "/v1/", "/admin"])
def test_unplaceable_paths(path: str) -> None:
    with pytest.raises(Unplaced, match="no provider serves"):
        provider_of(path, {})


class Recorder:
    """An upstream that records method, path and credentials, and answers 200."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.seen: list[dict[str, Any]] = []

    def app(self) -> Starlette:
        async def any_path(request: Request) -> JSONResponse:
            self.seen.append(
                {
                    "path": request.url.path,
                    "authorization": request.headers.get("authorization"),
                    "x-api-key": request.headers.get("x-api-key"),
                }
            )
            return JSONResponse({"upstream": self.name, "input_tokens": 3, "data": []})

        return Starlette(routes=[Route("/{p:path}", any_path, methods=["GET", "POST"])])


def test_each_provider_gets_its_paths_and_only_its_key(tmp_path: Path) -> None:
    oa, an = Recorder("openai"), Recorder("anthropic")
    with ScriptedLLMServer() as srv, run_asgi(oa.app()) as o, run_asgi(an.app()) as a:
        cfg = config_for(
            tmp_path,
            srv,
            api_key="OPENAI-SERVER-KEY",
            anthropic_api_key="ANTHROPIC-SERVER-KEY",
            anthropic_upstream=a.url,
        )
        cfg.upstream = o.url
        with run_gateway(cfg) as gw:
            anth = {"x-api-key": "client", "anthropic-version": "2023-06-01"}
            for path in (
                "/v1/messages/count_tokens",
                "/v1/messages/batches",
                "/agents/other_agent/v1/messages/count_tokens",
            ):
                r = httpx.post(gw.url + path, json={"messages": []}, headers=anth)
                assert r.json()["upstream"] == "anthropic", path
            assert httpx.get(gw.url + "/v1/models", headers=anth).json()["upstream"] == "anthropic"
            oai = {"authorization": "Bearer client"}
            assert httpx.get(gw.url + "/v1/models", headers=oai).json()["upstream"] == "openai"
            r = httpx.post(gw.url + "/v1/embeddings", json={"input": "x"}, headers=oai)
            assert r.json()["upstream"] == "openai"
            r = httpx.post(gw.url + "/v1/nothing-here", json={}, headers=anth)
            assert r.status_code == 404 and r.json()["type"] == "error"  # Anthropic's shape
            assert "no provider serves" in r.text
    assert [s["path"] for s in an.seen] == [
        "/v1/messages/count_tokens",
        "/v1/messages/batches",
        "/v1/messages/count_tokens",
        "/v1/models",
    ]
    assert {s["x-api-key"] for s in an.seen} == {"ANTHROPIC-SERVER-KEY"}
    assert not any(s["authorization"] for s in an.seen)
    assert {s["authorization"] for s in oa.seen} == {"Bearer OPENAI-SERVER-KEY"}
    assert not any(s["x-api-key"] for s in oa.seen)
    assert "OPENAI-SERVER-KEY" not in json.dumps(an.seen)
