"""Anthropic adapter against the real ``anthropic`` SDK and the scripted local server."""

from __future__ import annotations

import itertools
from typing import Any

import pytest

anthropic = pytest.importorskip(
    "anthropic",
    reason="the 'anthropic' extra is not installed (pip install 'ctxpolicy[anthropic]')",
)

from ctxpolicy.engine import Session  # noqa: E402
from ctxpolicy.integrations.anthropic import AnthropicConversation, wrap  # noqa: E402
from ctxpolicy.testing.server import ScriptedLLMServer  # noqa: E402

from .conftest import SeenThreads, assert_pairing, big_output  # noqa: E402

SYSTEM = "You are a coding agent. Fix BUG-1234."
TOOLS = [
    {
        "name": "read_file",
        "description": "Read a file.",
        "input_schema": {"type": "object", "properties": {"path": {"type": "string"}}},
    }
]


def script(body: dict[str, Any]) -> dict[str, Any]:
    n = len(body["messages"])
    return {
        "content": f"looking at step {n}",
        "tool_calls": [
            {"name": "read_file", "arguments": {"path": f"src/{n}_{p}.py"}} for p in range(2)
        ],
    }


def blocks_of(body: dict[str, Any]) -> list[tuple[Any, ...]]:
    """Every block of a request, in cache order, without cache_control."""
    out: list[tuple[Any, ...]] = []
    system = body.get("system") or []
    for b in [{"type": "text", "text": system}] if isinstance(system, str) else system:
        out.append(("system", repr({k: v for k, v in b.items() if k != "cache_control"})))
    for i, m in enumerate(body["messages"]):
        content = m["content"]
        for b in [{"type": "text", "text": content}] if isinstance(content, str) else content:
            out.append((i, m["role"], repr({k: v for k, v in b.items() if k != "cache_control"})))
    return out


def marked(body: dict[str, Any]) -> list[int]:
    """Indices (into blocks_of) of the blocks carrying cache_control."""
    idx, out = 0, []
    system = body.get("system") or []
    for b in [] if isinstance(system, str) else system:
        if "cache_control" in b:
            out.append(idx)
        idx += 1
    if isinstance(system, str):
        idx += 1
    for m in body["messages"]:
        content = m["content"]
        for b in [content] if isinstance(content, str) else content:
            if isinstance(b, dict) and "cache_control" in b:
                out.append(idx)
            idx += 1
    return out


def to_chat(body: dict[str, Any]) -> list[dict[str, Any]]:
    return AnthropicConversation(body["messages"], body.get("system")).messages


def client_for(srv: ScriptedLLMServer, session: Session) -> Any:
    """The real SDK client on the scripted server, wrapped with ``session``."""
    return wrap(
        anthropic.Anthropic(base_url=srv.anthropic_base_url, api_key="test", max_retries=0),
        session,
    )


def tool_uses(resp: Any) -> list[Any]:
    return [b for b in resp.content if b.type == "tool_use"]


def answered(resp: Any, texts: list[str]) -> list[dict[str, Any]]:
    """The assistant turn of ``resp``, then the user turn giving ``texts`` as the results
    of its tool calls, in order."""
    results = [
        {"type": "tool_result", "tool_use_id": b.id, "content": text}
        for b, text in zip(tool_uses(resp), texts, strict=True)
    ]
    return [
        {"role": "assistant", "content": [b.model_dump(exclude_none=True) for b in resp.content]},
        {"role": "user", "content": results},
    ]


