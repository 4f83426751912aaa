"""OpenAI adapter against the real ``openai`` SDK and the scripted local server."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

openai = pytest.importorskip(
    "openai", reason="the 'openai' extra is not installed (pip install 'ctxpolicy[openai]')"
)

from ctxpolicy.engine import ContextOverflowError, Session  # noqa: E402
from ctxpolicy.integrations.openai import ResponsesInput, prepare_responses_input, wrap  # noqa: E402
from ctxpolicy.testing.server import ScriptedLLMServer  # noqa: E402

from .conftest import TOOLS, SeenThreads, assert_pairing, big_output  # noqa: E402


def tool_script(parallel: int = 1):
    n = {"i": 0}

    def script(body: dict[str, Any]) -> dict[str, Any]:
        n["i"] += 1
        return {
            "content": f"step {n['i']}",
            "tool_calls": [
                {"name": "read_file", "arguments": {"path": f"src/f{n['i']}_{p}.py"}}
                for p in range(parallel)
            ],
        }

    return script


def client_for(srv: ScriptedLLMServer, session: Session, *, async_: bool = False):
    cls = openai.AsyncOpenAI if async_ else openai.OpenAI
    return wrap(cls(base_url=srv.base_url, api_key="test", max_retries=0), session)


def run_agent(client, session: Session, steps: int, *, lines=lambda step: 40, parallel: int = 1):
    history: list[Any] = [
        {"role": "system", "content": "You are a coding agent. Fix BUG-1234."},
        {"role": "user", "content": "Task: find and fix BUG-1234 in src/."},
    ]
    for step in range(steps):
        resp = client.chat.completions.create(model="scripted", messages=history, tools=TOOLS)
        msg = resp.choices[0].message
        history.append(msg)  # the SDK object itself, as users do
        for tc in msg.tool_calls or []:
            text = session.add_tool_result(tc, big_output(step, lines(step)))
            history.append({"role": "tool", "tool_call_id": tc.id, "content": text})
    return history


def check_run(srv: ScriptedLLMServer, steps: int) -> dict[str, int]:
    records = srv.records
    accepted = [r for r in records if r.status == 200]
    rejected = [i for i, r in enumerate(records) if r.status == 400]
    assert len(accepted) == steps
    # every body has valid tool-call pairing
    for r in records:
        assert_pairing(r.body["messages"])
        assert r.body["tools"] == TOOLS
    # exactly one retry per overflow: a rejection is always followed by an accepted request
    for i in rejected:
        assert i + 1 < len(records) and records[i + 1].status == 200
    # never an over-window request after the first rejection
    if rejected:
        assert all(r.tokens <= srv.window for r in records[rejected[0] + 1 :])
    return {"requests": len(records), "rejections": len(rejected)}


def agent_run(
    session: Session, server_window: int, steps: int, *, lines: int, parallel: int = 1
) -> tuple[ScriptedLLMServer, list[Any], dict[str, int]]:
    """``run_agent`` for ``steps`` steps against a server of ``server_window`` tokens that
    asks for ``parallel`` reads a step (``lines`` lines each), checked by ``check_run``."""
    with ScriptedLLMServer(window=server_window, script=tool_script(parallel)) as srv:
        history = run_agent(client_for(srv, session), session, steps, lines=lambda s: lines)
        numbers = check_run(srv, steps)
    return srv, history, numbers


def test_forty_steps_policy_window_larger_than_server(policy_factory):
    # The policy believes the model has 8192 tokens; the server has 6000.
    session = Session(policy_factory(window=8192, max_chars=6000))
    _, _, numbers = agent_run(session, 6000, 40, lines=80)
    assert numbers["rejections"] == 1  # the first one teaches the session the real window
    assert session.stats.reactive == 1
    learned = [e for e in session.events if e["type"] == "context.window_learned"]
    assert learned and learned[0]["window"] == 6000
    usage = [e for e in session.events if e["type"] == "context.usage"]
    assert len(usage) == 40  # usage.prompt_tokens recorded for each accepted call


def test_forty_steps_parallel_calls_same_window(policy_factory):
    session = Session(policy_factory(window=6000, max_chars=2500))
    srv, history, numbers = agent_run(session, 6000, 40, lines=15, parallel=3)
    assert numbers["rejections"] == 0  # counted exactly, prepared under budget: never rejected
    assert len(history) == 2 + 40 * 4
    # the server's count and ours agree on every request
    sent = [e["used"] for e in session.events if e["type"] == "context.status"]
    assert sent == [r.tokens for r in srv.records]


def test_learned_limit_thirty_steps_one_rejection(policy_factory):
    """Issue 12 item 3: after the first rejection, no further rejection in 30 steps."""
    session = Session(policy_factory(window=16000, max_chars=3000))
    srv, _, numbers = agent_run(session, 5000, 30, lines=35)
    assert numbers["rejections"] == 1
    assert session.budget().window == 5000
    first_reject = next(i for i, r in enumerate(srv.records) if r.status == 400)
    assert all(r.status == 200 for r in srv.records[first_reject + 1 :])


def test_overflow_retries_are_bounded(policy_factory):
    session = Session(policy_factory(window=6000))
    with ScriptedLLMServer(window=6000, script=lambda body: {"overflow": True}) as srv:
        client = client_for(srv, session)
        with pytest.raises(ContextOverflowError) as err:
            client.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}])
        assert srv.rejections == 2  # the first call and exactly one retry
        assert err.value.attempts == 2
        assert isinstance(err.value.__context__, openai.BadRequestError)


def test_other_errors_are_not_retried(policy_factory):
    session = Session(policy_factory(window=6000))
    script = [
        {
            "status": 400,
            "body": {
                "error": {
                    "message": "bad tool schema",
                    "type": "invalid_request_error",
                    "code": "invalid_value",
                }
            },
        }
    ]
    with ScriptedLLMServer(window=6000, script=script) as srv:
        client = client_for(srv, session)
        with pytest.raises(openai.BadRequestError):
            client.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}])
        assert len(srv.requests) == 1
        assert session.stats.reactive == 0


def test_async_client(policy_factory):
    session = Session(policy_factory(window=16000, max_chars=4000))

    async def main(srv: ScriptedLLMServer) -> None:
        client = client_for(srv, session, async_=True)
        history: list[Any] = [
            {"role": "system", "content": "sys"},
            {"role": "user", "content": "task"},
        ]
        for step in range(15):
            resp = await client.chat.completions.create(model="m", messages=history, tools=TOOLS)
            msg = resp.choices[0].message
            history.append(msg)
            for tc in msg.tool_calls or []:
                history.append(
                    {
                        "role": "tool",
                        "tool_call_id": tc.id,
                        "content": session.add_tool_result(tc, big_output(step, 60)),
                    }
                )
        await client.close()

    with ScriptedLLMServer(window=5000, script=tool_script()) as srv:
        asyncio.run(main(srv))
        numbers = check_run(srv, 15)
    assert numbers["rejections"] == 1


def test_wrapper_delegates_everything_else(policy_factory):
    session = Session(policy_factory())
    with ScriptedLLMServer(window=6000) as srv:
        raw = openai.OpenAI(base_url=srv.base_url, api_key="test", max_retries=0)
        client = wrap(raw, session)
        assert [m.id for m in client.models.list()] == ["scripted-model"]
        assert client.wrapped is raw
        assert str(client.base_url).rstrip("/") == srv.base_url
        other = client.with_options(timeout=5)
        other.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}])
        assert other.session is session and session.stats.prepares == 1
        assert type(raw).chat.__class__ is not None  # the client class is not patched
        assert type(raw.chat.completions).create is not type(client.chat.completions).create


def test_responses_api_items(policy_factory):
    session = Session(policy_factory(window=16000, max_chars=3000))
    n = {"i": 0}

    def script(body: dict[str, Any]) -> dict[str, Any]:
        n["i"] += 1
        return {
            "tool_calls": [
                {"name": "read_file", "arguments": {"path": f"a{n['i']}"}},
                {"name": "read_file", "arguments": {"path": f"b{n['i']}"}},
            ]
        }

    with ScriptedLLMServer(window=5000, script=script) as srv:
        client = wrap(openai.OpenAI(base_url=srv.base_url, api_key="test", max_retries=0), session)
        items: list[Any] = [{"role": "user", "content": "Task: fix BUG-1234"}]
        for step in range(20):
            resp = client.responses.create(
                model="m",
                instructions="You are a coding agent.",
                input=items,
                tools=[
                    {
                        "type": "function",
                        "name": "read_file",
                        "description": "Read.",
                        "parameters": {
                            "type": "object",
                            "properties": {"path": {"type": "string"}},
                        },
                    }
                ],
            )
            for out in resp.output:
                items.append(out.model_dump(exclude_none=True))
                if out.type == "function_call":
                    text = session.add_tool_result(
                        {"id": out.call_id, "name": out.name, "arguments": out.arguments},
                        big_output(step, 40),
                    )
                    items.append(
                        {"type": "function_call_output", "call_id": out.call_id, "output": text}
                    )
        assert len(srv.accepted) == 20
        assert srv.rejections == 1
        for r in srv.records:
            calls = [it["call_id"] for it in r.body["input"] if it.get("type") == "function_call"]
            outs = [
                it["call_id"] for it in r.body["input"] if it.get("type") == "function_call_output"
            ]
            assert calls == outs  # parallel calls and outputs kept or dropped together, in order
            assert r.body["instructions"] == "You are a coding agent."
        first = next(i for i, r in enumerate(srv.records) if r.status == 400)
        assert all(r.tokens <= 5000 for r in srv.records[first + 1 :])


def test_responses_conversion_round_trip():
    items = [
        {"role": "user", "content": [{"type": "input_text", "text": "hello"}]},
        {"type": "reasoning", "id": "rs_1", "summary": [], "encrypted_content": "xyz"},
        {
            "type": "function_call",
            "id": "fc_1",
            "call_id": "c1",
            "name": "f",
            "arguments": '{"a": 1}',
        },
        {"type": "function_call", "id": "fc_2", "call_id": "c2", "name": "g", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "c1", "output": "one"},
        {"type": "function_call_output", "call_id": "c2", "output": "two"},
        {
            "type": "message",
            "role": "assistant",
            "id": "msg_1",
            "content": [{"type": "output_text", "text": "ok"}],
        },
    ]
    conv = ResponsesInput(items, instructions="sys")
    assert [m["role"] for m in conv.messages] == [
        "system",
        "user",
        "assistant",
        "tool",
        "tool",
        "assistant",
    ]
    assert [tc["id"] for tc in conv.messages[2]["tool_calls"]] == ["c1", "c2"]
    assert_pairing(conv.messages)
    assert conv.to_items(conv.messages) == items
    changed = [*conv.messages[:3], {**conv.messages[3], "content": "on[...]"}, *conv.messages[4:]]
    back = conv.to_items(changed)
    assert back[4] == {"type": "function_call_output", "call_id": "c1", "output": "on[...]"}


def test_prepare_responses_input_helper(policy_factory):
    session = Session(policy_factory())
    items = [{"role": "user", "content": "hi"}]
    assert prepare_responses_input(session, items) == items
    assert json.dumps(items)


def test_wrap_makes_the_session_of_a_conversation(policy_factory) -> None:
    policy = policy_factory()
    client = openai.OpenAI(base_url="http://127.0.0.1:9/v1", api_key="test", max_retries=0)
    assert wrap(client, policy, conv_id="thread-7").session.conv_id == "thread-7"
    own = Session(policy, conv_id="mine")
    assert wrap(client, own, conv_id="mine").session is own
    with pytest.raises(ValueError, match="conversation 'mine', not conv_id='other'"):
        wrap(client, own, conv_id="other")


def test_recall_tools_and_answer_recall(tmp_path) -> None:
    from ctxpolicy.integrations.openai import answer_recall, is_recall_call, recall_tools

    from .conftest import make_policy

    session = Session(make_policy(tmp_path, max_chars=800), conv_id="recall")
    assert [t["function"]["name"] for t in recall_tools()] == ["ctx_recall", "ctx_search"]
    script = [
        {"tool_calls": [{"name": "read_file", "arguments": {"path": "a.py"}}]},
        {"tool_calls": [{"name": "ctx_search", "arguments": {"pattern": "value_0_7 "}}]},
        {"tool_calls": [{"name": "ctx_recall", "arguments": {"ref": "ctxsnap://other/x"}}]},
    ]
    with ScriptedLLMServer(window=60000, script=script) as srv:
        client = client_for(srv, session)
        chat: list[Any] = [{"role": "user", "content": "go"}]
        for _ in range(3):
            resp = client.chat.completions.create(
                model="m", messages=chat, tools=[*TOOLS, *recall_tools()]
            )
            msg = resp.choices[0].message
            chat.append(msg)
            for call in msg.tool_calls or []:
                reply = answer_recall(session, call)
                if reply is None:
                    assert not is_recall_call(call)
                    text = session.add_tool_result(call, big_output(0))
                    reply = {"role": "tool", "tool_call_id": call.id, "content": text}
                chat.append(reply)
    assert "ctxsnap://" in chat[4]["content"] and "value_0_7 " in chat[4]["content"]
    assert chat[-1]["content"].startswith("Error: no earlier tool result")  # not ours
    assert answer_recall(session, {"id": "x", "function": {"name": "read_file"}}) is None
    # a Responses API function_call item works too
    item = {
        "type": "function_call",
        "call_id": "r1",
        "name": "ctx_search",
        "arguments": json.dumps({"pattern": "value_0_7 "}),
    }
    assert "value_0_7 " in answer_recall(session, item)["content"]


def test_async_client_converts_a_long_history_off_the_event_loop(policy_factory):
    """A long request's messages (or Responses items) become engine messages in a
    worker thread, not on the event loop; a short one's where it is."""
    import threading

    from ctxpolicy.integrations._common import LONG_REQUEST

    session = Session(policy_factory(window=200_000, max_chars=4000))
    SeenThreads.threads = []

    def history(n: int) -> list[Any]:
        out: list[Any] = [{"role": "system", "content": "sys"}]
        out += [{"role": "user" if i % 2 else "assistant", "content": f"m{i}"} for i in range(n)]
        return [*out, SeenThreads(role="user", content="last")]

    async def main(srv: ScriptedLLMServer) -> list[list[int]]:
        loop = threading.get_ident()
        client = client_for(srv, session, async_=True)
        seen = []
        for n in (LONG_REQUEST, 3):
            SeenThreads.threads = []
            await client.chat.completions.create(model="m", messages=history(n))
            seen.append([t == loop for t in SeenThreads.threads])
            SeenThreads.threads = []
            await client.responses.create(model="m", input=history(n))
            seen.append([t == loop for t in SeenThreads.threads])
        await client.close()
        return seen

    with ScriptedLLMServer(window=200_000) as srv:
        long_chat, long_items, short_chat, short_items = asyncio.run(main(srv))
    assert long_chat == [False] and long_items and not any(long_items)
    assert short_chat == [True] and short_items and all(short_items)
