"""LiteLLM adapter: the real ``litellm`` SDK against the scripted server, and its proxy hook."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path
from typing import Any

import pytest

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")  # no fetch at import
litellm = pytest.importorskip(
    "litellm", reason="the 'litellm' extra is not installed (pip install 'ctxpolicy[litellm]')"
)

from ctxpolicy.calls import conversation_key  # noqa: E402
from ctxpolicy.engine import ContextOverflowError, Session  # noqa: E402
from ctxpolicy.integrations import litellm as ctx_litellm  # noqa: E402
from ctxpolicy.testing.server import ScriptedLLMServer  # noqa: E402

from .conftest import TOOLS, Crowd, assert_pairing, big_output, make_policy  # noqa: E402


def tool_script(body: dict[str, Any]) -> dict[str, Any]:
    return {"tool_calls": [{"name": "read_file", "arguments": {"path": "src/app.py"}}]}


def report_overflow(hook: Any, key: Any, model: str, conv: str, history: list[Any]) -> None:
    """The provider's answer to a call of ``conv``: its 8000-token window overflowed."""
    err = litellm.ContextWindowExceededError(
        message="This model's maximum context length is 8000 tokens",
        model=model,
        llm_provider="openai",
    )
    data = {"model": model, "messages": history, "litellm_session_id": conv}
    asyncio.run(hook.async_post_call_failure_hook(data, err, key))


def run(session: Session, srv: ScriptedLLMServer, steps: int, *, use_async: bool = False):
    history: list[Any] = [
        {"role": "system", "content": "You are a coding agent."},
        {"role": "user", "content": "Fix BUG-1234."},
    ]
    kw = {"model": "openai/scripted", "api_base": srv.base_url, "api_key": "test"}
    for step in range(steps):
        if use_async:
            resp = asyncio.run(
                ctx_litellm.acompletion(session, messages=history, tools=TOOLS, **kw)
            )
        else:
            resp = ctx_litellm.completion(session, messages=history, tools=TOOLS, **kw)
        msg = resp.choices[0].message
        history.append(msg)  # LiteLLM's own Message object
        for call in msg.tool_calls or []:
            text = session.add_tool_result(call, big_output(step))
            history.append({"role": "tool", "tool_call_id": call.id, "content": text})
    return history


@pytest.mark.parametrize("use_async", [False, True])
def test_completion_learns_the_window_from_the_overflow_error(
    tmp_path: Path, use_async: bool
) -> None:
    session = Session(make_policy(tmp_path, window=16000, max_chars=4000), conv_id="c1")
    with ScriptedLLMServer(window=8000, script=tool_script) as srv:
        run(session, srv, 8, use_async=use_async)
    statuses = [r.status for r in srv.records]
    assert statuses.count(400) == 1 and statuses[-1] == 200
    assert session.budget().window == 8000
    assert session.stats.reactive == 1
    for r in srv.records:
        assert_pairing(r.body["messages"])
        assert r.body["tools"] == TOOLS


def test_completion_raises_after_the_retries(tmp_path: Path) -> None:
    session = Session(make_policy(tmp_path), conv_id="c2")
    server = ScriptedLLMServer(window=6000, script=lambda body: {"overflow": True})
    with server as srv, pytest.raises(ContextOverflowError):
        ctx_litellm.completion(
            session,
            model="openai/scripted",
            api_base=srv.base_url,
            api_key="test",
            messages=[{"role": "user", "content": "hi"}],
        )
    assert len(srv.records) == 2


def test_recall_tool_schemas_and_answers(tmp_path: Path) -> None:
    session = Session(make_policy(tmp_path, max_chars=800), conv_id="c3")
    script = [
        {"tool_calls": [{"name": "read_file", "arguments": {}}]},
        {"tool_calls": [{"name": "ctx_search", "arguments": {"pattern": "value_0_7 "}}]},
    ]
    with ScriptedLLMServer(window=60000, script=script) as srv:
        kw = {"model": "openai/scripted", "api_base": srv.base_url, "api_key": "test"}
        tools = [*TOOLS, *ctx_litellm.recall_tools()]
        history: list[Any] = [{"role": "user", "content": "go"}]
        for step in range(2):
            msg = ctx_litellm.completion(session, messages=history, tools=tools, **kw)
            msg = msg.choices[0].message
            history.append(msg)
            for call in msg.tool_calls or []:
                reply = ctx_litellm.answer_recall(session, call)
                if reply is None:
                    out = session.add_tool_result(call, big_output(step))
                    reply = {"role": "tool", "tool_call_id": call.id, "content": out}
                history.append(reply)
    assert [t["function"]["name"] for t in ctx_litellm.recall_tools()] == [
        "ctx_recall",
        "ctx_search",
    ]
    assert "ctxsnap://" in history[-1]["content"] and "value_0_7 " in history[-1]["content"]


