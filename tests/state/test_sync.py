"""StateSync: incremental saves, compare-and-set with reload-and-redo, bounded retries."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from ctxpolicy.components import StateConflict, StateStoreError, StoredState
from ctxpolicy.state.memory import MemoryStateStore
from ctxpolicy.state.sqlite import SqliteOptions, SqliteStateStore
from ctxpolicy.state.sync import StateSync


class Counter:
    """A toy session: its persisted state is a counter and an append-only log."""

    def __init__(self) -> None:
        self.n = 0
        self.log: list[str] = []
        self.calls = 0

    def step(self, tag: str) -> int:
        self.calls += 1
        self.n += 1
        self.log.append(tag)
        return self.n

    def entries(self) -> dict[str, Any]:
        return {"meta": {"n": self.n}, "log": list(self.log)}

    def restore(self, entries: Any) -> None:
        self.n = entries.get("meta", {}).get("n", 0)
        self.log = list(entries.get("log", []))


def test_save_writes_only_what_changed(tmp_path: Path) -> None:
    store = SqliteStateStore(SqliteOptions(path=str(tmp_path / "s.db")))
    sync = StateSync(store, "c")
    assert sync.load() == {}
    entries = {f"summary/{i}": "x" * 50 for i in range(100)} | {"meta": {"step": 1}}
    assert sync.save(entries)
    assert not sync.save(dict(entries))  # nothing changed: nothing written, no version
    assert sync.version == 1
    entries["meta"] = {"step": 2}
    del entries["summary/3"]
    assert sync.changes(entries) == ({"meta": {"step": 2}}, ["summary/3"])
    conn = store._connection()
    before = conn.total_changes
    assert sync.save(entries)
    assert conn.total_changes - before == 3  # version row + one put + one delete
    assert store.load("c") == StoredState(2, entries)
    store.close()


def test_key_order_does_not_count_as_a_change() -> None:
    sync = StateSync(MemoryStateStore(), "c")
    sync.save({"meta": {"a": 1, "b": 2}})
    assert sync.changes({"meta": {"b": 2, "a": 1}}) == ({}, [])


def test_a_lost_race_reloads_and_redoes_the_call() -> None:
    store = MemoryStateStore()
    events: list[dict[str, Any]] = []
    a, b = Counter(), Counter()
    sa = StateSync(store, "c", emit=lambda t, **f: events.append({"type": t, **f}))
    sb = StateSync(store, "c")
    sa.load(), sb.load()
    sb.run(lambda: b.step("b0"), b.entries, b.restore)  # b commits first
    result = sa.run(lambda: a.step("a0"), a.entries, a.restore, what="prepare")
    assert result == 2 and a.calls == 2  # redone on top of b's state
    assert store.load("c").entries == {"meta": {"n": 2}, "log": ["b0", "a0"]}
    assert events == [
        {
            "type": "state.conflict",
            "call": "prepare",
            "attempt": 1,
            "expected_version": 0,
            "gave_up": False,
        }
    ]


def test_retries_are_bounded_then_the_conflict_is_raised() -> None:
    store = MemoryStateStore()
    a = Counter()
    events: list[str] = []
    sync = StateSync(store, "c", max_retries=2, emit=lambda t, **f: events.append(f["gave_up"]))
    sync.load()

    def racing_call() -> int:  # another worker commits during every attempt
        other = store.load("c")
        store.commit("c", expected_version=other.version, put={"other": other.version})
        return a.step("a")

    with pytest.raises(StateConflict):
        sync.run(racing_call, a.entries, a.restore)
    assert a.calls == 3 and events == [False, False, True]


def test_a_failing_store_does_not_fail_the_call_and_keeps_changes_pending(
    tmp_path: Path,
) -> None:
    store = SqliteStateStore(SqliteOptions(path=str(tmp_path / "s.db")))
    events: list[str] = []
    sync = StateSync(store, "c", emit=lambda t, **f: events.append(t))
    a = Counter()
    sync.load()
    store.close()  # the store is gone: saves fail
    assert sync.run(lambda: a.step("x"), a.entries, a.restore) == 1
    assert events == ["state.save_failed"]
    with pytest.raises(StateStoreError):
        sync.save(a.entries())
    sync.store = SqliteStateStore(SqliteOptions(path=str(tmp_path / "s.db")))  # back
    assert sync.save(a.entries())  # the pending change goes out now
    assert sync.store.load("c").entries == {"meta": {"n": 1}, "log": ["x"]}
    sync.store.close()
