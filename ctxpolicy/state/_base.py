"""Base classes of the built-in state stores: the checks and encoding they share.

:class:`JsonStateStore` implements the public contract once (conv_id and key
checks, canonical JSON values, ``expected_version + 1``) on top of two raw
methods a store provides: ``_read`` (version and encoded entries) and
``_write`` (the compare-and-set). :class:`SqlStateStore` adds one database
connection per process for the SQL stores.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterable, Mapping
from typing import Any, Generic, TypeVar

from pydantic import Field, field_validator

from ctxpolicy.components import ComponentOptions, StateStore, StateStoreError, StoredState
from ctxpolicy.state._codec import (
    IDENTIFIER_PATTERN,
    check_encoded,
    check_expected,
    check_table,
    decode,
    encode_changes,
    sql_table,
    stored_version,
    valid_conv_id,
)

__all__ = ["JsonStateStore", "Rows", "SqlOptions", "SqlStateStore", "Unreadable"]

#: Encoded entries: ``(key, canonical JSON)``.
Rows = list[tuple[str, str]]
C = TypeVar("C")


class Unreadable:
    """What a stored value that is not JSON (a damaged row) loads as: no entry of the
    session state's model accepts it, so the engine reports it (``state.invalid``)
    and starts that entry afresh instead of refusing the whole conversation."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "<unreadable state entry>"


_UNREADABLE = Unreadable()

#: Connections inherited through fork(): kept referenced so that garbage collection
#: in the child never closes (and so never disturbs) the parent's connection.
_INHERITED: list[Any] = []


class JsonStateStore(StateStore):
    """The contract of :class:`StateStore` over raw reads and compare-and-set writes.

    Subclasses open their storage in :meth:`_open_store` (called by ``__init__``
    once ``options``, ``home`` and ``env`` are set).
    """

    def __init__(
        self,
        options: ComponentOptions | None = None,
        *,
        home: str = "",
        env: Mapping[str, str] | None = None,
    ) -> None:
        super().__init__(options, home=home, env=env)
        self._open_store()

    def _open_store(self) -> None:
        """Open the storage; raise StateStoreError when it cannot be used."""

    def load(self, conv_id: str) -> StoredState:
        version, rows = self._read(valid_conv_id(conv_id))
        if version == 0 and not rows:
            return StoredState(0, {})
        version = stored_version(version)
        entries: dict[str, Any] = {}  # Unreadable for a value that is not JSON
        for key, value in rows:
            try:
                entries[key] = decode(value)
            except (ValueError, TypeError):  # a damaged value: the engine's checks drop it
                entries[key] = _UNREADABLE
        return StoredState(version, entries)

    def commit(
        self,
        conv_id: str,
        *,
        expected_version: int,
        put: Mapping[str, Any],
        delete: Iterable[str] = (),
    ) -> int:
        valid_conv_id(conv_id)
        expected = check_expected(expected_version)
        rows, dropped = encode_changes(put, delete)
        return self._write(conv_id, expected, rows, dropped)

    def commit_encoded(
        self,
        conv_id: str,
        *,
        expected_version: int,
        put: Mapping[str, str],
        delete: Iterable[str] = (),
    ) -> int:
        """:meth:`commit` of values already encoded by
        :func:`ctxpolicy.state._codec.entry_text` (the session's saves: each value is
        encoded once, where it is known, instead of being re-encoded and checked here)."""
        valid_conv_id(conv_id)
        expected = check_expected(expected_version)
        rows, dropped = check_encoded(put, delete)
        return self._write(conv_id, expected, rows, dropped)

    def _read(self, conv_id: str) -> tuple[int, Rows]:
        """The stored version (0 if none) and the encoded entries, in one snapshot."""
        raise NotImplementedError

    def _write(self, conv_id: str, expected: int, rows: Rows, dropped: list[str]) -> int:
        """Apply ``rows``/``dropped`` iff the version is ``expected``, else StateConflict;
        the new version: ``expected + 1``, or for a conversation's first commit one
        above every version a pruned conversation had (versions never repeat for a
        conversation id, even after retention deleted it: a stale worker conflicts)."""
        raise NotImplementedError


def joined_rows(rows: Iterable[tuple[Any, Any, Any]]) -> tuple[int, Rows]:
    """``(version, key, value)`` rows of a versions ⟕ entries join → ``_read``'s result."""
    rows = list(rows)
    if not rows:
        return 0, []
    return rows[0][0], [(k, v) for _, k, v in rows if k is not None]


class SqlOptions(ComponentOptions):
    """Options every SQL state store has."""

    table: str = Field(
        default="ctxpolicy_state",
        pattern=IDENTIFIER_PATTERN,
        description="Prefix of the tables (`<table>_versions`, `<table>_entries`, "
        "`<table>_floor`). A name with capitals gets its own tables (SQL folds case: "
        "`tenantA` is stored as `tenanta_c0000000040`, never in `tenanta`'s).",
    )

    @field_validator("table")
    @classmethod
    def _not_reserved(cls, value: str) -> str:
        return check_table(value)


class SqlStateStore(JsonStateStore, Generic[C]):
    """A store over one database connection per process, opened when the store opens.

    Subclasses set ``where`` (shown in errors) in ``_open_store`` and then call
    :meth:`_start`; they implement :meth:`_connect` and :meth:`_close_connection`.
    """

    where: str = ""

    def _start(self, table: str) -> None:
        table = sql_table(table)
        self._versions = f"{table}_versions"
        self._entries = f"{table}_entries"
        #: one row: the highest version of any conversation retention deleted
        self._floor = f"{table}_floor"
        self._lock = threading.Lock()
        self._conn: C | None = None
        self._pid = 0
        self._closed = False
        with self._lock:
            self._connection()  # errors surface when the store opens

    def _connect(self) -> C:
        raise NotImplementedError

    def _select_sql(self, placeholder: str) -> str:
        """One statement (one snapshot): the version joined with every entry."""
        return (
            f"SELECT v.version, e.key, e.value FROM {self._versions} AS v "
            f"LEFT JOIN {self._entries} AS e ON e.conv_id = v.conv_id "
            f"WHERE v.conv_id = {placeholder}"
        )

    def _usable(self, conn: C) -> bool:
        return True

    def _close_connection(self, conn: C) -> None:
        raise NotImplementedError

    def _connection(self) -> C:
        """This process's connection (a new one after fork or after it broke)."""
        if self._closed:
            raise StateStoreError(f"state store {self.where} is closed")
        conn = self._conn
        if conn is not None and self._pid == os.getpid() and self._usable(conn):
            return conn
        if conn is not None and self._pid != os.getpid():
            _INHERITED.append(conn)
        self._conn = None
        self._conn, self._pid = self._connect(), os.getpid()
        return self._conn

    def close(self) -> None:
        with self._lock:
            self._closed = True
            if self._conn is not None and self._pid == os.getpid():
                self._close_connection(self._conn)
            self._conn = None
