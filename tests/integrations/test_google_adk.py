"""Google ADK plugin against the real ``google-adk`` library: an ``LlmAgent`` whose model
(ADK's ``LiteLlm``) calls ctxpolicy's scripted server over HTTP."""

from __future__ import annotations

import asyncio
import os
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")  # no fetch at import
pytest.importorskip("google.adk", reason="the 'google_adk' extra is not installed")
pytest.importorskip("litellm", reason="ADK's LiteLlm model needs the 'litellm' extra")

from google.adk.agents import LlmAgent
from google.adk.models.lite_llm import LiteLlm
from google.adk.runners import InMemoryRunner
from google.genai import types

from ctxpolicy.engine import ContextOverflowError
from ctxpolicy.integrations.google_adk import (
    ContextPolicyPlugin,
    from_openai,
    to_openai,
)
from ctxpolicy.sim.importers import load_trace, mark_warning
from ctxpolicy.testing.server import ScriptedLLMServer

from .conftest import Crowd, assert_pairing, big_output


def read_file(path: str) -> str:
    """Read a file of the repository."""
    step = int(path.rsplit("m", 1)[1].split(".")[0])
    return big_output(step, 160)


def counting(limit: int, final: str = "done: BUG-1234 fixed") -> Callable[[dict], dict]:
    calls: list[int] = []

    def script(body: dict[str, Any]) -> dict[str, Any]:
        calls.append(1)
        n = len(calls) - 1
        if n >= limit:
            return {"content": final}
        return {"tool_calls": [{"name": "read_file", "arguments": {"path": f"src/m{n}.py"}}]}

    return script


async def run(
    plugin: Any, srv: ScriptedLLMServer, *, user: str = "u1", session_id: str | None = None
) -> tuple[str | None, str]:
    model = LiteLlm(model="openai/scripted", api_base=srv.base_url, api_key="test")
    agent = LlmAgent(
        name="coder",
        model=model,
        instruction="You are a coding agent. Fix BUG-1234.",
        tools=[read_file, *plugin.recall_tools()],
    )
    runner = InMemoryRunner(agent=agent, app_name="demo", plugins=[plugin])
    s = await runner.session_service.create_session(
        app_name="demo", user_id=user, session_id=session_id
    )
    final = None
    message = types.Content(role="user", parts=[types.Part(text="Fix BUG-1234 in src/.")])
    async for ev in runner.run_async(user_id=user, session_id=s.id, new_message=message):
        if ev.is_final_response() and ev.content and ev.content.parts:
            final = ev.content.parts[0].text
    return final, s.id


def test_agent_runs_inside_the_budget_with_preprocessed_results(
    policy_factory: Any, tmp_path: Path
) -> None:
    plugin = ContextPolicyPlugin(policy_factory(window=6000, max_chars=1500), record=tmp_path)
    with ScriptedLLMServer(window=6000, script=counting(14)) as srv:
        final, sid = asyncio.run(run(plugin, srv))
    assert final == "done: BUG-1234 fixed"
    assert srv.rejections == 0 and len(srv.records) == 15
    for r in srv.records:
        assert_pairing(r.body["messages"])
        assert r.tokens <= 6000 - 512
    # the session is ADK's own (app, user, session, agent), never a shared default
    sess = plugin.session_for("demo", "u1", sid, "coder")
    assert sess.conv_id == f"test_agent/demo/u1/{sid}/coder"
    assert sess.stats.tool_results == 14 and sess.stats.prepares == 15
    sent = [m for r in srv.records for m in r.body["messages"] if m["role"] == "tool"]
    assert sent and all(len(m["content"]) < len(big_output(0, 160)) for m in sent)
    assert any("[Full detail available at:" in m["content"] for m in sent)
    assert any(e["type"] == "context.compacted" for e in sess.events)
    # the recording: raw results, the final answer, no ctxpolicy text
    assert sess.recorder is not None
    recorded = load_trace(sess.recorder.path)
    tools = [m["content"] for m in recorded if m["role"] == "tool"]
    assert tools == [big_output(i, 160) for i in range(14)]
    assert recorded[-1] == {"role": "assistant", "content": "done: BUG-1234 fixed"}
    assert mark_warning(sess.recorder.path) is None


def test_two_users_and_two_sessions_never_share(policy_factory: Any) -> None:
    plugin = ContextPolicyPlugin(policy_factory())
    with ScriptedLLMServer(window=6000, script=lambda body: {"content": "ok"}) as srv:
        asyncio.run(run(plugin, srv, user="alice", session_id="s"))
        asyncio.run(run(plugin, srv, user="bob", session_id="s"))
        asyncio.run(run(plugin, srv, user="alice", session_id="t/../x"))
    ids = sorted(s.conv_id for s in plugin.sessions.sessions())
    assert ids == [
        "test_agent/demo/alice/s/coder",
        "test_agent/demo/alice/t%2F..%2Fx/coder",
        "test_agent/demo/bob/s/coder",
    ]


