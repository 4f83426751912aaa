"""Issue 28 item 4: store identifiers are injective and the sqlite file is created safely.

* Table names: PostgreSQL and SQLite fold unquoted identifiers (SQLite compares even
  quoted ones without case), so ``tenantA`` used to resume ``tenanta``. A name with
  capitals now gets its own tables (:func:`ctxpolicy.state.codec.sql_table`).
* The sqlite state file (ctxpolicy.state.sqlite.secure_file): never followed through a
  symlink planted at its path (or at
  SQLite's ``-wal``/``-shm`` beside it), made 0600 when it exists with a wider mode,
  refused when it belongs to another user or its folder is writable by others — like
  snapshot files.
"""

from __future__ import annotations

import os
import re
import stat
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ctxpolicy.components import StateStoreError
from ctxpolicy.engine import Session
from ctxpolicy.state.codec import IDENTIFIER_PATTERN, check_table, sql_table
from ctxpolicy.state.sqlite import SqliteOptions, SqliteStateStore
from tests.engine_helpers import make_policy

_names = st.from_regex(IDENTIFIER_PATTERN, fullmatch=True)


@given(a=_names, b=_names)
def test_table_names_are_injective_after_case_folding(a: str, b: str) -> None:
    try:
        check_table(a), check_table(b)
    except ValueError:
        return
    ta, tb = sql_table(a), sql_table(b)
    assert (ta.lower() == tb.lower()) == (a == b)
    assert re.fullmatch(r"[a-z_][a-z0-9_]*", ta) and len(ta) + len("_versions") <= 63
    if a == a.lower():
        assert ta == a, "a lower-case name keeps its tables (stored state resumes)"


def test_the_reserved_suffix_is_refused() -> None:
    with pytest.raises(ValueError, match="reserved"):
        SqliteOptions(table="tenanta_c0000000040")
    assert SqliteOptions(table="tenantA").table == "tenantA"


def _tenants(open_a: Any, open_b: Any) -> None:
    a, b = open_a("tenantA"), open_b("tenanta")
    a.commit("conv", expected_version=0, put={"meta": {"owner": "A"}})
    assert b.load("conv").version == 0 and b.load("conv").entries == {}
    b.commit("conv", expected_version=0, put={"meta": {"owner": "a"}})
    assert a.load("conv").entries == {"meta": {"owner": "A"}}
    a.close(), b.close()


def test_tenants_differing_in_case_never_mix_in_sqlite(tmp_path: Path) -> None:
    db = str(tmp_path / "s.db")

    def open_(table: str) -> SqliteStateStore:
        return SqliteStateStore(SqliteOptions(path=db, table=table))

    _tenants(open_, open_)


def test_tenants_differing_in_case_never_mix_in_postgres(postgres_server: Any) -> None:
    from ctxpolicy.state.postgres import PostgresOptions, PostgresStateStore

    def open_(table: str) -> Any:
        return PostgresStateStore(PostgresOptions(dsn=postgres_server.dsn, table=table))

    _tenants(open_, open_)


def _open(path: Path) -> SqliteStateStore:
    return SqliteStateStore(SqliteOptions(path=str(path)))


def test_a_symlink_planted_at_the_path_is_not_followed(tmp_path: Path) -> None:
    private = tmp_path / "private"
    private.mkdir(mode=0o700)
    target = tmp_path / "victim.txt"
    target.write_text("precious")
    (private / "state.db").symlink_to(target)
    with pytest.raises(StateStoreError, match="symlink"):
        _open(private / "state.db")
    assert target.read_text() == "precious"
    # the same through a session: an event, the session works in memory
    policy = make_policy(state={"store": "sqlite", "options": {"path": str(private / "state.db")}})
    events: list[dict[str, Any]] = []
    s = Session(policy, conv_id="c", on_event=events.append)
    assert s.prepare([{"role": "user", "content": "hi"}])
    assert [e for e in events if e["type"] == "state.unavailable"]
    assert target.read_text() == "precious"


def test_a_dangling_symlink_is_not_followed_either(tmp_path: Path) -> None:
    (tmp_path / "state.db").symlink_to(tmp_path / "created-elsewhere.db")
    with pytest.raises(StateStoreError, match="symlink"):
        _open(tmp_path / "state.db")
    assert not (tmp_path / "created-elsewhere.db").exists()


@pytest.mark.parametrize("side", ["-wal", "-shm"])
def test_a_symlink_beside_the_database_is_refused(tmp_path: Path, side: str) -> None:
    target = tmp_path / "victim"
    target.write_text("precious")
    (tmp_path / f"state.db{side}").symlink_to(target)
    with pytest.raises(StateStoreError, match="symlink"):
        _open(tmp_path / "state.db")
    assert target.read_text() == "precious"


def test_an_existing_file_is_made_private(tmp_path: Path) -> None:
    db = tmp_path / "state.db"
    _open(db).close()
    assert stat.S_IMODE(db.stat().st_mode) == 0o600
    os.chmod(db, 0o644)
    store = _open(db)
    store.commit("c", expected_version=0, put={"k": 1})
    for p in tmp_path.iterdir():
        assert stat.S_IMODE(p.stat().st_mode) & 0o077 == 0, p.name
    store.close()


def test_a_folder_writable_by_others_is_refused(tmp_path: Path) -> None:
    shared = tmp_path / "shared"
    shared.mkdir()
    os.chmod(shared, 0o777)
    with pytest.raises(StateStoreError, match="writable by other users"):
        _open(shared / "state.db")


@pytest.mark.skipif(os.geteuid() != 0, reason="giving a file to another user needs root")
def test_a_file_of_another_user_is_refused(tmp_path: Path) -> None:
    db = tmp_path / "state.db"
    db.touch(mode=0o600)
    os.chown(db, 4242, 4242)
    with pytest.raises(StateStoreError, match="another user"):
        _open(db)
