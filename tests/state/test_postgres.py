"""What the postgres store adds: DSN from the environment, no secret in errors, incrementality."""

from __future__ import annotations

import time
from typing import Any

import pytest

from ctxpolicy.components import StateStoreError, StoredState
from ctxpolicy.state.postgres import PostgresOptions, PostgresStateStore, describe_dsn
from ctxpolicy.testing.postgres import PostgresServer


def _store(dsn: str, table: str, env: dict[str, str] | None = None) -> PostgresStateStore:
    return PostgresStateStore(PostgresOptions(dsn=dsn, table=table), env=env)


def test_dsn_comes_from_the_environment_at_open_time(postgres_server: PostgresServer) -> None:
    env = {"CTXPOLICY_STATE_DSN": postgres_server.dsn}
    store = PostgresStateStore(PostgresOptions(table="from_env"), env=env)  # default dsn
    store.commit("c", expected_version=0, put={"k": "v"})
    assert store.load("c") == StoredState(1, {"k": "v"})
    assert postgres_server.password not in repr(store)
    store.close()
    with pytest.raises(StateStoreError, match="CTXPOLICY_STATE_DSN is not set"):
        PostgresStateStore(PostgresOptions(), env={})


def test_errors_never_show_the_password(postgres_server: PostgresServer) -> None:
    wrong = postgres_server.dsn.replace(postgres_server.password, "s3cr3t-wrong-pw")
    with pytest.raises(StateStoreError) as info:
        _store(wrong, "pw")
    text = str(info.value)
    assert "s3cr3t-wrong-pw" not in text and postgres_server.password not in text
    assert f"127.0.0.1:{postgres_server.port}/postgres as ctxpolicy" in text
    assert "password authentication failed" in text
    assert info.value.__cause__ is None and info.value.__suppress_context__


def test_unreachable_server_fails_fast_and_clearly(postgres_server: PostgresServer) -> None:
    dead = f"postgresql://u:hunter2@127.0.0.1:{postgres_server.port + 1 or 1}/db"
    start = time.monotonic()
    with pytest.raises(StateStoreError, match="cannot connect to the state database") as info:
        _store(dead, "dead")
    assert "hunter2" not in str(info.value)
    assert time.monotonic() - start < 15


def test_describe_dsn_forms() -> None:
    assert describe_dsn("host=db port=6432 dbname=app user=bob password=x") == (
        "postgresql://db:6432/app as bob"
    )
    assert describe_dsn("postgresql://bob:pw@h/app") == "postgresql://h:5432/app as bob"
    assert describe_dsn("not a dsn = = =") == "the configured PostgreSQL server"


def _xmins(store: PostgresStateStore) -> dict[str, Any]:
    conn = store._connection()
    rows = conn.execute(f"SELECT key, xmin::text FROM {store._entries} WHERE conv_id = 'c'")
    return dict(rows.fetchall())


def test_commit_writes_only_the_given_keys(postgres_server: PostgresServer) -> None:
    with _store(postgres_server.dsn, "incremental") as store:
        store.commit("c", expected_version=0, put={f"summary/{i}": i for i in range(200)})
        before = _xmins(store)
        store.commit("c", expected_version=1, put={"summary/5": "new"}, delete=["summary/9"])
        after = _xmins(store)
    changed = {k for k in after if before.get(k) != after[k]}
    assert changed == {"summary/5"}  # every other row is the very same tuple
    assert set(before) - set(after) == {"summary/9"}


def test_the_connection_recovers_after_the_server_drops_it(
    postgres_server: PostgresServer,
) -> None:
    with _store(postgres_server.dsn, "recover") as store:
        store.commit("c", expected_version=0, put={"k": 1})
        pid = store._connection().info.backend_pid
        with _store(postgres_server.dsn, "recover") as admin:
            admin._connection().execute("SELECT pg_terminate_backend(%s)", (pid,))
        with pytest.raises(StateStoreError, match="cannot read"):
            store.load("c")
        assert store.load("c") == StoredState(1, {"k": 1})  # reconnected


def test_tables_are_created_once_by_concurrent_openers(postgres_server: PostgresServer) -> None:
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(4) as pool:
        stores = list(pool.map(lambda _: _store(postgres_server.dsn, "race"), range(4)))
    stores[0].commit("c", expected_version=0, put={"k": 1})
    assert all(s.load("c").version == 1 for s in stores)
    for s in stores:
        s.close()
