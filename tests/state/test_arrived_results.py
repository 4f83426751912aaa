"""Tool results that arrived in ``prepare`` resume with the same text on every store.

The text a tool's rule made of a result that came inside the messages is part of the
session state (``tool/<digest>`` entries): a new session on the same store — what
another process or worker sees — sends exactly the same request, and neither
preprocesses nor snapshots the result again.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ctxpolicy import Session
from ctxpolicy.engine.state import SessionState
from tests.engine.test_session_arrived import call, conversation, make_policy, psql_table, tool_text
from tests.state.conftest import OpenStore


def test_a_resumed_session_sends_the_same_preprocessed_results(
    open_store: OpenStore, tmp_path: Path
) -> None:
    policy = make_policy(tmp_path)
    first = Session(policy, conv_id="resume", state_store=open_store())
    convo: list[dict[str, Any]] = conversation()
    out1 = first.prepare(convo)
    convo += [
        {"role": "assistant", "content": None, "tool_calls": [call("call_2", "cat_file")]},
        {"role": "tool", "tool_call_id": "call_2", "content": "line\n" * 2000},
    ]
    out2 = first.prepare(convo)
    assert tool_text(out1).startswith("[table_rows: psql, 300 rows")
    first.close()

    events: list[dict[str, Any]] = []
    second = Session(policy, conv_id="resume", state_store=open_store(), on_event=events.append)
    assert second.prepare(convo) == out2
    assert [e for e in events if e["type"] == "tool.preprocessed"] == []
    assert second.state.step == 2
    assert second.state.tool_texts == first.state.tool_texts
    # a new result after the resume takes the next step
    convo += [
        {"role": "assistant", "content": None, "tool_calls": [call("call_3", "query_db")]},
        {"role": "tool", "tool_call_id": "call_3", "content": psql_table(40)},
    ]
    out3 = second.prepare(convo)
    assert second.state.step == 3
    assert tool_text(out3, "call_3").startswith("[table_rows: psql, 40 rows")
    second.close()


def test_an_invalid_tool_entry_is_reported_not_obeyed() -> None:
    st = SessionState.from_entries(
        {"tool/" + "a" * 32: 5, "tool/nothex": "x", "tool/" + "b" * 32: True}
    )
    assert st.tool_texts == {"b" * 32: None}
    assert sorted(p.key for p in st.problems) == ["tool/" + "a" * 32, "tool/nothex"]
    st.add_tool_text("c" * 32, "short")
    entries = st.to_entries()
    assert entries["tool/" + "c" * 32] == "short" and entries["tool/" + "b" * 32] is True
    assert SessionState.from_entries(entries).tool_texts == st.tool_texts


def test_a_state_stored_before_results_were_remembered_resumes_unchanged(
    tmp_path: Path,
) -> None:
    """A conversation stored by an earlier version (no ``tool/`` entries): the tool
    messages it already sent — texts add_tool_result returned, or raw results — are
    left as they are after the resume (no second preprocessing, no reset); results
    that arrive after the resume get their rule."""
    policy = make_policy(tmp_path)
    old = Session(policy, conv_id="legacy", tool_rules_in_prepare=False)
    convo: list[dict[str, Any]] = conversation()
    convo[3] = {**convo[3], "content": old.add_tool_result(convo[2]["tool_calls"][0], psql_table())}
    convo += [
        {"role": "assistant", "content": None, "tool_calls": [call("call_2", "query_db")]},
        {"role": "tool", "tool_call_id": "call_2", "content": psql_table(50)},  # sent raw
    ]
    sent = old.prepare(convo)
    entries = {k: v for k, v in old.state_entries().items() if not k.startswith("tool/")}

    events: list[dict[str, Any]] = []
    new = Session(policy, conv_id="legacy2", on_event=events.append)
    new.load_state(entries)
    assert new.prepare(convo) == sent
    assert not [e for e in events if e["type"] in ("tool.preprocessed", "context.reset")]
    convo += [
        {"role": "assistant", "content": None, "tool_calls": [call("call_3", "query_db")]},
        {"role": "tool", "tool_call_id": "call_3", "content": psql_table(60)},
    ]
    assert tool_text(new.prepare(convo), "call_3").startswith("[table_rows: psql, 60 rows")
    assert tool_text(new.prepare(convo), "call_2") == psql_table(50)
