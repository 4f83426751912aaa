"""Issue 28 item 11: a store outage during the reload after a lost race is an event.

The reload after a lost compare-and-set used to run outside the handler that turns
store errors into events, so ``prepare`` raised ``StateStoreError``. Now it is a
``state.reload_failed`` event: the call returns what it computed, nothing stale is
written, and the next call reloads first (and works in memory until the store answers).

The race is real (two sessions, one sqlite file); the outage is the store's own
``StateStoreError`` raised by its read at the exact moment after the lost commit.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ctxpolicy.components import StateConflict, StateStoreError
from ctxpolicy.engine import Session
from ctxpolicy.state.sqlite import SqliteOptions, SqliteStateStore
from tests.engine_helpers import conversation, make_policy


class _OutageAfterConflict(SqliteStateStore):
    """A sqlite store whose server "goes down" right after a commit lost its race."""

    down = False

    def _write(self, conv_id: str, expected: int, rows: Any, dropped: list[str]) -> None:
        try:
            super()._write(conv_id, expected, rows, dropped)
        except StateConflict:
            self.down = True
            raise

    def _read(self, conv_id: str) -> Any:
        if self.down:
            raise StateStoreError(f"cannot read state from {self.path}: connection refused")
        return super()._read(conv_id)


def test_an_outage_during_the_reload_after_a_lost_race_is_an_event(tmp_path: Path) -> None:
    policy = make_policy()
    db = str(tmp_path / "s.db")
    flaky = _OutageAfterConflict(SqliteOptions(path=db))
    other = SqliteStateStore(SqliteOptions(path=db))
    events: list[dict[str, Any]] = []
    a = Session(policy, conv_id="c", state_store=flaky, on_event=events.append)
    b = Session(policy, conv_id="c", state_store=other)
    msgs = conversation(3, 200)
    b.prepare(msgs)  # b commits first: a's next save loses the race
    out = a.prepare(msgs)  # must not raise
    assert out == b.prepare(msgs)
    types = [e["type"] for e in events]
    assert "state.conflict" in types and "state.reload_failed" in types
    [failed] = [e for e in events if e["type"] == "state.reload_failed"]
    assert failed["call"] == "prepare" and "connection refused" in failed["error"]
    # still down: the next call works in memory and again does not raise
    assert a.prepare(msgs) == out
    assert other.load("c").entries["meta"]["stats"]["prepares"] == 2  # nothing stale written
    # back up: the next call reloads the stored state first, then saves on top of it
    flaky.down = False
    a.prepare(msgs)
    assert other.load("c").entries["meta"]["stats"]["prepares"] == 3
    flaky.close()
    other.close()
