"""LangChain middleware with langchain's own fake chat model and ``create_agent``."""

from __future__ import annotations

from typing import Any

import pytest

pytest.importorskip(
    "langchain",
    reason="the 'langchain' extra is not installed (pip install 'ctxpolicy[langchain]')",
)

from langchain.agents import create_agent
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, HumanMessage, SystemMessage, ToolMessage
from langchain_core.tools import tool
from pydantic import Field

from ctxpolicy.integrations.langchain import (
    CtxPolicyMiddleware,
    LangChainConversation,
    SessionPool,
    pre_model_hook,
    to_openai,
)
from ctxpolicy.testing.conversations import tool_call
from ctxpolicy.testing.server import count_openai_tokens

from .conftest import Crowd, assert_pairing, big_output


class ToolCallingFake(GenericFakeChatModel):
    """LangChain's GenericFakeChatModel, able to be bound to tools, recording its input."""

    sent: list[list[Any]] = Field(default_factory=list)

    def bind_tools(self, tools: Any, **kwargs: Any) -> ToolCallingFake:
        return self

    def _generate(self, messages, stop=None, run_manager=None, **kwargs):  # type: ignore[no-untyped-def]
        self.sent.append(list(messages))
        return super()._generate(messages, stop=stop, run_manager=run_manager, **kwargs)


def replies(steps: int, parallel: int) -> list[AIMessage]:
    out = [
        AIMessage(
            content=f"step {i}",
            tool_calls=[
                {"id": f"call_{i}_{j}", "name": "read_file", "args": {"path": f"src/f{i}_{j}.py"}}
                for j in range(parallel)
            ],
        )
        for i in range(steps)
    ]
    return [*out, AIMessage(content="done: BUG-1234 fixed")]


def test_create_agent_thirty_steps_parallel_calls(policy_factory):
    counter = {"n": 0}

    @tool
    def read_file(path: str) -> str:
        """Read a file of the repository."""
        counter["n"] += 1
        return big_output(counter["n"], 30)

    model = ToolCallingFake(messages=iter(replies(30, 3)), sent=[])
    middleware = CtxPolicyMiddleware(policy_factory(window=6000, max_chars=1500))
    agent = create_agent(
        model, [read_file], system_prompt="You are a test agent.", middleware=[middleware]
    )
    state = agent.invoke(
        {"messages": [HumanMessage("Task: fix BUG-1234")]}, config={"recursion_limit": 500}
    )
    history = state["messages"]
    assert len(model.sent) == 31
    assert len(history) == 1 + 30 * 4 + 1  # the state keeps the full history
    assert_pairing(to_openai(history))
    session = middleware.session()
    assert session.stats.tool_results == 90  # every result went through add_tool_result
    for tm in (m for m in history if isinstance(m, ToolMessage)):
        assert (
            "[Full detail available at:" in tm.content
            or "ctxsnap://" in tm.content
            or len(tm.content) <= 1600
        )
    hard_limit = session.budget().window - session.budget().reserve_output
    shorter = 0
    for sent in model.sent:
        assert isinstance(sent[0], SystemMessage) and sent[0].content.startswith(
            "You are a test agent."
        )
        assert isinstance(sent[1], HumanMessage) and sent[1].content == "Task: fix BUG-1234"
        chat = to_openai(sent)
        assert_pairing(chat)  # never an AIMessage without all its ToolMessages or vice versa
        assert count_openai_tokens(chat, None) <= hard_limit
        for m in sent:  # unchanged messages are the state's own objects
            if isinstance(m, AIMessage):
                assert any(m is h for h in history)
        shorter += len(sent) < len(history)
    assert shorter >= 20  # the policy actually compacted what the model saw
    assert session.stats.compactions


def test_pre_model_hook_returns_llm_input_messages(policy_factory):
    hook = pre_model_hook(policy_factory(window=3000, max_chars=1500))
    messages: list[Any] = [SystemMessage("sys"), HumanMessage("Task")]
    for i in range(12):
        calls = [{"id": f"c{i}_{j}", "name": "f", "args": {"i": i}} for j in range(2)]
        messages.append(AIMessage(content="", tool_calls=calls))
        messages.extend(ToolMessage(content=big_output(i, 20), tool_call_id=c["id"]) for c in calls)
    out = hook({"messages": messages})
    sent = out["llm_input_messages"]
    assert len(sent) < len(messages)
    assert_pairing(to_openai(sent))
    assert sent[0].content.startswith("sys")


