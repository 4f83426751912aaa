"""Load on loopback: 50 concurrent conversations x 40 calls through the gateway.

Every conversation's history grows past the window (so compaction runs under load);
half are named by ``X-Ctxpolicy-Conversation``, half by the digest of their credential
and pinned prefix. The upstream echoes the conversation it was given, so a mix shows on
both sides: in what the upstream received and in what each client got back.
"""

from __future__ import annotations

import asyncio
import json
import re
from pathlib import Path
from typing import Any

import httpx

from ctxpolicy.testing.server import ScriptedLLMServer
from tests.integrations.conftest import big_output

from .conftest import config_for, run_gateway
from .test_app import RESERVE, WINDOW

CONVERSATIONS = 50
CALLS = 40
DEADLINE_S = 300.0  # a hang fails the test; the expected time is far below
_MARK = re.compile(r"Conversation (\d\d):|\[conv (\d\d)\]")


def _history(n: int, steps: int) -> list[dict[str, Any]]:
    msgs: list[dict[str, Any]] = [
        {"role": "system", "content": "You are a coding agent."},
        {"role": "user", "content": f"Conversation {n:02d}: fix the failing test."},
    ]
    for i in range(steps):
        cid = f"call_{n}_{i}"
        call = {"name": "read_file", "arguments": json.dumps({"path": f"f{i}.py"})}
        msgs.append(
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [{"id": cid, "type": "function", "function": call}],
            }
        )
        msgs.append(
            {"role": "tool", "tool_call_id": cid, "content": f"[conv {n:02d}]\n{big_output(i, 10)}"}
        )
    return msgs


def _marks(text: str) -> set[str]:
    return {a or b for a, b in _MARK.findall(text)}


def _echo(body: dict[str, Any]) -> dict[str, Any]:
    marks = _marks(json.dumps(body.get("messages") or []))
    return {"content": "ack " + ",".join(sorted(marks))}


async def _conversation(c: httpx.AsyncClient, url: str, n: int) -> list[str]:
    headers = {"authorization": f"Bearer key-{n:02d}"}
    if n % 2 == 0:
        headers["x-ctxpolicy-conversation"] = f"load-{n:02d}"
    answers = []
    for step in range(CALLS):
        body = {"model": "m", "messages": _history(n, step)}
        r = await c.post(url + "/v1/chat/completions", json=body, headers=headers)
        assert r.status_code == 200, r.text[:500]
        answers.append(r.json()["choices"][0]["message"]["content"])
    return answers


async def _run(url: str) -> list[list[str]]:
    limits = httpx.Limits(max_connections=CONVERSATIONS, max_keepalive_connections=None)
    async with httpx.AsyncClient(limits=limits, timeout=60) as c:
        return await asyncio.wait_for(
            asyncio.gather(*(_conversation(c, url, n) for n in range(CONVERSATIONS))),
            DEADLINE_S,
        )


def test_fifty_concurrent_conversations(tmp_path: Path) -> None:
    with ScriptedLLMServer(window=WINDOW, script=_echo) as srv:
        with run_gateway(config_for(tmp_path, srv)) as gw:
            answers = asyncio.run(_run(gw.url))
            sessions = len(gw.gateway.pool.open_sessions)
            compactions = sum(
                sum(s.stats.compactions.values()) for s in gw.gateway.pool.open_sessions.values()
            )
        records = [r for r in srv.records if r.api == "chat"]
    # 0 lost: every call answered, each exactly once upstream
    assert [len(a) for a in answers] == [CALLS] * CONVERSATIONS
    assert len(records) == CONVERSATIONS * CALLS
    assert sessions == CONVERSATIONS
    # 0 over window - reserve_output reached the upstream (and none was rejected)
    assert srv.rejections == 0
    assert max(r.tokens for r in records) <= WINDOW - RESERVE
    assert compactions > 0  # the histories outgrew the window: compaction ran under load
    # 0 cross-conversation mixes: each upstream request held one conversation, each
    # client got the answer to its own
    per_conv: dict[str, int] = {}
    for r in records:
        marks = _marks(json.dumps(r.body["messages"]))
        assert len(marks) == 1, marks
        (m,) = marks
        per_conv[m] = per_conv.get(m, 0) + 1
    assert per_conv == {f"{n:02d}": CALLS for n in range(CONVERSATIONS)}
    for n, got in enumerate(answers):
        assert set(got) == {f"ack {n:02d}"}
