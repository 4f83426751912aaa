"""AutoGen ChatCompletionContext with the real AssistantAgent and OpenAI client (autogen
0.4+ API) against the scripted local server over HTTP."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

pytest.importorskip(
    "autogen_agentchat",
    reason="the 'autogen' extra is not installed (pip install 'ctxpolicy[autogen]')",
)
pytest.importorskip("autogen_ext.models.openai", reason="autogen-ext[openai] is not installed")

from autogen_agentchat.agents import AssistantAgent
from autogen_core.models import (
    AssistantMessage,
    FunctionExecutionResult,
    FunctionExecutionResultMessage,
    UserMessage,
)
from autogen_ext.models.openai import OpenAIChatCompletionClient

from ctxpolicy.integrations.autogen import CtxPolicyContext, to_openai
from ctxpolicy.testing.server import ScriptedLLMServer, count_openai_tokens

from .conftest import assert_pairing, big_output, read_until

MODEL_INFO = {
    "vision": False,
    "function_calling": True,
    "json_output": False,
    "family": "unknown",
    "structured_output": False,
}


def client(srv: ScriptedLLMServer) -> Any:
    return OpenAIChatCompletionClient(
        model="scripted-model",
        base_url=srv.base_url,
        api_key="test",
        model_info=MODEL_INFO,
        max_retries=0,
    )


def test_assistant_agent_runs_inside_the_budget(policy_factory) -> None:
    steps = 14

    script = read_until(steps, lambda: srv.records)

    counter = {"n": 0}

    async def read_file(path: str) -> str:
        """Read a file of the repository."""
        counter["n"] += 1
        return big_output(counter["n"], 120)

    policy = policy_factory(window=6000, max_chars=1500)
    context = CtxPolicyContext(policy, conv_id="run-1")
    assert context.session.conv_id == "test_agent/run-1"
    with ScriptedLLMServer(window=6000, script=script) as srv:
        agent = AssistantAgent(
            "coder",
            client(srv),
            tools=[read_file, *context.recall_tools()],
            model_context=context,
            max_tool_iterations=steps,
            system_message="You are a coder.",
        )
        asyncio.run(agent.run(task="Task: fix BUG-1234"))
        n = counter["n"]
        assert srv.rejections == 0 and n >= steps - 1
        budget = context.session.budget()
        for body in srv.requests:
            assert_pairing(body["messages"])
            assert count_openai_tokens(body["messages"], body.get("tools")) <= budget.window
            assert body["messages"][0]["content"].startswith("You are a coder.")
        assert any(t["function"]["name"] == "ctx_search" for t in srv.requests[0]["tools"])
        assert len(srv.requests[-1]["messages"]) < 2 + 2 * n  # it compacted
    assert context.session.stats.tool_results == n
    assert context.session.stats.compactions
    kept = [m for m in context._messages if isinstance(m, FunctionExecutionResultMessage)]
    assert len(kept) == n  # the context keeps the full history
    assert "ctxsnap://" in kept[0].content[0].content or len(kept[0].content[0].content) <= 1600


def test_recall_tools_and_private_conversations(policy_factory) -> None:
    policy = policy_factory(window=6000, max_chars=300)
    a, b = CtxPolicyContext(policy), CtxPolicyContext(policy)
    assert a.session.conv_id != b.session.conv_id  # no id: private, never shared

    async def run() -> tuple[str, str]:
        from autogen_core import FunctionCall

        await a.add_message(UserMessage(content="task", source="user"))
        await a.add_message(
            AssistantMessage(
                content=[FunctionCall(id="c1", name="read_file", arguments='{"p": 1}')],
                source="coder",
            )
        )
        await a.add_message(
            FunctionExecutionResultMessage(
                content=[
                    FunctionExecutionResult(
                        content=big_output(3, 200), name="read_file", call_id="c1"
                    )
                ]
            )
        )
        _recall, search = a.recall_tools()
        found = await search.run_json({"pattern": "value_3_150"}, cancellation_token=None)  # type: ignore[arg-type]
        other = await b.recall_tools()[1].run_json({"pattern": "value_3_150"}, None)  # type: ignore[arg-type]
        return str(found), str(other)

    found, other = asyncio.run(run())
    assert "value_3_150" in found and "ctxsnap://" in found
    assert "No earlier tool result" in other
    msgs = to_openai(a._messages)
    assert msgs[-1]["role"] == "tool" and len(msgs[-1]["content"]) < 2000


def _ledger_run(policy_factory, *, merge_system: bool) -> tuple[Any, ScriptedLLMServer, Any]:
    """The docs' AssistantAgent and OpenAI client (``model_info`` without
    ``multiple_system_messages``), with a ledger and enough tool output to compact."""
    steps = 12

    def script(body: dict[str, Any]) -> dict[str, Any]:
        calls = len([r for r in srv.records if r.status == 200])
        if calls >= steps:
            return {"content": "done: BUG-1234 fixed"}
        return {"content": "", "tool_calls": [{"name": "read_file", "arguments": {"path": "f"}}]}

    counter = {"n": 0}

    async def read_file(path: str) -> str:
        """Read a file of the repository."""
        counter["n"] += 1
        return big_output(counter["n"], 120)

    policy = policy_factory(window=6000, max_chars=1500, ledger=True)
    context = CtxPolicyContext(policy, conv_id="ledger-run", merge_system=merge_system)
    srv = ScriptedLLMServer(window=6000, script=script)
    with srv:
        agent = AssistantAgent(
            "coder",
            client(srv),
            tools=[read_file],
            model_context=context,
            max_tool_iterations=steps,
            system_message="You are a coder.",
        )
        try:
            result: Any = asyncio.run(agent.run(task="Task: fix BUG-1234 in src/app.py"))
        except ValueError as exc:
            result = exc
    return result, srv, context


def test_the_ledger_joins_the_first_system_message(policy_factory) -> None:
    """A compaction that writes a ledger: the system content stays one contiguous block,
    which AutoGen's OpenAI client requires (it raised "Multiple and Not continuous system
    messages are not supported" at the first such compaction)."""
    result, srv, context = _ledger_run(policy_factory, merge_system=True)
    assert not isinstance(result, Exception), result
    assert context.session.stats.compactions and context.session.ledger is not None
    assert context.session.ledger.render()  # the ledger was written ...
    with_ledger = [b for b in srv.requests if "Progress ledger" in json.dumps(b["messages"])]
    assert with_ledger  # ... and sent
    for body in srv.requests:
        roles = [m["role"] for m in body["messages"]]
        assert roles.count("system") == 1 and roles[0] == "system"
        assert body["messages"][0]["content"].startswith("You are a coder.")
    # the engine's own placement is what the client refuses
    refused, _, _ = _ledger_run(policy_factory, merge_system=False)
    assert isinstance(refused, ValueError) and "Not continuous" in str(refused)
