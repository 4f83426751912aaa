"""Base classes of the built-in state stores: the checks and encoding they share.

:class:`JsonStateStore` implements the public contract once (conv_id and key
checks, canonical JSON values, ``expected_version + 1``) on top of two raw
methods a store provides: ``_read`` (version and encoded entries) and
``_write`` (the compare-and-set). :class:`SqlStateStore` adds a bounded pool of
database connections per process for the SQL stores: one store object shared by many
conversations (``ctxpolicy.calls.SessionPool`` shares one per store location) opens at
most ``pool_size`` connections, and a call that finds them all busy waits for one.
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from collections.abc import Iterable, Iterator, Mapping
from typing import Any, Generic, TypeVar

from pydantic import Field, field_validator

from ctxpolicy.components import ComponentOptions, StateStore, StateStoreError, StoredState
from ctxpolicy.state.codec import (
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
        :func:`ctxpolicy.state.codec.entry_text` (the session's saves: each value is
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

    pool_size: int = Field(
        default=1,
        ge=1,
        le=256,
        description="Connections one store opens at most in a process. The sessions of a "
        "gateway or an adapter share one store, so this bounds the connections of every "
        "open conversation together; a call that finds them all busy waits for one.",
    )

    @field_validator("table")
    @classmethod
    def _not_reserved(cls, value: str) -> str:
        return check_table(value)


class SqlStateStore(JsonStateStore, Generic[C]):
    """A store over a bounded pool of database connections per process.

    Subclasses set ``where`` (shown in errors) in ``_open_store`` and then call
    :meth:`_start`; they implement :meth:`_connect` and :meth:`_close_connection`.
    Every read and write borrows one connection for its statement(s) through
    :meth:`_lease`: at most ``options.pool_size`` are open at once (an idle one is
    reused, most recently returned first), a broken one is closed when it comes
    back, and after ``fork()`` the child opens its own and never touches the parent's.
    """

    where: str = ""
    options: SqlOptions

    def _start(self, table: str) -> None:
        table = sql_table(table)
        self._versions = f"{table}_versions"
        self._entries = f"{table}_entries"
        #: one row: the highest version of any conversation retention deleted
        self._floor = f"{table}_floor"
        self._lock = threading.Lock()
        self._returned = threading.Condition(self._lock)
        self._idle: list[C] = []
        self._opened = 0  # connections of this process: idle and lent
        self._pid = os.getpid()
        self._closed = False
        with self._lease():  # errors surface when the store opens
            pass

    @property
    def pool_size(self) -> int:
        """Connections this store opens at most (``options.pool_size``)."""
        return int(getattr(self.options, "pool_size", 1) or 1)

    @property
    def connections(self) -> int:
        """Connections this store holds open now (idle and lent)."""
        with self._lock:
            return self._opened if self._pid == os.getpid() else 0

    def _wait_s(self) -> float:
        """How long a call waits for a free connection before it fails."""
        return 30.0

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

    def _forked(self) -> None:
        """In a child of ``fork()``: forget the parent's connections (kept referenced,
        so garbage collection never closes them under the parent). Lock held."""
        if self._pid != os.getpid():
            _INHERITED.extend(self._idle)
            self._idle = []
            self._opened = 0
            self._pid = os.getpid()

    def _acquire(self) -> C:
        deadline = time.monotonic() + self._wait_s()
        with self._lock:
            while True:
                if self._closed:
                    raise StateStoreError(f"state store {self.where} is closed")
                self._forked()
                if self._idle:
                    conn = self._idle.pop()
                    if self._usable(conn):
                        return conn
                    self._opened -= 1
                    with contextlib.suppress(Exception):
                        self._close_connection(conn)
                    continue
                if self._opened < self.pool_size:
                    self._opened += 1  # the slot is ours; connect outside the lock
                    break
                left = deadline - time.monotonic()
                if left <= 0:
                    raise StateStoreError(
                        f"no free connection to the state store {self.where} within "
                        f"{self._wait_s():g}s ({self.pool_size} in use; raise "
                        "state.options.pool_size)"
                    )
                self._returned.wait(left)
        try:
            return self._connect()
        except BaseException:
            with self._lock:
                if self._pid == os.getpid():
                    self._opened -= 1
                self._returned.notify()
            raise

    def _release(self, conn: C) -> None:
        with self._lock:
            if self._pid != os.getpid():  # lent before a fork: the parent's
                return
            if not self._closed and self._usable(conn):
                self._idle.append(conn)
            else:
                self._opened -= 1
                with contextlib.suppress(Exception):
                    self._close_connection(conn)
            self._returned.notify()

    @contextlib.contextmanager
    def _lease(self) -> Iterator[C]:
        """One connection of the pool for the statements of one call."""
        conn = self._acquire()
        try:
            yield conn
        finally:
            self._release(conn)

    def _connection(self) -> C:
        """A connection of the pool, returned to it at once (for tests and tools that
        run a statement of their own; a store's calls use :meth:`_lease`)."""
        with self._lease() as conn:
            return conn

    def close(self) -> None:
        with self._lock:
            self._closed = True
            idle, self._idle = self._idle, []
            mine = self._pid == os.getpid()
            if mine:
                self._opened -= len(idle)
            self._returned.notify_all()
        if mine:
            for conn in idle:
                with contextlib.suppress(Exception):
                    self._close_connection(conn)
