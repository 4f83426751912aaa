"""Strands ConversationManager with the real Strands Agent and its OpenAI model provider
against the scripted local server over HTTP."""

from __future__ import annotations

from typing import Any

import pytest

pytest.importorskip(
    "strands", reason="the 'strands' extra is not installed (pip install 'ctxpolicy[strands]')"
)
pytest.importorskip("strands.models.openai", reason="strands' OpenAI provider needs openai")

from strands import Agent, tool
from strands.models.openai import OpenAIModel

from ctxpolicy.integrations.strands import CtxPolicyConversationManager, to_openai
from ctxpolicy.testing.server import ScriptedLLMServer, count_openai_tokens

from .conftest import assert_pairing, big_output, read_until


def model(srv: ScriptedLLMServer) -> Any:
    return OpenAIModel(
        client_args={"base_url": srv.base_url, "api_key": "test", "max_retries": 0},
        model_id="scripted-model",
        stream=False,  # the scripted server answers whole responses
    )


def test_agent_runs_inside_the_budget_and_keeps_the_full_history(policy_factory) -> None:
    steps = 12

    script = read_until(steps, lambda: srv.records)

    counter = {"n": 0}

    @tool
    def read_file(path: str) -> str:
        """Read a file of the repository."""
        counter["n"] += 1
        return big_output(counter["n"], 120)

    manager = CtxPolicyConversationManager(policy_factory(window=6000, max_chars=1500))
    with ScriptedLLMServer(window=6000, script=script) as srv:
        agent = Agent(
            model=model(srv),
            tools=[read_file, *manager.recall_tools()],
            conversation_manager=manager,
            system_prompt="You are a coder.",
            callback_handler=None,
        )
        agent("Task: fix BUG-1234")
        n = counter["n"]
        assert srv.rejections == 0 and n >= steps - 1
        session = manager.session
        assert session is not None and "/" not in session.conv_id  # no session manager: private
        for body in srv.requests:
            assert_pairing(body["messages"])
            assert (
                count_openai_tokens(body["messages"], body.get("tools")) <= session.budget().window
            )
        assert any(t["function"]["name"] == "ctx_recall" for t in srv.requests[0]["tools"])
        assert len(srv.requests[-1]["messages"]) < 2 + 2 * n  # the view compacted
    assert session.stats.tool_results == n and session.stats.compactions
    full = to_openai(manager.full)
    assert sum(1 for m in full if m["role"] == "tool") == n  # the full history is kept
    assert any("ctxsnap://" in str(m["content"]) for m in full if m["role"] == "tool")


def test_session_manager_id_keys_the_conversation(policy_factory, tmp_path) -> None:
    from strands.session.file_session_manager import FileSessionManager

    policy = policy_factory(window=6000)
    with ScriptedLLMServer(window=6000, script=lambda body: {"content": "ok"}) as srv:
        managers = []
        for agent_id in ("coder", "analyst"):
            manager = CtxPolicyConversationManager(policy)
            sessions = FileSessionManager(session_id="user-7", storage_dir=str(tmp_path / "s"))
            agent = Agent(
                model=model(srv),
                agent_id=agent_id,
                conversation_manager=manager,
                session_manager=sessions,
                callback_handler=None,
            )
            agent("hello")
            managers.append(manager)
    ids = [m.session.conv_id for m in managers]
    assert ids == ["test_agent/user-7/coder", "test_agent/user-7/analyst"]