def test_proxy_hook_maps_session_ids_and_learns_from_failures(tmp_path: Path) -> None:
    from litellm.integrations.custom_logger import CustomLogger
    from litellm.proxy._types import UserAPIKeyAuth

    hook = ctx_litellm.ContextPolicyHook(make_policy(tmp_path, window=16000, max_chars=4000))
    assert isinstance(hook, CustomLogger)
    key = UserAPIKeyAuth(api_key="sk-test")
    history: list[dict[str, Any]] = [{"role": "user", "content": "Fix BUG-1234."}]
    for i in range(10):
        history.append(
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": f"c{i}",
                        "type": "function",
                        "function": {"name": "read_file", "arguments": "{}"},
                    }
                ],
            }
        )
        history.append({"role": "tool", "tool_call_id": f"c{i}", "content": big_output(i, 60)})

    def request(**extra: Any) -> dict[str, Any]:
        data = {"model": "m", "messages": list(history), **extra}
        return asyncio.run(hook.async_pre_call_hook(key, None, data, "completion"))

    def kept() -> list[str]:  # the session ids of the kept conversations (all of model "m")
        return [c.removeprefix("m/") for c in hook.sessions.conversations()]

    out = request(litellm_session_id="conv-a")
    assert "conv-a" in kept()
    session = hook.sessions.peek("m/conv-a", tenant=ctx_litellm.tenant_of(key))
    assert session is not None
    assert_pairing(out["messages"])
    assert session.counter.count_messages(out["messages"]) < 16000
    # the header and metadata forms name a conversation too
    request(metadata={"headers": {"x-ctxpolicy-conversation": "conv-b"}})
    request(metadata={"session_id": "conv-c"})
    assert kept() == ["conv-a", "conv-b", "conv-c"]
    # no id: prepared by a private one-request session, nothing kept or shared
    request()
    assert kept() == ["conv-a", "conv-b", "conv-c"]
    # a non-chat request is forwarded unchanged
    emb = {"model": "e", "input": ["x"]}
    assert asyncio.run(hook.async_pre_call_hook(key, None, dict(emb), "embeddings")) == emb
    # an overflow reported by the provider teaches conv-a's session the real window
    report_overflow(hook, key, "m", "conv-a", history)
    assert session.budget().window == 8000
    out = request(litellm_session_id="conv-a")
    assert session.counter.count_messages(out["messages"]) < 8000


def test_another_key_or_model_never_resets_or_shrinks_a_conversation(tmp_path: Path) -> None:
    """Two API keys (tenants) and two models on one session id: four conversations. His
    overflow on a small model never shrinks her conversation's window, and his request
    never resets hers; the key itself is never in a stored id."""
    from litellm.proxy._types import UserAPIKeyAuth

    from .conftest import long_history

    hook = ctx_litellm.ContextPolicyHook(make_policy(tmp_path, window=16000, max_chars=4000))
    her, him = UserAPIKeyAuth(api_key="sk-her-secret"), UserAPIKeyAuth(api_key="sk-his-secret")
    history = long_history(10)

    def request(key: Any, model: str) -> dict[str, Any]:
        data = {"model": model, "messages": list(history), "litellm_session_id": "shared"}
        return asyncio.run(hook.async_pre_call_hook(key, None, data, "completion"))

    request(her, "big")
    mine = hook.sessions.peek("big/shared", tenant=ctx_litellm.tenant_of(her))
    assert mine is not None
    before = mine.state.to_entries()
    request(him, "big")
    request(him, "small")
    request(her, "small")
    assert len(hook.sessions) == 4
    assert all("secret" not in s.conv_id for s in hook.sessions.sessions())
    report_overflow(hook, him, "small", "shared", history)
    his_small = hook.sessions.peek("small/shared", tenant=ctx_litellm.tenant_of(him))
    assert his_small is not None and his_small.budget().window == 8000
    assert mine.budget().window == 16000  # hers is untouched ...
    assert hook.sessions.peek("big/shared", tenant=ctx_litellm.tenant_of(her)) is mine
    assert mine.state.to_entries() == before  # ... and not reset


@pytest.mark.parametrize("event", ["context.status", "context.overflow_error"])
def test_other_conversations_opened_during_a_hook_never_evict_it(
    tmp_path: Path, event: str
) -> None:
    """``max_sessions=1``: other conversations opened from another thread in the middle
    of the proxy hook's engine step (prepare, learning from an overflow) neither close
    the conversation's session nor drop its state."""
    from litellm.proxy._types import UserAPIKeyAuth

    key = UserAPIKeyAuth(api_key="sk-test")
    target = conversation_key("test_agent", "m/conv-a", ctx_litellm.tenant_of(key))
    crowd = Crowd(target, event, nth=2 if event == "context.status" else 1)
    policy = Crowd.policy(tmp_path, window=16000, max_chars=4000)
    hook = ctx_litellm.ContextPolicyHook(policy, max_sessions=1, on_event=crowd)
    crowd.attach(hook.sessions)
    history: list[dict[str, Any]] = [{"role": "user", "content": "Fix BUG-1234."}]
    data = {"model": "m", "messages": history, "litellm_session_id": "conv-a"}
    for _ in range(2):
        asyncio.run(hook.async_pre_call_hook(key, None, dict(data), "completion"))
    report_overflow(hook, key, "m", "conv-a", history)
    crowd.assert_held()
    sess = hook.sessions.peek("m/conv-a", tenant=ctx_litellm.tenant_of(key))
    assert sess is not None and sess.stats.prepares >= 2 and sess.stats.reactive == 1
