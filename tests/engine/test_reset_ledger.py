"""A ``context.reset`` starts the ledger from what the new history holds (issue 28, item 3).

A shared trace is compacted until the ledger holds facts of its history (the task,
files, commands); then the agent replaces the history with another task. The facts
of the removed history never come back: not in the prepared messages, not in the
stored state, not after a resume in a new session.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from ctxpolicy import Session, load_policy
from ctxpolicy.sim.importers import load_trace
from ctxpolicy.sim.replay import with_snapshots, with_window
from ctxpolicy.state.sqlite import SqliteOptions, SqliteStateStore
from tests.shared_data import TRACES, require

ROOT = Path(__file__).resolve().parents[2]
TRACE = "mini-swe-agent__20251118_gemini-3-pro-74pct.django__django-13297.jsonl"
OLD_FACT = "TemplateView"  # in the trace's task, and so in the ledger's goal


def test_a_reset_starts_a_fresh_ledger(tmp_path: Path) -> None:
    base = with_window(load_policy(ROOT / "policies" / "agents.yaml", agent="coding_agent"), 16384)
    policy = with_snapshots(base, tmp_path / "snapshots")
    state = SqliteStateStore(SqliteOptions(path=str(tmp_path / "state.sqlite3")))
    events: list[dict[str, Any]] = []
    session = Session(policy, conv_id="c", state_store=state, on_event=events.append)
    convo: list[dict[str, Any]] = []
    for m in load_trace(require(TRACES / TRACE))[:120]:
        if m.get("role") == "assistant":
            session.prepare(convo)
        convo.append(dict(m))
    # the ledger holds it (its text leaves out the goal: the pinned task says it)
    assert session.state.ledger is not None and OLD_FACT in json.dumps(
        session.state.ledger.to_dict()
    )
    new = [
        {"role": "system", "content": "You are a coding agent."},
        {"role": "user", "content": "New task: fix BUG-9 in parser.py."},
    ]
    prepared = session.prepare(new)
    assert [e for e in events if e["type"] == "context.reset"]
    assert OLD_FACT not in json.dumps(prepared)
    assert prepared[-1]["content"] == "New task: fix BUG-9 in parser.py."
    stored = state.load("c").entries
    assert OLD_FACT not in json.dumps(stored.get("ledger"))
    # a new worker resumes the reset state: nothing of the removed history either
    again = Session(policy, conv_id="c", state_store=state)
    assert OLD_FACT not in json.dumps(again.prepare(new))
    session.close()
    again.close()
    state.close()
