"""pydantic-ai adapter: the real ``pydantic_ai`` Agent, FunctionModel and the scripted server."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

pai = pytest.importorskip(
    "pydantic_ai",
    reason="the 'pydantic_ai' extra is not installed (pip install 'ctxpolicy[pydantic_ai]')",
)
from pydantic_ai.messages import ModelResponse, TextPart, ToolCallPart  # noqa: E402
from pydantic_ai.models.function import AgentInfo, FunctionModel  # noqa: E402

from ctxpolicy.engine import ContextOverflowError, Session  # noqa: E402
from ctxpolicy.integrations.pydantic_ai import (  # noqa: E402
    ContextPolicy,
    MessageMap,
    history_processor,
)
from ctxpolicy.testing.server import ScriptedLLMServer  # noqa: E402

from .conftest import Crowd, assert_pairing, big_output, make_policy  # noqa: E402


def read_file(path: str) -> str:
    """Read a file of the repository."""
    return big_output(int(path.split("_")[-1].split(".")[0]))


def scripted(steps: int, seen: list[list[Any]], *, recall_at: int | None = None):
    def model(messages: list[Any], info: AgentInfo) -> ModelResponse:
        seen.append(messages)
        i = len(seen)
        if recall_at is not None and i == recall_at:
            return ModelResponse(
                parts=[ToolCallPart("ctx_search", {"pattern": "value_1_7 "}, tool_call_id="r1")]
            )
        if i > steps:
            return ModelResponse(parts=[TextPart("fixed")])
        return ModelResponse(
            parts=[ToolCallPart("read_file", {"path": f"src/m_{i}.py"}, tool_call_id=f"c{i}")]
        )

    return model


def chat_of(messages: list[Any]) -> list[dict[str, Any]]:
    return MessageMap(messages).messages


def test_tool_results_go_through_the_hook_and_history_is_prepared(tmp_path: Path) -> None:
    cap = ContextPolicy(make_policy(tmp_path, window=6000, max_chars=1500))
    seen: list[list[Any]] = []
    agent = pai.Agent(FunctionModel(scripted(8, seen)), tools=[read_file], capabilities=[cap])
    result = agent.run_sync("Fix BUG-1234", conversation_id="user-42")
    assert result.output == "fixed"
    sess = cap.session("user-42")
    assert sess.conv_id == "test_agent/user-42"  # keyed by the agent too
    assert sess.stats.tool_results == 8 and sess.stats.compactions
    for messages in seen:
        chat = chat_of(messages)
        assert_pairing(chat)
        assert all(len(m["content"]) < 2000 for m in chat if m["role"] == "tool")
        assert sess.counter.count_messages(chat) < 6000
    # the run's own history holds the processed results (ctxsnap references)
    assert "ctxsnap://" in str(result.all_messages())


def test_conversations_are_separate_and_never_shared(tmp_path: Path) -> None:
    cap = ContextPolicy(make_policy(tmp_path))
    agent = pai.Agent(FunctionModel(scripted(1, [])), tools=[read_file], capabilities=[cap])
    r1 = agent.run_sync("a")  # no id: pydantic-ai gives the conversation a fresh one
    r2 = agent.run_sync("b")
    ids = cap.sessions.conversations()
    assert len(ids) == 2 and ids[0] != ids[1]
    # continuing a conversation from its history keeps its id and its session
    agent.run_sync("c", message_history=r1.all_messages())
    assert cap.sessions.conversations() == [ids[1], ids[0]]
    assert r2 is not None
    with pytest.raises(TypeError, match="one session per conversation"):
        ContextPolicy(Session(make_policy(tmp_path)))


def test_recall_tools_are_pydantic_ai_tools(tmp_path: Path) -> None:
    cap = ContextPolicy(make_policy(tmp_path, max_chars=800))
    seen: list[list[Any]] = []
    agent = pai.Agent(
        FunctionModel(scripted(2, seen, recall_at=3)), tools=[read_file], capabilities=[cap]
    )
    agent.run_sync("Fix BUG-1234", conversation_id="c-recall")
    answer = [m for m in chat_of(seen[3]) if m["role"] == "tool"][-1]["content"]
    assert "ctxsnap://" in answer and "value_1_7 " in answer


def _openai_model(srv: ScriptedLLMServer) -> Any:
    openai_models = pytest.importorskip("pydantic_ai.models.openai")
    providers = pytest.importorskip("pydantic_ai.providers.openai")
    import openai

    client = openai.AsyncOpenAI(base_url=srv.base_url, api_key="test", max_retries=0)
    return openai_models.OpenAIChatModel(
        "scripted", provider=providers.OpenAIProvider(openai_client=client)
    )


def test_overflow_error_over_http_compacts_and_retries(tmp_path: Path) -> None:
    cap = ContextPolicy(make_policy(tmp_path, window=20000))
    n = {"i": 0}

    def script(body: dict[str, Any]) -> dict[str, Any]:
        n["i"] += 1
        if n["i"] == 3:
            return {"overflow": True}
        if n["i"] > 5:
            return {"content": "fixed"}
        return {"tool_calls": [{"name": "read_file", "arguments": {"path": f"src/m_{n['i']}.py"}}]}

    with ScriptedLLMServer(window=20000, script=script) as srv:
        agent = pai.Agent(_openai_model(srv), tools=[read_file], capabilities=[cap])
        result = agent.run_sync("Fix BUG-1234", conversation_id="c-over")
    assert result.output == "fixed"
    assert [r.status for r in srv.records].count(400) == 1
    assert cap.session("c-over").stats.reactive == 1
    for r in srv.records:
        assert_pairing(r.body["messages"])


def test_overflow_every_time_raises_context_overflow(tmp_path: Path) -> None:
    cap = ContextPolicy(make_policy(tmp_path))
    server = ScriptedLLMServer(window=6000, script=lambda body: {"overflow": True})
    with server as srv, pytest.raises(ContextOverflowError):
        pai.Agent(_openai_model(srv), capabilities=[cap]).run_sync("hi", conversation_id="x")
    assert len(srv.records) == 2


def test_history_processor_alone(tmp_path: Path) -> None:
    sess = Session(make_policy(tmp_path, window=6000), conv_id="hp")
    seen: list[list[Any]] = []
    cap = pai.capabilities.ProcessHistory(history_processor(sess))
    agent = pai.Agent(FunctionModel(scripted(6, seen)), tools=[read_file], capabilities=[cap])
    asyncio.run(agent.run("Fix BUG-1234"))
    assert sess.stats.prepares == 7
    assert all(sess.counter.count_messages(chat_of(m)) < 9000 for m in seen)


def test_two_agents_on_one_conversation_id_never_share_a_state(tmp_path: Path) -> None:
    from .conftest import long_history, resumed

    coder = make_policy(tmp_path)
    analyst = coder.model_copy(update={"agent": "analyst"})
    first = ContextPolicy(coder)
    s = first.session("user-42")
    s.prepare(long_history())
    assert s.stats.compactions
    first.sessions.close()
    events: list[dict[str, Any]] = []
    other = ContextPolicy(analyst, on_event=events.append).session("user-42")
    assert other.conv_id == "analyst/user-42" != s.conv_id
    assert not resumed(events)
    again: list[dict[str, Any]] = []
    ContextPolicy(coder, on_event=again.append).session("user-42")
    assert resumed(again)


@pytest.mark.parametrize("event", ["context.status", "tool.preprocessed", "context.usage"])
def test_other_conversations_opened_during_a_hook_never_evict_it(
    tmp_path: Path, event: str
) -> None:
    """``max_sessions=1``: other conversations opened from another thread in the middle
    of a hook's engine step (prepare, a tool result, usage) neither close the run's
    session nor drop its state."""
    crowd = Crowd("test_agent/user-42", event, nth=2)
    cap = ContextPolicy(crowd.policy(tmp_path), max_sessions=1, on_event=crowd)
    crowd.attach(cap.sessions)
    # FunctionModel reports usage: after_model_request records it
    agent = pai.Agent(FunctionModel(scripted(3, [])), tools=[read_file], capabilities=[cap])
    assert agent.run_sync("Fix BUG-1234", conversation_id="user-42").output == "fixed"
    crowd.assert_held()
    assert cap.session("user-42").stats.tool_results == 3  # no step's state was lost
