"""A Session with a state store: resume in a new session, CAS between two sessions, events."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from ctxpolicy import Session, load_policy
from ctxpolicy.components import StateStoreError
from ctxpolicy.sim.replay import with_snapshots, with_window
from ctxpolicy.state.memory import MemoryStateStore
from ctxpolicy.state.sqlite import SqliteOptions, SqliteStateStore
from tests.shared_data import TRACES, require

ROOT = Path(__file__).resolve().parents[2]
TRACE = "mini-swe-agent__20251118_gemini-3-pro-74pct.django__django-13297.jsonl"


def _policy(tmp: Path) -> Any:
    base = load_policy(ROOT / "policies" / "agents.yaml", agent="coding_agent")
    return with_snapshots(with_window(base, 16384), tmp / "snapshots")


def _messages() -> list[dict[str, Any]]:
    path = require(TRACES / TRACE)
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def _feed(session: Session, messages: list[dict[str, Any]], upto: int) -> list[dict[str, Any]]:
    """The conversation of the first ``upto`` messages, tool results through the session."""
    convo: list[dict[str, Any]] = []
    calls: dict[str, Any] = {}
    for m in messages[:upto]:
        if m["role"] == "assistant":
            calls = {tc["id"]: tc for tc in m.get("tool_calls") or []}
        if m["role"] == "tool":
            m = {**m, "content": session.add_tool_result(calls[m["tool_call_id"]], m["content"])}
        convo.append(m)
    return convo


def test_unit_keys_are_the_same_in_every_process() -> None:
    """Unit keys are persisted: they must not depend on the process (hash seed, addresses)."""
    code = (
        "from ctxpolicy.engine.derived import content_key;"
        "print(content_key({'role': 'assistant', 'content': 'x',"
        " 'tool_calls': [{'id': 'a', 'function': {'name': 'f', 'arguments': '{}'}}]}))"
    )
    keys = {
        subprocess.run(
            [sys.executable, "-c", code],
            env={**os.environ, "PYTHONPATH": str(ROOT), "PYTHONHASHSEED": seed},
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        for seed in ("1", "2")
    }
    assert len(keys) == 1, keys


def test_a_new_session_resumes_the_stored_state(tmp_path: Path) -> None:
    policy = _policy(tmp_path)
    messages = _messages()
    store = SqliteStateStore(SqliteOptions(path=str(tmp_path / "s.db")))
    first = Session(policy, conv_id="c", state_store=store)
    convo = _feed(first, messages, 60)
    out = first.prepare(convo)
    assert first.stats.compactions, "the trace must compact by then"
    events: list[dict[str, Any]] = []
    second = Session(policy, conv_id="c", state_store=store, on_event=events.append)
    assert second.state.decisions == first.state.decisions
    assert second.ledger.to_dict() == first.ledger.to_dict()  # type: ignore[union-attr]
    assert second.prepare(convo) == out  # same bytes, no compaction redone
    assert [e["version"] for e in events if e["type"] == "state.resumed"] == [
        first.internals.persistence.version  # type: ignore[union-attr]
    ]
    assert not [e for e in events if e["type"] == "context.compacted"]
    store.close()


def test_the_default_store_is_a_sqlite_file_beside_the_snapshots(tmp_path: Path) -> None:
    policy = _policy(tmp_path)
    s = Session(policy, conv_id="c")
    s.prepare([{"role": "user", "content": "hello"}])
    s.close()
    assert (tmp_path / "snapshots" / ".ctxpolicy-state.sqlite3").is_file()
    again = Session(policy, conv_id="c")
    assert again.stats.prepares == 1  # resumed with no configuration
    again.close()


def test_two_sessions_on_one_conversation_conflict_and_redo(tmp_path: Path) -> None:
    policy = _policy(tmp_path)
    messages = _messages()
    store = MemoryStateStore()
    events: list[dict[str, Any]] = []
    a = Session(policy, conv_id="c", state_store=store, on_event=events.append)
    b = Session(policy, conv_id="c", state_store=store)
    convo = [m for m in messages[:3] if m["role"] != "tool"]
    b.prepare(convo)  # b commits first; a's state is now stale
    a.prepare(convo)
    conflicts = [e for e in events if e["type"] == "state.conflict"]
    assert len(conflicts) == 1 and conflicts[0]["call"] == "prepare"
    assert store.load("c").entries["meta"]["stats"]["prepares"] == 2  # both counted, in order


def test_an_unreachable_store_is_an_event_and_the_session_works_in_memory(
    tmp_path: Path,
) -> None:
    policy = _policy(tmp_path)
    blocker = tmp_path / "file"
    blocker.write_text("x")
    broken = policy.model_copy(
        update={
            "state": policy.state.model_copy(
                update={"options": {"path": str(blocker / "state.db")}}
            )
        }
    )
    events: list[dict[str, Any]] = []
    s = Session(broken, conv_id="c", on_event=events.append)
    assert s.prepare([{"role": "user", "content": "hi"}])
    [ev] = [e for e in events if e["type"] == "state.unavailable"]
    assert ev["store"] == "sqlite" and "cannot open state database" in ev["error"]


def test_a_session_without_conv_id_keeps_nothing(tmp_path: Path) -> None:
    """Nobody can resume a random id: no store is opened, nothing is written."""
    policy = _policy(tmp_path)
    events: list[dict[str, Any]] = []
    s = Session(policy, on_event=events.append)
    s.prepare([{"role": "user", "content": "hello"}])
    assert not (tmp_path / "snapshots" / ".ctxpolicy-state.sqlite3").exists()
    assert not [e for e in events if e["type"].startswith("state.")]


def test_a_session_is_a_context_manager_that_closes_the_store_it_opened(tmp_path: Path) -> None:
    policy = _policy(tmp_path)
    with Session(policy, conv_id="c") as s:
        s.prepare([{"role": "user", "content": "hello"}])
        persistence = s.internals.persistence
        assert persistence is not None and persistence.owns_store
    with pytest.raises(StateStoreError, match="is closed"):
        persistence.store.load("c")
    # a store passed in is the caller's: it stays open
    store = SqliteStateStore(SqliteOptions(path=str(tmp_path / "mine.db")))
    with Session(policy, conv_id="d", state_store=store) as s:
        s.prepare([{"role": "user", "content": "hello"}])
    assert store.load("d").entries
    store.close()
