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
