"""``record=`` in every adapter: the keyword reaches the sessions the adapter makes
(issue 31 item 4); one adapter end to end against the scripted server."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from ctxpolicy.engine import Session
from ctxpolicy.policy.models import Policy
from ctxpolicy.sim.importers import load_trace, mark_warning
from ctxpolicy.testing.server import ScriptedLLMServer

from .conftest import big_output


def _openai(policy: Policy, d: str) -> Session:
    import openai

    from ctxpolicy.integrations.openai import wrap

    client = openai.OpenAI(base_url="http://127.0.0.1:9/v1", api_key="x")
    return wrap(client, policy, conv_id="c", record=d).session


def _anthropic(policy: Policy, d: str) -> Session:
    import anthropic

    from ctxpolicy.integrations.anthropic import wrap

    client = anthropic.Anthropic(base_url="http://127.0.0.1:9", api_key="x")
    return wrap(client, policy, conv_id="c", record=d).session


def _langchain(policy: Policy, d: str) -> Session:
    from ctxpolicy.integrations.langchain import CtxPolicyMiddleware

    return CtxPolicyMiddleware(policy, record=d).session("c")


def _openai_agents(policy: Policy, d: str) -> Session:
    from ctxpolicy.integrations.openai_agents import AgentsContext

    return AgentsContext(policy, conv_id="c", record=d).session


def _pydantic_ai(policy: Policy, d: str) -> Session:
    from ctxpolicy.integrations.pydantic_ai import ContextPolicy

    return ContextPolicy(policy, record=d).session("c")


def _litellm(policy: Policy, d: str) -> Session:
    from ctxpolicy.integrations.litellm import ContextPolicyHook

    hook = ContextPolicyHook(policy, record=d)
    return hook.session_for({"metadata": {"session_id": "c"}})[0]


def _strands(policy: Policy, d: str) -> Session:
    from ctxpolicy.integrations.strands import CtxPolicyConversationManager

    return CtxPolicyConversationManager(policy, conv_id="c", record=d).session_for(None)


def _autogen(policy: Policy, d: str) -> Session:
    from ctxpolicy.integrations.autogen import CtxPolicyContext

    return CtxPolicyContext(policy, conv_id="c", record=d).session


def _google_adk(policy: Policy, d: str) -> Session:
    from ctxpolicy.integrations.google_adk import ContextPolicyPlugin

    return ContextPolicyPlugin(policy, record=d).session_for("app", "user", "c")


ADAPTERS: dict[str, tuple[str, Callable[[Policy, str], Session]]] = {
    "openai": ("openai", _openai),
    "anthropic": ("anthropic", _anthropic),
    "langchain": ("langchain", _langchain),
    "openai_agents": ("agents", _openai_agents),
    "pydantic_ai": ("pydantic_ai", _pydantic_ai),
    "litellm": ("litellm", _litellm),
    "strands": ("strands", _strands),
    "autogen": ("autogen_core", _autogen),
    "google_adk": ("google.adk", _google_adk),
}


@pytest.mark.parametrize("name", sorted(ADAPTERS))
def test_every_adapter_passes_record_to_its_sessions(
    name: str, policy_factory: Any, tmp_path: Path
) -> None:
    module, make = ADAPTERS[name]
    pytest.importorskip(module, reason=f"the {name!r} extra is not installed")
    d = tmp_path / "traces"
    session = make(policy_factory(), f"{d}/")  # a directory: a file per conversation
    assert session.recorder is not None
    assert session.recorder.path.parent == d
    session.prepare([{"role": "user", "content": f"hello {name}"}])
    assert load_trace(session.recorder.path) == [{"role": "user", "content": f"hello {name}"}]


def test_record_with_a_given_session_is_an_error(policy_factory: Any, tmp_path: Path) -> None:
    pytest.importorskip("openai")
    import openai

    from ctxpolicy.integrations.openai import wrap

    client = openai.OpenAI(base_url="http://127.0.0.1:9/v1", api_key="x")
    with pytest.raises(ValueError, match=r"record= makes a new session"):
        wrap(client, Session(policy_factory()), record=tmp_path / "t.jsonl")


def test_openai_client_records_the_raw_results(policy_factory: Any, tmp_path: Path) -> None:
    """A wrapped OpenAI client over HTTP: the recorded file holds each tool's raw output
    (the context got the preprocessed text) and no ctxpolicy marker."""
    openai = pytest.importorskip("openai")
    from ctxpolicy.integrations.openai import wrap

    def script(body: dict[str, Any]) -> dict[str, Any]:
        n = sum(1 for m in body["messages"] if m["role"] == "assistant")
        return {"content": f"step {n}", "tool_calls": [{"name": "read_file", "arguments": {}}]}

    path = tmp_path / "run.jsonl"
    with ScriptedLLMServer(window=100000, script=script) as srv:
        client = openai.OpenAI(base_url=srv.base_url, api_key="test", max_retries=0)
        wrapped = wrap(client, policy_factory(max_chars=400), conv_id="run", record=path)
        history: list[Any] = [{"role": "user", "content": "Task: read the files."}]
        for step in range(4):
            msg = wrapped.chat.completions.create(model="scripted", messages=history)
            msg = msg.choices[0].message
            history.append(msg)
            for tc in msg.tool_calls or []:
                text = wrapped.session.add_tool_result(tc, big_output(step, 60))
                history.append({"role": "tool", "tool_call_id": tc.id, "content": text})
    recorded = load_trace(path)
    tools = [m for m in recorded if m["role"] == "tool"]
    assert [m["content"] for m in tools] == [big_output(s, 60) for s in range(3)]
    assert [m["role"] for m in recorded] == ["user"] + ["assistant", "tool"] * 3
    assert mark_warning(path) is None
    assert all(json.loads(line) for line in path.read_text().splitlines())
