"""OpenAI Agents SDK adapter: the real ``openai-agents`` Runner against the scripted server."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

agents = pytest.importorskip(
    "agents",
    reason="the 'openai_agents' extra is not installed (pip install 'ctxpolicy[openai_agents]')",
)
import openai  # noqa: E402

from ctxpolicy.engine import ContextOverflowError, Session  # noqa: E402
from ctxpolicy.integrations.openai_agents import AgentsContext  # noqa: E402
from ctxpolicy.testing.server import ScriptedLLMServer  # noqa: E402

from .conftest import big_output, make_policy  # noqa: E402

agents.set_tracing_disabled(True)


@agents.function_tool
def read_file(path: str) -> str:
    """Read a file of the repository."""
    return big_output(int(path.split("_")[-1].split(".")[0]))


def script(steps: int, *, overflow_at: set[int] | None = None, recall: int | None = None):
    n = {"i": 0}

    def reply(body: dict[str, Any]) -> dict[str, Any]:
        n["i"] += 1
        i = n["i"]
        if overflow_at and i in overflow_at:
            return {"overflow": True}
        if recall is not None and i == recall:
            return {"tool_calls": [{"name": "ctx_search", "arguments": {"pattern": "value_1_7 "}}]}
        if i > steps:
            return {"content": "fixed"}
        return {"tool_calls": [{"name": "read_file", "arguments": {"path": f"src/m_{i}.py"}}]}

    return reply


def make_agent(srv: ScriptedLLMServer, ctx: AgentsContext) -> Any:
    client = openai.AsyncOpenAI(base_url=srv.base_url, api_key="test", max_retries=0)
    return agents.Agent(
        name="coder",
        instructions="You are a coding agent.",
        tools=[read_file, *ctx.recall_tools()],
        model=agents.OpenAIResponsesModel(model="scripted", openai_client=client),
    )


def test_sdk_session_id_is_the_conversation_and_results_are_processed(tmp_path: Path) -> None:
    chat = agents.SQLiteSession("user-42", str(tmp_path / "chat.db"))
    ctx = AgentsContext(make_policy(tmp_path, window=6000, max_chars=1500), sdk_session=chat)
    assert ctx.conv_id == "user-42"
    assert ctx.session.conv_id == "test_agent/user-42"  # keyed by the agent too
    with ScriptedLLMServer(window=6000, script=script(8)) as srv:
        result = asyncio.run(ctx.run(make_agent(srv, ctx), "Fix BUG-1234", max_turns=20))
    assert result.final_output == "fixed"
    assert srv.rejections == 0
    # every tool output the model saw was preprocessed (head_tail, 1500 chars) ...
    for rec in srv.records:
        outs = [i for i in rec.body["input"] if i.get("type") == "function_call_output"]
        assert all(len(o["output"]) < 2000 for o in outs)
        assert rec.tokens <= 6000
    assert ctx.session.stats.tool_results == 8
    assert ctx.session.stats.compactions  # the window forced compaction on the way
    # ... while the SDK's own session keeps the raw outputs, and the input once
    items = asyncio.run(chat.get_items())
    raw = [i for i in items if i.get("type") == "function_call_output"]
    assert len(raw) == 8 and all(len(str(o["output"])) > 5000 for o in raw)
    assert sum(1 for i in items if i.get("role") == "user") == 1


def test_no_id_is_a_fresh_private_conversation(tmp_path: Path) -> None:
    policy = make_policy(tmp_path)
    a, b = AgentsContext(policy), AgentsContext(policy)
    assert a.conv_id != b.conv_id
    assert AgentsContext(policy, conv_id="c1").conv_id == "c1"
    with pytest.raises(ValueError, match="not conv_id"):
        AgentsContext(Session(policy, conv_id="x"), conv_id="y")


def test_overflow_error_compacts_and_retries_once(tmp_path: Path) -> None:
    chat = agents.SQLiteSession("t-overflow", str(tmp_path / "chat.db"))
    ctx = AgentsContext(make_policy(tmp_path, window=20000), sdk_session=chat)
    with ScriptedLLMServer(window=20000, script=script(4, overflow_at={3})) as srv:
        result = asyncio.run(ctx.run(make_agent(srv, ctx), "Fix BUG-1234", max_turns=20))
    assert result.final_output == "fixed"
    assert [r.status for r in srv.records].count(400) == 1
    assert ctx.session.stats.reactive == 1
    items = asyncio.run(chat.get_items())
    assert sum(1 for i in items if i.get("role") == "user") == 1  # the retry added nothing twice


def test_overflow_every_time_raises_context_overflow(tmp_path: Path) -> None:
    ctx = AgentsContext(make_policy(tmp_path))
    server = ScriptedLLMServer(window=6000, script=lambda body: {"overflow": True})
    with server as srv, pytest.raises(ContextOverflowError):
        asyncio.run(ctx.run(make_agent(srv, ctx), "Fix BUG-1234"))
    assert len(srv.records) == 2  # the call and one retry (on_overflow.retries: 1)


def test_recall_tools_answer_from_this_conversation(tmp_path: Path) -> None:
    ctx = AgentsContext(make_policy(tmp_path, max_chars=800))
    assert [t.name for t in ctx.recall_tools()] == ["ctx_recall", "ctx_search"]
    with ScriptedLLMServer(window=60000, script=script(2, recall=3)) as srv:
        asyncio.run(ctx.run(make_agent(srv, ctx), "Fix BUG-1234", max_turns=10))
    last = srv.records[-1].body["input"]
    answer = [i for i in last if i.get("type") == "function_call_output"][-1]["output"]
    assert "ctxsnap://" in answer and "value_1_7 " in answer


def test_run_config_keeps_other_fields_and_records_usage(tmp_path: Path) -> None:
    ctx = AgentsContext(make_policy(tmp_path))
    rc = ctx.run_config(workflow_name="w")
    assert rc.call_model_input_filter == ctx.filter and rc.workflow_name == "w"
    assert rc.group_id == ctx.conv_id
    with ScriptedLLMServer(window=6000, script=[{"content": "hi", "prompt_tokens": 80}]) as srv:
        asyncio.run(ctx.run(make_agent(srv, ctx), "hello"))
    assert any(e["type"] == "context.usage" for e in ctx.session.events)


def test_two_agents_on_one_sdk_session_never_share_a_state(tmp_path: Path) -> None:
    """Two policies on one SDK session id: each agent's state is its own (they shared
    one, so the second resumed the first's compactions)."""
    from .conftest import long_history, resumed

    coder = make_policy(tmp_path)
    analyst = coder.model_copy(update={"agent": "analyst"})
    chat = agents.SQLiteSession("user-42", str(tmp_path / "chat.db"))
    first = AgentsContext(coder, sdk_session=chat)
    first.session.prepare(long_history())
    assert first.session.stats.compactions
    first.session.close()
    events: list[dict[str, Any]] = []
    other = AgentsContext(analyst, sdk_session=chat, on_event=events.append)
    assert other.conv_id == first.conv_id == "user-42"
    assert other.session.conv_id == "analyst/user-42" != first.session.conv_id
    assert not resumed(events)  # a new conversation for this agent
    again: list[dict[str, Any]] = []
    AgentsContext(coder, sdk_session=chat, on_event=again.append)
    assert resumed(again)  # the coder's own state is still there
