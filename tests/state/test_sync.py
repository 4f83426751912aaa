"""StateSync: incremental saves, compare-and-set with reload-and-redo, bounded retries."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from ctxpolicy.components import StateConflict, StateStoreError, StoredState
from ctxpolicy.state.memory import MemoryStateStore
from ctxpolicy.state.sqlite import SqliteOptions, SqliteStateStore
from ctxpolicy.state.sync import Changes, StateSync


class Counter:
    """A toy session: a counter and an append-only log, one entry per log item."""

    def __init__(self) -> None:
        self.n = 0
        self.log: list[str] = []
        self.calls = 0
        self.dirty: set[str] = set()

    def step(self, tag: str) -> int:
        self.calls += 1
        self.n += 1
        self.log.append(tag)
        self.dirty |= {"meta", f"log/{len(self.log) - 1}"}
        return self.n

    def changes(self) -> Changes:
        put = {k: self._value(k) for k in sorted(self.dirty)}
        self.dirty.clear()
        return put, ()

    def _value(self, key: str) -> Any:
        return {"n": self.n} if key == "meta" else self.log[int(key.split("/")[1])]

    def restore(self, entries: Mapping[str, Any]) -> None:
        self.n = entries.get("meta", {}).get("n", 0)
        logs = sorted((int(k.split("/")[1]), v) for k, v in entries.items() if k.startswith("log/"))
        self.log = [v for _, v in logs]
        self.dirty.clear()


def test_save_writes_only_what_changed(tmp_path: Path) -> None:
    store = SqliteStateStore(SqliteOptions(path=str(tmp_path / "s.db")))
    sync = StateSync(store, "c")
    assert sync.load() == {}
    assert sync.save({f"summary/{i}": "x" * 50 for i in range(100)})
    assert not sync.save({}, [])  # nothing changed: nothing written, same version
    assert sync.version == 1
    conn = store._connection()
    before = conn.total_changes
    assert sync.save({"meta": {"step": 2}}, ["summary/3"])
    assert conn.total_changes - before == 3  # version row + one put + one delete
    stored = store.load("c")
    assert stored.version == 2 and len(stored.entries) == 100
    assert "summary/3" not in stored.entries and stored.entries["meta"] == {"step": 2}
    store.close()


def test_a_lost_race_reloads_and_redoes_the_call() -> None:
    store = MemoryStateStore()
    events: list[dict[str, Any]] = []
    a, b = Counter(), Counter()
    sa = StateSync(store, "c", emit=lambda t, **f: events.append({"type": t, **f}))
    sb = StateSync(store, "c")
    sa.load(), sb.load()
    sb.run(lambda: b.step("b0"), b.changes, b.restore)  # b commits first
    result = sa.run(lambda: a.step("a0"), a.changes, a.restore, what="prepare")
    assert result == 2 and a.calls == 2  # redone on top of b's state
    assert store.load("c") == StoredState(2, {"meta": {"n": 2}, "log/0": "b0", "log/1": "a0"})
    assert events == [
        {
            "type": "state.conflict",
            "call": "prepare",
            "attempt": 1,
            "expected_version": 0,
            "gave_up": False,
        }
    ]


def test_retries_are_bounded_then_the_call_returns_unsaved_and_the_next_reloads() -> None:
    store = MemoryStateStore()
    a = Counter()
    gave_up: list[bool] = []
    sync = StateSync(store, "c", max_retries=2, emit=lambda t, **f: gave_up.append(f["gave_up"]))
    sync.load()

    def racing_call() -> int:  # another worker commits during every attempt
        other = store.load("c")
        store.commit("c", expected_version=other.version, put={"other": other.version})
        return a.step("a")

    sync.run(racing_call, a.changes, a.restore)  # the agent's call is not failed
    assert a.calls == 3 and gave_up == [False, False, True]
    assert "a" not in store.load("c").entries  # nothing half-written
    restored: list[dict[str, object]] = []
    sync.run(lambda: 0, lambda: ({}, []), restored.append)  # starts from the store
    assert restored and restored[0] == store.load("c").entries


def test_a_failing_store_keeps_changes_pending_until_the_next_save(tmp_path: Path) -> None:
    path = str(tmp_path / "s.db")
    events: list[str] = []
    sync = StateSync(
        SqliteStateStore(SqliteOptions(path=path)), "c", emit=lambda t, **f: events.append(t)
    )
    a = Counter()
    sync.load()
    sync.store.close()  # the store is gone: saves fail, calls do not
    assert sync.run(lambda: a.step("x"), a.changes, a.restore) == 1
    assert events == ["state.save_failed"] and sync.pending
    with pytest.raises(StateStoreError):
        sync.save({}, ["never-there"])
    sync.store = SqliteStateStore(SqliteOptions(path=path))  # back
    assert sync.run(lambda: a.step("y"), a.changes, a.restore) == 2
    assert not sync.pending
    assert sync.store.load("c") == StoredState(1, {"meta": {"n": 2}, "log/0": "x", "log/1": "y"})
    sync.store.close()


def test_a_later_put_or_delete_of_a_pending_key_wins(tmp_path: Path) -> None:
    path = str(tmp_path / "s.db")
    sync = StateSync(SqliteStateStore(SqliteOptions(path=path)), "c")
    sync.save({"k": 0, "gone": 0, "x": 0})
    sync.store.close()
    with pytest.raises(StateStoreError):
        sync.save({"k": 1, "x": 1}, ["gone"])
    with pytest.raises(StateStoreError):
        sync.save({"gone": 2}, ["x"])  # re-put a pending delete, delete a pending put
    sync.store = SqliteStateStore(SqliteOptions(path=path))
    assert sync.save({})  # the pending changes alone are worth a commit
    assert sync.store.load("c") == StoredState(2, {"k": 1, "gone": 2})
    sync.store.close()


def test_load_drops_pending_changes() -> None:
    store = MemoryStateStore()
    sync = StateSync(store, "c")
    sync.save({"k": 1})
    store.commit("c", expected_version=1, put={"k": 5})  # another writer
    with pytest.raises(StateConflict):
        sync.save({"k": 2})
    assert sync.pending
    assert sync.load() == {"k": 5} and not sync.pending and sync.version == 2
