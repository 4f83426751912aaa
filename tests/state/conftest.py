"""Fixtures of the state-store tests: every store, opened the way the engine opens it."""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from ctxpolicy.components import StateStore
from ctxpolicy.plugins import get_registry

STORES = ("memory", "sqlite", "postgres")
_tables = itertools.count()

#: ``open_store(**options)`` → a new store instance of the parametrized kind, all
#: instances of one test sharing the same database (like two workers would).
OpenStore = Callable[..., StateStore]


def store_options(kind: str, tmp_path: Path, request: pytest.FixtureRequest) -> dict[str, Any]:
    """Options that give this test a private database of ``kind``."""
    if kind == "sqlite":
        return {"path": str(tmp_path / "state.sqlite3")}
    if kind == "postgres":
        server = request.getfixturevalue("postgres_server")
        return {"dsn": server.dsn, "table": f"t{next(_tables)}_{request.node.name[:16]}"[:40]}
    return {}


def _safe_table(name: str) -> str:
    return "".join(c if c.isalnum() else "_" for c in name)


@pytest.fixture(params=STORES)
def open_store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[OpenStore]:
    kind: str = request.param
    base = store_options(kind, tmp_path, request)
    if "table" in base:
        base["table"] = _safe_table(base["table"])
    cls = get_registry().get("state_store", kind)
    assert cls is not None
    opened: list[StateStore] = []
    shared: list[StateStore] = []

    def _open(**options: Any) -> StateStore:
        if kind == "memory" and shared:  # one in-process store stands for "the database"
            return shared[0]
        store = cls(cls.Options.model_validate({**base, **options}), home=str(tmp_path))
        assert isinstance(store, StateStore)
        opened.append(store)
        shared.append(store)
        return store

    yield _open
    for store in opened:
        store.close()
