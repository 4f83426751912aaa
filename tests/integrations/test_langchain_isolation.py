"""LangChain conversations never mix (issue 28.1, 28.2): no thread_id is private, and
two agents on one thread keep two states. Real processes, real sqlite state store."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip(
    "langchain",
    reason="the 'langchain' extra is not installed (pip install 'ctxpolicy[langchain]')",
)

from langchain.agents import create_agent
from langchain_core.messages import AIMessage, HumanMessage
from langchain_core.tools import tool
from langgraph.checkpoint.memory import InMemorySaver

from ctxpolicy.integrations.langchain import CtxPolicyMiddleware

from .conftest import big_output, make_policy
from .test_langchain import ToolCallingFake

RUN = textwrap.dedent(
    """
    import json, sys
    from langchain.agents import create_agent
    from langchain_core.messages import AIMessage, HumanMessage
    from langchain_core.tools import tool
    from ctxpolicy.policy.models import Policy
    from ctxpolicy.integrations.langchain import CtxPolicyMiddleware
    from tests.integrations.test_langchain import ToolCallingFake

    policy = Policy.model_validate_json(open(sys.argv[1]).read())
    user = sys.argv[2]

    @tool
    def read_file(path: str) -> str:
        \"\"\"Read a file.\"\"\"
        return "\\n".join(f"{user}_secret_line_{i} of {path}" for i in range(300))

    replies = [AIMessage(content="", tool_calls=[{"id": f"c{i}", "name": "read_file",
               "args": {"path": f"{user}/f{i}.py"}}]) for i in range(6)]
    replies.append(AIMessage(content="done"))
    model = ToolCallingFake(messages=iter(replies), sent=[])
    mw = CtxPolicyMiddleware(policy, recall=True)
    agent = create_agent(model, [read_file], system_prompt="You are a coder.", middleware=[mw])
    agent.invoke({"messages": [HumanMessage(f"Goal: Fix BUG-1234 in {user}'s repo")]})
    session = mw.last_session
    found = session.recall_tool()[1]("ctx_search", {"pattern": "secret_line"})
    first = "\\n".join(str(m.content) for m in model.sent[0])
    print(json.dumps({"first": first, "search": found, "conv": session.conv_id}))
    """
)


def _policy(tmp_path: Path, agent: str = "coder") -> Any:
    policy = make_policy(tmp_path, window=3000, max_chars=800, ledger=True)
    return policy.model_copy(update={"agent": agent})


def test_no_thread_id_in_two_processes_is_two_private_conversations(tmp_path: Path) -> None:
    path = tmp_path / "policy.json"
    path.write_text(_policy(tmp_path).model_dump_json())
    root = Path(__file__).resolve().parents[2]
    out = []
    for user in ("alice", "bob"):
        proc = subprocess.run(
            [sys.executable, "-c", RUN, str(path), user],
            capture_output=True,
            text=True,
            cwd=root,
            timeout=120,
        )
        assert proc.returncode == 0, proc.stderr[-2000:]
        out.append(json.loads(proc.stdout.strip().splitlines()[-1]))
    alice, bob = out
    assert alice["conv"] != bob["conv"]
    assert "alice" in alice["search"]
    assert "alice" not in bob["first"]  # bob's first call carries nothing of alice's run
    assert "alice" not in bob["search"] and "bob" in bob["search"]
    # nothing of a run without a thread id is stored for another process to resume
    state = tmp_path / "snapshots"
    assert not any("default" in p.name for p in state.rglob("*"))


def _agent(policy: Any, checkpointer: Any, who: str) -> tuple[Any, Any, Any]:
    @tool
    def query(q: str) -> str:
        """Run a query."""
        return big_output(7, 200).replace("value", f"{who}_fact")

    replies = [
        AIMessage(
            content="", tool_calls=[{"id": f"{who}{i}", "name": "query", "args": {"q": str(i)}}]
        )
        for i in range(5)
    ]
    model = ToolCallingFake(messages=iter([*replies, AIMessage(content="done")]), sent=[])
    mw = CtxPolicyMiddleware(policy)
    agent = create_agent(model, [query], middleware=[mw], checkpointer=checkpointer)
    return agent, model, mw


def test_two_agents_on_one_thread_do_not_share_state(tmp_path: Path) -> None:
    saver = InMemorySaver()
    coder, _coder_model, coder_mw = _agent(_policy(tmp_path, "coder"), saver, "coder")
    analyst, analyst_model, analyst_mw = _agent(_policy(tmp_path, "analyst"), None, "analyst")
    config = {"configurable": {"thread_id": "thread-1"}}
    coder.invoke({"messages": [HumanMessage("Goal: coder task")]}, config=config)
    analyst.invoke({"messages": [HumanMessage("Goal: analyst task")]}, config=config)
    a, c = analyst_mw.session("thread-1"), coder_mw.session("thread-1")
    assert (a.conv_id, c.conv_id) == ("analyst/thread-1", "coder/thread-1")
    assert a.snapshots.folder(a.conv_id) != c.snapshots.folder(c.conv_id)
    assert c.stats.tool_results == 5 and a.stats.tool_results == 5
    assert a.state.decisions != c.state.decisions or not c.state.decisions
    sent = "\n".join(str(m.content) for call in analyst_model.sent for m in call)
    assert "coder_fact" not in sent and "coder task" not in sent
    hits = a.recall_tool()[1]("ctx_search", {"pattern": "coder_fact"})
    assert "No earlier tool result" in hits


def test_recall_tools_answer_from_the_current_thread(tmp_path: Path) -> None:
    policy = _policy(tmp_path)
    replies = [
        AIMessage(content="", tool_calls=[{"id": "c0", "name": "read", "args": {"p": "a"}}]),
        AIMessage(
            content="", tool_calls=[{"id": "c1", "name": "ctx_search", "args": {"pattern": "L17"}}]
        ),
        AIMessage(content="done"),
    ]

    @tool
    def read(p: str) -> str:
        """Read."""
        return "\n".join(f"L{i} payload" for i in range(400))

    model = ToolCallingFake(messages=iter(replies), sent=[])
    mw = CtxPolicyMiddleware(policy, recall=True)
    agent = create_agent(model, [read], middleware=[mw], checkpointer=InMemorySaver())
    state = agent.invoke(
        {"messages": [HumanMessage("go")]}, config={"configurable": {"thread_id": "t"}}
    )
    answer = state["messages"][-2].content
    assert "ctxsnap://" in answer and "L17 payload" in answer
    assert mw.session("t").stats.tool_results == 1  # the recall answer is not re-snapshotted