def test_recall_tools_answer_from_this_conversation(policy_factory: Any) -> None:
    plugin = ContextPolicyPlugin(policy_factory(max_chars=800))
    seen: dict[str, str] = {}

    def script(body: dict[str, Any]) -> dict[str, Any]:
        msgs = body["messages"]
        tools = [m for m in msgs if m["role"] == "tool"]
        if not tools:
            return {"tool_calls": [{"name": "read_file", "arguments": {"path": "src/m3.py"}}]}
        if len(tools) == 1:
            # LiteLlm sends ADK's {"result": text} as JSON
            ref = re.findall(r"ctxsnap://[^\s)\]\"\\]+", tools[0]["content"])[-1]
            seen["ref"] = ref
            args = {"ref": ref, "grep": "value_3_150"}
            return {"tool_calls": [{"name": "ctx_recall", "arguments": args}]}
        seen["answer"] = tools[-1]["content"]
        return {"content": "found it"}

    with ScriptedLLMServer(window=20000, script=script) as srv:
        final, _ = asyncio.run(run(plugin, srv))
    assert final == "found it"
    assert seen["ref"].startswith("ctxsnap://")
    assert "value_3_150 = compute(150, step=3)" in seen["answer"]
    names = {d["function"]["name"] for d in srv.records[0].body["tools"]}
    assert {"read_file", "ctx_recall", "ctx_search"} <= names


def test_overflow_error_compacts_and_retries(policy_factory: Any) -> None:
    # the policy claims 16000 tokens, the server holds 5000: ADK surfaces the
    # provider's 400 to on_model_error_callback, which compacts and calls again
    plugin = ContextPolicyPlugin(policy_factory(window=16000, keep_recent_rounds=2))
    with ScriptedLLMServer(window=5000, script=counting(10)) as srv:
        final, sid = asyncio.run(run(plugin, srv))
    assert final == "done: BUG-1234 fixed"
    assert srv.rejections >= 1
    sess = plugin.session_for("demo", "u1", sid, "coder")
    assert sess.stats.reactive == srv.rejections
    assert any(e["type"] == "context.window_learned" for e in sess.events)
    accepted = [r for r in srv.records if r.status == 200]
    assert len(accepted) == 11 and all(r.tokens <= 5000 for r in accepted)


def test_overflow_every_time_raises_context_overflow(policy_factory: Any) -> None:
    # ADK wraps an exception of a plugin callback in a RuntimeError naming the plugin,
    # chained to ours
    plugin = ContextPolicyPlugin(policy_factory())
    with (
        ScriptedLLMServer(window=6000, script=lambda body: {"overflow": True}) as srv,
        pytest.raises(RuntimeError, match="Error in plugin 'ctxpolicy'") as info,
    ):
        asyncio.run(run(plugin, srv))
    assert isinstance(info.value.__cause__, ContextOverflowError)
    assert info.value.__cause__.attempts == 2


def test_a_session_object_is_refused(policy_factory: Any) -> None:
    from ctxpolicy.engine import Session

    with pytest.raises(TypeError, match="one session per ADK session"):
        ContextPolicyPlugin(Session(policy_factory()))


def test_contents_round_trip() -> None:
    contents = [
        types.Content(role="user", parts=[types.Part(text="go")]),
        types.Content(
            role="model",
            parts=[
                types.Part(text="reading"),
                types.Part(
                    function_call=types.FunctionCall(id="c1", name="read_file", args={"p": 1})
                ),
            ],
        ),
        types.Content(
            role="user",
            parts=[
                types.Part(
                    function_response=types.FunctionResponse(
                        id="c1", name="read_file", response={"result": "text"}
                    )
                )
            ],
        ),
    ]
    msgs = to_openai(contents, "be brief")
    assert [m["role"] for m in msgs] == ["system", "user", "assistant", "tool"]
    assert msgs[3] == {"role": "tool", "tool_call_id": "c1", "content": "text"}
    back = from_openai(msgs, contents)
    assert back[0] is contents[0] and back[1] is contents[1]  # unchanged: the originals
    assert back[2].parts[0] is contents[2].parts[0]
    changed = from_openai([*msgs[:3], {**msgs[3], "content": "short"}], contents)
    fr = changed[2].parts[0].function_response
    assert (fr.id, fr.name, fr.response) == ("c1", "read_file", {"result": "short"})


@pytest.mark.parametrize("event", ["context.status", "tool.preprocessed", "context.usage"])
def test_other_conversations_opened_during_a_callback_never_evict_it(
    tmp_path: Path, event: str
) -> None:
    """One session kept (``max_sessions`` 1): other conversations opened from another
    thread in the middle of a callback's engine step (prepare, a tool result, usage)
    neither close the ADK session's ctxpolicy session nor drop its state."""
    crowd = Crowd("test_agent/demo/u1/s1/coder", event, nth=2)
    plugin = ContextPolicyPlugin(Crowd.policy(tmp_path, max_chars=1500), on_event=crowd)
    plugin.sessions.max_sessions = 1
    crowd.attach(plugin.sessions)
    with ScriptedLLMServer(window=6000, script=counting(3)) as srv:
        final, _ = asyncio.run(run(plugin, srv, session_id="s1"))
    assert final == "done: BUG-1234 fixed"
    crowd.assert_held()
    sess = plugin.session_for("demo", "u1", "s1", "coder")
    assert sess.stats.tool_results == 3 and sess.stats.prepares == 4  # nothing lost