def test_conversation_round_trip_and_rewrites():
    ai = AIMessage(content="x", tool_calls=[{"id": "a", "name": "f", "args": {"q": 1}}], id="ai-1")
    tm = ToolMessage(content="long result", tool_call_id="a", id="tm-1")
    conv = LangChainConversation([HumanMessage("hi"), ai, tm], SystemMessage("sys"))
    assert [m["role"] for m in conv.messages] == ["system", "user", "assistant", "tool"]
    system, msgs = conv.back(conv.messages)
    assert system is conv.system_message and msgs[1] is ai and msgs[2] is tm
    prepared = [
        conv.messages[0],
        {"role": "system", "content": "[ledger]"},
        {"role": "user", "content": "summary of earlier steps"},
        conv.messages[2],
        {**conv.messages[3], "content": "long[...]"},
    ]
    system, msgs = conv.back(prepared)
    assert system.content == "sys\n\n[ledger]"
    assert isinstance(msgs[0], HumanMessage) and msgs[0].content == "summary of earlier steps"
    assert msgs[1] is ai
    assert (
        isinstance(msgs[2], ToolMessage) and msgs[2].id == "tm-1" and msgs[2].content == "long[...]"
    )


@pytest.mark.parametrize("store", ["sqlite", "memory"])
def test_the_session_pool_is_a_cache_of_the_state_store(policy_factory, store: str) -> None:
    """An evicted thread's session is resumed from the store, not started afresh
    (with ``memory`` too: the pool's sessions share one store)."""
    policy = policy_factory()
    policy = policy.model_copy(update={"state": policy.state.model_copy(update={"store": store})})
    pool = SessionPool(policy, max_sessions=1)
    history: list[dict[str, Any]] = [
        {"role": "system", "content": "You are a coding agent."},
        {"role": "user", "content": "Fix BUG-1234."},
    ]
    for i in range(12):
        call = tool_call(f"c{i}", "read", {})
        history.append({"role": "assistant", "content": f"step {i}", "tool_calls": [call]})
        text = pool.get("thread-a").add_tool_result(call, big_output(i))
        history.append({"role": "tool", "tool_call_id": f"c{i}", "content": text})
    first = pool.get("thread-a")
    out = first.prepare(history)
    assert first.stats.compactions, "the history must compact"
    pool.get("thread-b").prepare(history[:2])  # evicts thread-a from the LRU
    again = pool.get("thread-a")
    assert again is not first  # a new session object ...
    assert again.state.decisions == first.state.decisions  # ... with the stored state
    assert again.prepare(history) == out
    pool.close()


class CrowdedFake(ToolCallingFake):
    """The fake model, calling ``during()`` at its ``nth`` call (inside the middleware's
    wrap_model_call, between prepare and the answer)."""

    during: Any = None
    nth: int = 0

    def _generate(self, messages, stop=None, run_manager=None, **kwargs):  # type: ignore[no-untyped-def]
        if len(self.sent) + 1 == self.nth and self.during is not None:
            self.during()
        return super()._generate(messages, stop=stop, run_manager=run_manager, **kwargs)


@pytest.mark.parametrize("use_async", [False, True], ids=["invoke", "ainvoke"])
@pytest.mark.parametrize("where", ["model call", "prepare", "tool result"])
def test_other_threads_never_evict_a_conversation_mid_call(
    tmp_path: Any, where: str, use_async: bool
) -> None:
    """``max_sessions=1``: other conversations opened from another thread while a model
    call of thread ``t`` is under way (its prepare, the model answering, or a tool
    result's preprocessing) neither close its session nor drop its state."""
    import asyncio

    event = {"prepare": "context.status", "tool result": "tool.preprocessed"}.get(where, "")
    crowd = Crowd("test_agent/t", event, nth=2)
    middleware = CtxPolicyMiddleware(
        Crowd.policy(tmp_path, max_chars=1500), max_sessions=1, on_event=crowd
    )
    crowd.attach(middleware.sessions)
    model = CrowdedFake(messages=iter(replies(3, 1)), sent=[])
    if where == "model call":
        model.during, model.nth = crowd.now, 2

    @tool
    def read_file(path: str) -> str:
        """Read a file of the repository."""
        return big_output(1, 30)

    agent = create_agent(model, [read_file], middleware=[middleware])
    inputs = {"messages": [HumanMessage("Task: fix BUG-1234")]}
    config: Any = {"configurable": {"thread_id": "t"}}
    if use_async:
        asyncio.run(agent.ainvoke(inputs, config=config))
    else:
        agent.invoke(inputs, config=config)
    crowd.assert_held()
    assert middleware.session("t").stats.tool_results == 3  # no step's state was lost