def test_thirty_steps_pairs_retry_and_cache_breakpoints(policy_factory):
    session = Session(policy_factory(window=16000, max_chars=3000))
    with ScriptedLLMServer(window=6000, script=script) as srv:
        client = client_for(srv, session)
        history: list[dict[str, Any]] = [{"role": "user", "content": "Task: fix BUG-1234"}]
        for step in range(30):
            resp = client.messages.create(
                model="claude-test", max_tokens=256, system=SYSTEM, messages=history, tools=TOOLS
            )
            texts = [
                session.add_tool_result(
                    {"id": b.id, "name": b.name, "input": b.input}, big_output(step, 40)
                )
                for b in tool_uses(resp)
            ]
            history += answered(resp, texts)
        records = srv.records
        assert len(srv.accepted) == 30
        assert srv.rejections == 1  # "prompt is too long" once; the session learns 6000
        first = next(i for i, r in enumerate(records) if r.status == 400)
        assert records[first + 1].status == 200  # retried exactly once
        assert all(r.status == 200 and r.tokens <= 6000 for r in records[first + 1 :])
        assert session.budget().window == 6000
        for r in records:
            body = r.body
            assert body["messages"][0]["role"] == "user"
            assert_pairing(to_chat(body))
            for m, nxt in zip(body["messages"], body["messages"][1:], strict=False):
                uses = [
                    b["id"]
                    for b in m["content"]
                    if isinstance(m["content"], list) and b["type"] == "tool_use"
                ]
                if uses:  # the tool_result blocks follow in the next user turn, first, in order
                    res = [b["tool_use_id"] for b in nxt["content"] if b["type"] == "tool_result"]
                    assert res == uses and nxt["content"][0]["type"] == "tool_result"
        # cache_control: on the last block of the prefix unchanged since the previous call
        accepted = [r.body for r in records if r.status == 200]
        assert marked(accepted[0]) == [0]  # first call: the system prompt
        stable_hits = 0
        for prev, cur in itertools.pairwise(accepted):
            pb, cb = blocks_of(prev), blocks_of(cur)
            marks = marked(cur)
            assert len(marks) == 1
            k = marks[0]
            assert cb[: k + 1] == pb[: k + 1]  # everything up to the marker was sent before
            # maximal at message granularity: the message after the marked one is new
            nxt = next((b for b in cb[k + 1 :] if b[0] != cb[k][0]), None)
            if nxt is not None and nxt[0] != "system":
                assert [b for b in cb if b[0] == nxt[0]] != [b for b in pb if b[0] == nxt[0]]
            if k > 0:
                stable_hits += 1
        assert stable_hits >= 5
        assert client.last_request is not None and client.last_request.breakpoints is not None


def test_cache_breakpoint_on_growing_conversation(policy_factory):
    session = Session(policy_factory(window=200000))
    with ScriptedLLMServer(window=200000, script=script) as srv:
        client = client_for(srv, session)
        history: list[dict[str, Any]] = [{"role": "user", "content": "Task"}]
        for step in range(4):
            resp = client.messages.create(model="m", max_tokens=64, system=SYSTEM, messages=history)
            history += answered(resp, [f"result {step}" for _ in tool_uses(resp)])
        bodies = srv.requests
    # nothing was compacted: call n marks the last block call n-1 sent
    assert bodies[0]["system"][0]["cache_control"] == {"type": "ephemeral"}
    for prev, cur in itertools.pairwise(bodies):
        last = len(prev["messages"]) - 1
        content = cur["messages"][last]["content"]
        block = content[-1] if isinstance(content, list) else None
        assert block is not None and block["cache_control"] == {"type": "ephemeral"}
        assert "cache_control" not in cur["system"][0]  # one breakpoint: the stable prefix


def test_conversion_round_trip_keeps_blocks():
    messages = [
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "look", "cache_control": {"type": "ephemeral"}},
                {
                    "type": "image",
                    "source": {"type": "base64", "media_type": "image/png", "data": "iVBORw0KGgo="},
                },
            ],
        },
        {
            "role": "assistant",
            "content": [
                {"type": "thinking", "thinking": "hmm", "signature": "sig"},
                {"type": "text", "text": "calling"},
                {"type": "tool_use", "id": "toolu_1", "name": "f", "input": {"a": 1}},
                {"type": "tool_use", "id": "toolu_2", "name": "g", "input": {}},
            ],
        },
        {
            "role": "user",
            "content": [
                {
                    "type": "tool_result",
                    "tool_use_id": "toolu_1",
                    "content": "one",
                    "is_error": True,
                },
                {
                    "type": "tool_result",
                    "tool_use_id": "toolu_2",
                    "content": [{"type": "text", "text": "two"}],
                },
                {"type": "text", "text": "and?"},
            ],
        },
    ]
    conv = AnthropicConversation(messages, system=[{"type": "text", "text": "sys"}])
    chat = conv.messages
    assert [m["role"] for m in chat] == ["system", "user", "assistant", "tool", "tool", "user"]
    assert chat[2]["tool_calls"][0]["function"] == {"name": "f", "arguments": '{"a": 1}'}
    assert_pairing(chat)
    req = conv.to_request(chat)
    assert req.kwargs() == {"messages": messages, "system": [{"type": "text", "text": "sys"}]}
    # a truncated tool result keeps is_error; the other blocks are untouched
    changed = [*chat[:3], {**chat[3], "content": "o[...]"}, *chat[4:]]
    out = conv.to_request(changed).kwargs()["messages"]
    assert out[2]["content"][0] == {
        "type": "tool_result",
        "tool_use_id": "toolu_1",
        "content": "o[...]",
        "is_error": True,
    }
    assert out[1] == messages[1]  # thinking + signature kept


