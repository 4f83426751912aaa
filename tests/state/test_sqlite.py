"""What the sqlite store adds to the contract: WAL, file modes, default path, incrementality."""

from __future__ import annotations

import sqlite3
import stat
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from ctxpolicy.components import StateStoreError, StoredState
from ctxpolicy.state.sqlite import DEFAULT_FILE, SqliteOptions, SqliteStateStore


def _store(path: Path, **options: object) -> SqliteStateStore:
    return SqliteStateStore(SqliteOptions.model_validate({"path": str(path), **options}))


def test_wal_mode_and_private_file(tmp_path: Path) -> None:
    path = tmp_path / "deep" / "state.db"
    with _store(path) as store:
        store.commit("c", expected_version=0, put={"k": 1})
    assert sqlite3.connect(path).execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700


def test_default_file_is_in_the_home_and_survives_reopen(tmp_path: Path) -> None:
    store = SqliteStateStore(home=str(tmp_path / "snapshots"))
    assert store.path == str(tmp_path / "snapshots" / DEFAULT_FILE)
    store.commit("c", expected_version=0, put={"k": [1, 2]})
    store.close()
    again = SqliteStateStore(home=str(tmp_path / "snapshots"))
    assert again.load("c") == StoredState(1, {"k": [1, 2]})
    again.close()


def test_path_is_interpolated_when_the_store_opens(tmp_path: Path) -> None:
    env = {"STATE_DIR": str(tmp_path / "from-env")}
    opts = SqliteOptions(path="${STATE_DIR}/s.db")
    store = SqliteStateStore(opts, env=env)
    assert store.path == str(tmp_path / "from-env" / "s.db")
    store.close()
    with pytest.raises(
        StateStoreError, match=r"STATE_DIR is not set \(used in state.options.path\)"
    ):
        SqliteStateStore(opts, env={})


def test_in_memory_database_is_refused(tmp_path: Path) -> None:
    with pytest.raises(StateStoreError, match="store: memory"):
        SqliteStateStore(SqliteOptions(path=":memory:"))


def test_unusable_path_is_a_clear_error(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    with pytest.raises(StateStoreError, match=r"cannot open state database .*file/x/state\.db"):
        _store(blocker / "x" / "state.db")


@pytest.mark.parametrize("table", ["x; DROP TABLE y", "1abc", "a" * 41, "a-b"])
def test_table_names_are_identifiers(table: str) -> None:
    with pytest.raises(ValidationError):
        SqliteOptions(table=table)


def test_commit_writes_only_the_given_keys(tmp_path: Path) -> None:
    with _store(tmp_path / "s.db") as store:
        store.commit("c", expected_version=0, put={f"summary/{i}": "x" * 100 for i in range(500)})
        conn = store._connection()
        before = conn.total_changes
        store.commit("c", expected_version=1, put={"meta": {"step": 2}}, delete=["summary/7"])
        # one version row, one entry written, one deleted: not a rewrite of 500 entries
        assert conn.total_changes - before == 3


def test_a_reader_never_sees_half_a_commit(tmp_path: Path) -> None:
    """A load runs in its own snapshot even while another connection writes."""
    with _store(tmp_path / "s.db") as writer, _store(tmp_path / "s.db") as reader:
        writer.commit("c", expected_version=0, put={"a": 0, "b": 0})
        conn = writer._connection()
        conn.execute("BEGIN IMMEDIATE")
        conn.execute("UPDATE ctxpolicy_state_entries SET value = '1' WHERE key = 'a'")
        assert reader.load("c") == StoredState(1, {"a": 0, "b": 0})  # uncommitted: invisible
        conn.execute("ROLLBACK")


def test_open_waits_out_a_lock_sqlite_reports_busy_at_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two workers opening a new file at once: switching it to WAL and creating the
    tables need locks SQLite may report busy without waiting (its deadlock rule), so
    the open is tried again until ``timeout_s``; any other error is not."""
    store = SqliteStateStore(SqliteOptions(path=str(tmp_path / "s.sqlite3"), timeout_s=2))
    store.close()
    real = SqliteStateStore._open
    calls: list[int] = []

    def flaky(self: SqliteStateStore) -> sqlite3.Connection:
        calls.append(1)
        if len(calls) <= 2:
            raise sqlite3.OperationalError("database is locked")
        return real(self)

    monkeypatch.setattr(SqliteStateStore, "_open", flaky)
    again = SqliteStateStore(SqliteOptions(path=str(tmp_path / "s.sqlite3"), timeout_s=2))
    assert len(calls) == 3
    again.close()

    def broken(self: SqliteStateStore) -> sqlite3.Connection:
        calls.append(1)
        raise sqlite3.OperationalError("disk I/O error")

    calls.clear()
    monkeypatch.setattr(SqliteStateStore, "_open", broken)
    with pytest.raises(StateStoreError, match="disk I/O error"):
        SqliteStateStore(SqliteOptions(path=str(tmp_path / "s.sqlite3"), timeout_s=2))
    assert len(calls) == 1  # not a lock: no retry

    def locked(self: SqliteStateStore) -> sqlite3.Connection:
        raise sqlite3.OperationalError("database is locked")

    monkeypatch.setattr(SqliteStateStore, "_open", locked)
    with pytest.raises(StateStoreError, match=r"s\.sqlite3: database is locked"):
        SqliteStateStore(SqliteOptions(path=str(tmp_path / "s.sqlite3"), timeout_s=0.05))


def _open_and_close(path: str, barrier: Any, out: Any) -> None:
    barrier.wait()
    try:
        SqliteStateStore(SqliteOptions(path=path, timeout_s=10)).close()
        out.put("ok")
    except Exception as exc:  # reported to the test
        out.put(repr(exc))


def test_four_processes_opening_a_new_file_at_once(tmp_path: Path) -> None:
    """Real processes (fork), a fresh file each round: every open succeeds (before the
    retry about one open in 40 failed with 'database is locked')."""
    import multiprocessing

    ctx = multiprocessing.get_context("fork")
    results: list[str] = []
    for i in range(12):
        path = str(tmp_path / f"fresh{i}.sqlite3")
        barrier, out = ctx.Barrier(4), ctx.Queue()
        procs = [ctx.Process(target=_open_and_close, args=(path, barrier, out)) for _ in range(4)]
        for p in procs:
            p.start()
        results += [out.get(timeout=60) for _ in procs]
        for p in procs:
            p.join(timeout=60)
    assert results == ["ok"] * 48
