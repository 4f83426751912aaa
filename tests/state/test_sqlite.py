"""What the sqlite store adds to the contract: WAL, file modes, default path, incrementality."""

from __future__ import annotations

import sqlite3
import stat
from pathlib import Path

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
