"""``POST /v1/responses`` through the gateway with the real openai SDK: the stateless form
(the whole ``input`` every call, as the Codex CLI sends it) prepared like chat, streamed
and not; the stored form (``previous_response_id``) forwarded unprepared and counted."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
import pytest

from ctxpolicy.testing.server import ScriptedLLMServer
from tests.integrations.conftest import big_output

from .conftest import config_for, run_gateway

openai = pytest.importorskip("openai", reason="the 'openai' extra is not installed")

WINDOW, RESERVE = 6000, 512


def items(steps: int) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = [
        {"type": "message", "role": "developer", "content": "You are a coding agent."},
        {"type": "message", "role": "user", "content": "Fix the failing test."},
    ]
    for i in range(steps):
        out.append(
            {
                "type": "function_call",
                "call_id": f"call_{i}",
                "name": "read_file",
                "arguments": json.dumps({"path": f"f{i}.py"}),
            }
        )
        out.append(
            {"type": "function_call_output", "call_id": f"call_{i}", "output": big_output(i, 60)}
        )
    return out


def _pairs_whole(body: dict[str, Any]) -> bool:
    calls = [it["call_id"] for it in body["input"] if it.get("type") == "function_call"]
    outs = [it["call_id"] for it in body["input"] if it.get("type") == "function_call_output"]
    return sorted(calls) == sorted(outs)


@pytest.mark.parametrize("stream", [False, True])
def test_stateless_responses_are_prepared(tmp_path: Path, stream: bool) -> None:
    with (
        ScriptedLLMServer(window=WINDOW) as srv,
        run_gateway(config_for(tmp_path, srv)) as gw,
    ):
        client = openai.OpenAI(base_url=gw.url + "/v1", api_key="k", max_retries=0)
        for steps in range(1, 10):
            if stream:
                with client.responses.stream(model="m", input=items(steps)) as s:  # type: ignore[arg-type]
                    final = s.get_final_response()
            else:
                final = client.responses.create(model="m", input=items(steps), store=False)  # type: ignore[arg-type]
            assert final.output_text == "done"
        metrics = httpx.get(gw.url + "/metrics").text
        convs = list(gw.gateway.pool.open_sessions)
    assert len(convs) == 1  # continuity: each request continues the last
    assert len(srv.accepted) == 9 and not srv.rejections
    assert all(r.tokens <= WINDOW - RESERVE for r in srv.accepted)
    assert all(_pairs_whole(r.body) for r in srv.accepted)
    assert len(srv.accepted[-1].body["input"]) < len(items(9))  # it did compact
    assert 'api="responses",agent="test_agent",status="200"' in metrics


def test_stored_responses_are_forwarded_unprepared(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level("INFO", logger="ctxpolicy.gateway")
    with (
        ScriptedLLMServer(window=WINDOW) as srv,
        run_gateway(config_for(tmp_path, srv)) as gw,
    ):
        client = openai.OpenAI(base_url=gw.url + "/v1", api_key="k", max_retries=0)
        new = [{"type": "message", "role": "user", "content": "and now?"}]
        final = client.responses.create(model="m", input=new, previous_response_id="resp_1")  # type: ignore[arg-type]
        assert final.output_text == "done"
        metrics = httpx.get(gw.url + "/metrics").text
        assert not gw.gateway.pool.open_sessions
    (sent,) = srv.records
    assert sent.body["previous_response_id"] == "resp_1" and sent.body["input"] == new
    assert (
        'ctxpolicy_gateway_forwarded_total{path="/v1/responses",'
        'reason="previous_response_id"} 1' in metrics
    )
    assert any("previous_response_id" in r.getMessage() for r in caplog.records)
