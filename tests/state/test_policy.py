"""The `state:` section of the DSL: defaults, validation against the store's options, opening."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from ctxpolicy.components import ComponentOptions, StateStoreError
from ctxpolicy.plugins import hookimpl
from ctxpolicy.policy.diagnostics import PolicyError
from ctxpolicy.resolve.load import load_policy
from ctxpolicy.resolve.schema import build_schema
from ctxpolicy.state import open_state_store, state_home
from ctxpolicy.state.memory import MemoryStateStore
from ctxpolicy.state.sqlite import DEFAULT_FILE, SqliteStateStore

HEAD = """ctxpolicy: 1
models:
  m: {context_window: 100000}
policies:
  default:
    model: m
    snapshots: {path: "SNAP"}
"""


def _policy(tmp_path: Path, state: str = "", env: dict[str, str] | None = None) -> Path:
    text = HEAD.replace("SNAP", str(tmp_path / "snaps")) + state
    p = tmp_path / "policy.yaml"
    p.write_text(text)
    return p


def _errors(path: Path, env: dict[str, str] | None = None) -> list[str]:
    with pytest.raises(PolicyError) as info:
        load_policy(path, env=env or {})
    return [d.format() for d in info.value.diagnostics]


def test_default_is_sqlite_beside_the_snapshots(tmp_path: Path) -> None:
    policy = load_policy(_policy(tmp_path), env={})
    assert policy.state.store == "sqlite" and policy.state.max_conflict_retries == 3
    assert policy.state.options["table"] == "ctxpolicy_state"  # store defaults filled in
    assert state_home(policy, env={}) == str(tmp_path / "snaps")
    store = open_state_store(policy, env={})
    assert isinstance(store, SqliteStateStore)
    assert store.path == str(tmp_path / "snaps" / DEFAULT_FILE)
    store.close()


def test_remote_snapshots_put_the_default_database_under_the_home(tmp_path: Path) -> None:
    text = HEAD.replace('{path: "SNAP"}', '{store: fsspec, path: "memory://snaps"}')
    p = tmp_path / "p.yaml"
    p.write_text(text)
    policy = load_policy(p, env={})
    assert state_home(policy, env={"CTXPOLICY_HOME": str(tmp_path / "home")}) == str(
        tmp_path / "home"
    )


def test_memory_store_and_retries(tmp_path: Path) -> None:
    p = _policy(tmp_path, "    state: {store: memory, max_conflict_retries: 0}\n")
    policy = load_policy(p, env={})
    assert isinstance(open_state_store(policy), MemoryStateStore)
    assert policy.state.max_conflict_retries == 0


def test_unknown_store_names_the_position_and_a_suggestion(tmp_path: Path) -> None:
    p = _policy(tmp_path, "    state:\n      store: sqlit\n")
    [msg] = [m for m in _errors(p) if "CTX102" in m]
    assert msg.startswith(f"{p}:9:7: CTX102 unknown state store 'sqlit'")
    assert "did you mean 'sqlite'?" in msg


def test_store_options_are_validated_by_the_store_model(tmp_path: Path) -> None:
    p = _policy(
        tmp_path,
        "    state:\n      store: postgres\n      options:\n        tabel: x\n"
        "        connect_timeout_s: -1\n",
    )
    errors = "\n".join(_errors(p))
    assert f"{p}:11:9: CTX101" in errors and "tabel" in errors and "'table'" in errors
    assert f"{p}:12:9: CTX103" in errors and "connect_timeout_s" in errors


def test_sql_injection_through_the_table_name_is_refused(tmp_path: Path) -> None:
    p = _policy(tmp_path, '    state: {options: {table: "x; DROP TABLE y"}}\n')
    assert any("CTX103" in m and "table" in m for m in _errors(p))


def test_retries_are_bounded(tmp_path: Path) -> None:
    p = _policy(tmp_path, "    state: {max_conflict_retries: 1000}\n")
    assert any("max_conflict_retries" in m for m in _errors(p))


def test_schema_validates_state_options_per_store() -> None:
    schema = build_schema()
    spec = schema["definitions"]["StateSpec"]
    stores = {
        rule["if"]["properties"]["store"]["const"]: rule["then"]["properties"]["options"]["$ref"]
        for rule in spec["allOf"]
    }
    assert stores == {
        "memory": "#/definitions/StateStore_memory_Options",
        "postgres": "#/definitions/StateStore_postgres_Options",
        "sqlite": "#/definitions/StateStore_sqlite_Options",
    }


class _CustomOptions(ComponentOptions):
    bucket: str


class _CustomStore(MemoryStateStore):
    name = "test_custom_state"
    description = "a third-party store"
    Options = _CustomOptions


def test_a_plugin_store_is_validated_and_opened_like_the_builtins(
    tmp_path: Path, register_plugin: Callable[[object, str], str]
) -> None:
    class Plugin:
        @hookimpl
        def ctxpolicy_register_state_stores(self, register: Callable[[type], None]) -> None:
            register(_CustomStore)

    register_plugin(Plugin(), "test-state-plugin")
    bad = _policy(tmp_path, "    state: {store: test_custom_state}\n")
    assert any("bucket" in m for m in _errors(bad))
    good = _policy(tmp_path, "    state: {store: test_custom_state, options: {bucket: b}}\n")
    store = open_state_store(load_policy(good, env={}))
    assert isinstance(store, _CustomStore) and store.options.bucket == "b"  # type: ignore[attr-defined]


def test_opening_an_unregistered_store_is_a_clear_error(tmp_path: Path) -> None:
    policy = load_policy(_policy(tmp_path), env={})
    policy = policy.model_copy(update={"state": policy.state.model_copy(update={"store": "nope"})})
    with pytest.raises(StateStoreError, match="unknown state store 'nope'; registered: memory"):
        open_state_store(policy)


def test_store_path_and_dsn_stay_as_written_until_the_store_opens(tmp_path: Path) -> None:
    """A password interpolated from the environment never sits in the resolved policy."""
    env = {"PGDSN": "postgresql://app:s3cr3t@db/app", "STATE_DIR": str(tmp_path / "st")}
    p = _policy(tmp_path, '    state: {store: postgres, options: {dsn: "${PGDSN}"}}\n')
    policy = load_policy(p, env=env)
    assert policy.state.options["dsn"] == "${PGDSN}"
    assert "s3cr3t" not in policy.model_dump_json()
    q = _policy(tmp_path, '    state: {options: {path: "${STATE_DIR}/s.db"}}\n')
    sqlite_policy = load_policy(q, env=env)
    assert sqlite_policy.state.options["path"] == "${STATE_DIR}/s.db"
    store = open_state_store(sqlite_policy, env=env)
    assert isinstance(store, SqliteStateStore) and store.path == str(tmp_path / "st" / "s.db")
    store.close()
    missing = _policy(tmp_path, '    state: {store: postgres, options: {dsn: "${NOPE}"}}\n')
    assert any("NOPE" in m for m in _errors(missing))  # still reported at load time