def test_async_client(policy_factory):
    import asyncio

    session = Session(policy_factory(window=16000, max_chars=3000))

    async def main(srv: ScriptedLLMServer) -> None:
        client = wrap(
            anthropic.AsyncAnthropic(base_url=srv.anthropic_base_url, api_key="t", max_retries=0),
            session,
        )
        history: list[dict[str, Any]] = [{"role": "user", "content": "Task"}]
        for step in range(12):
            resp = await client.messages.create(
                model="m", max_tokens=64, system=SYSTEM, messages=history
            )
            texts = [
                session.add_tool_result({"id": b.id, "name": b.name}, big_output(step, 40))
                for b in tool_uses(resp)
            ]
            history += answered(resp, texts)
        await client.close()

    with ScriptedLLMServer(window=6000, script=script) as srv:
        asyncio.run(main(srv))
        assert len(srv.accepted) == 12 and srv.rejections == 1


def test_wrap_makes_the_session_of_a_conversation(policy_factory) -> None:
    policy = policy_factory()
    client = anthropic.Anthropic(base_url="http://127.0.0.1:9", api_key="test", max_retries=0)
    assert wrap(client, policy, conv_id="thread-7").session.conv_id == "thread-7"


def test_recall_tools_round_trip_through_the_sdk(policy_factory) -> None:
    """The model calls ctx_search then ctx_recall; answer_recall answers from the
    session's own snapshots, as tool_result blocks the real SDK sends back."""
    from ctxpolicy.integrations.anthropic import answer_recall, is_recall_call, recall_tools

    session = Session(policy_factory(window=6000, max_chars=400))
    replies = iter(
        [
            {"content": "", "tool_calls": [{"name": "read_file", "arguments": {"path": "a.py"}}]},
            {
                "content": "",
                "tool_calls": [{"name": "ctx_search", "arguments": {"pattern": "_77"}}],
            },
            {"content": "done"},
        ]
    )
    tools = [*TOOLS, *recall_tools()]
    assert {t["name"] for t in recall_tools()} == {"ctx_recall", "ctx_search"}
    with ScriptedLLMServer(window=6000, script=lambda body: next(replies)) as srv:
        client = client_for(srv, session)
        history: list[Any] = [{"role": "user", "content": "Task: fix BUG-1234"}]
        for _ in range(3):
            resp = client.messages.create(
                model="m", max_tokens=64, system=SYSTEM, messages=history, tools=tools
            )
            history.append({"role": "assistant", "content": resp.content})
            uses = [b for b in resp.content if b.type == "tool_use"]
            if not uses:
                break
            answers = answer_recall(session, resp)
            for b in uses:
                if not is_recall_call(b):
                    call = {"id": b.id, "name": b.name, "arguments": b.input}
                    text = session.add_tool_result(call, big_output(7, 200))
                    answers.append({"type": "tool_result", "tool_use_id": b.id, "content": text})
            history.append({"role": "user", "content": answers})
        sent = srv.requests[-1]
        assert any(t["name"] == "ctx_recall" for t in sent["tools"])
        result = sent["messages"][-1]["content"][0]
        assert result["type"] == "tool_result" and "value_7_77" in result["content"]
        assert "ctxsnap://" in result["content"]
    bad = answer_recall(
        session,
        [{"type": "tool_use", "id": "x", "name": "ctx_recall", "input": {"ref": "/etc/passwd"}}],
    )
    assert bad[0]["is_error"] and "/etc" not in bad[0]["content"]


def test_async_client_converts_a_long_history_off_the_event_loop(policy_factory):
    """A long request becomes engine messages in a worker thread, not on the event loop;
    a short one where it is."""
    import asyncio
    import threading

    from ctxpolicy.integrations._common import LONG_REQUEST

    session = Session(policy_factory(window=200_000, max_chars=3000))

    def history(n: int) -> list[Any]:  # n even: user, assistant, ..., user (recorded)
        out: list[Any] = [
            {"role": "assistant" if i % 2 else "user", "content": f"m{i}"} for i in range(n)
        ]
        return [*out, SeenThreads(role="user", content="last")]

    async def main(srv: ScriptedLLMServer) -> list[list[bool]]:
        loop = threading.get_ident()
        client = wrap(
            anthropic.AsyncAnthropic(base_url=srv.anthropic_base_url, api_key="t", max_retries=0),
            session,
        )
        seen = []
        for n in (LONG_REQUEST, 4):
            SeenThreads.threads = []
            await client.messages.create(model="m", max_tokens=64, messages=history(n))
            seen.append([t == loop for t in SeenThreads.threads])
        await client.close()
        return seen

    with ScriptedLLMServer(window=200_000) as srv:
        long, short = asyncio.run(main(srv))
    assert long and not any(long)
    assert short and all(short)
