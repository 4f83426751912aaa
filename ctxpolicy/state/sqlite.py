"""The ``sqlite`` state store: the embedded default, one file beside the snapshots.

Stdlib :mod:`sqlite3` in WAL mode (readers never block the writer). Two tables:
``<table>_versions(conv_id, version, updated_at)`` and
``<table>_entries(conv_id, key, value)``; a commit is one ``BEGIN IMMEDIATE``
transaction that checks the version, bumps it and writes only the given keys, so
any number of processes on one machine can share the file safely. A load is one
statement (one consistent snapshot). The file is created 0600 in a 0700
directory. Not for network filesystems (SQLite's locking is unreliable there):
use ``postgres`` for workers on several machines.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import stat
import time
from collections.abc import Callable
from typing import Literal, TypeVar

from pydantic import Field

from ctxpolicy.components import StateConflict, StateStoreError
from ctxpolicy.plugins import hookimpl
from ctxpolicy.state._base import Rows, SqlOptions, SqlStateStore, joined_rows
from ctxpolicy.state.codec import interpolate_option

__all__ = ["DEFAULT_FILE", "SqliteOptions", "SqliteStateStore"]

T = TypeVar("T")

#: File name under the state home (the snapshot root). The leading dot keeps it
#: apart from conversation directories, whose names never start with a dot.
DEFAULT_FILE = ".ctxpolicy-state.sqlite3"
#: Where the file goes when the snapshot root is not a local directory.
FALLBACK_PATH = "${CTXPOLICY_HOME:-~/.ctxpolicy}/state.sqlite3"


class SqliteOptions(SqlOptions):
    """Options of the ``sqlite`` state store."""

    path: str | None = Field(
        default=None,
        description="Database file; `${NAME}`, `${NAME:-default}` and `~` are expanded "
        "when the store opens. Unset: `.ctxpolicy-state.sqlite3` in the snapshot root "
        "(or `${CTXPOLICY_HOME:-~/.ctxpolicy}/state.sqlite3` when snapshots are not local).",
    )
    timeout_s: float = Field(
        default=30.0,
        gt=0,
        le=3600,
        description="How long a commit, or opening the file, waits for another process's lock.",
    )
    synchronous: Literal["normal", "full"] = Field(
        default="normal",
        description="SQLite `synchronous` pragma: `normal` survives any process crash "
        "(SIGKILL) and in WAL mode may lose only the last commits on power loss; `full` "
        "also survives power loss, at an fsync per commit.",
    )


class SqliteStateStore(SqlStateStore[sqlite3.Connection]):
    """State in one SQLite file (WAL), shared safely by the processes of one machine."""

    name = "sqlite"
    description = "Embedded SQLite file beside the snapshots (WAL, compare-and-set commits)."
    Options = SqliteOptions

    options: SqliteOptions

    def _open_store(self) -> None:
        self.path = self.where = self._resolve_path()
        self._start(self.options.table)
        # the statements of a commit, built once (sqlite3 keeps them prepared, keyed by text)
        self._bump_sql = (
            f"UPDATE {self._versions} SET version = ?, updated_at = ? "
            "WHERE conv_id = ? AND version = ?"
        )
        self._put_sql = (
            f"INSERT INTO {self._entries} (conv_id, key, value) VALUES (?, ?, ?) "
            "ON CONFLICT (conv_id, key) DO UPDATE SET value = excluded.value"
        )
        self._drop_sql = f"DELETE FROM {self._entries} WHERE conv_id = ? AND key = ?"

    def _resolve_path(self) -> str:
        if self.options.path is not None:
            raw = interpolate_option(self.options.path, self.env, "path")
        elif self.home:
            raw = os.path.join(self.home, DEFAULT_FILE)
        else:
            raw = interpolate_option(FALLBACK_PATH, self.env, "path")
        if raw == ":memory:":
            raise StateStoreError("state.options.path ':memory:' is not durable: use store: memory")
        return os.path.abspath(os.path.expanduser(raw))

    # -- connection
    def _connect(self) -> sqlite3.Connection:
        """:meth:`_open`, tried again while another process holds a lock the busy
        timeout does not wait for (two workers opening a new file at once: switching
        it to WAL and creating the tables need locks SQLite reports busy at once),
        until ``timeout_s`` has passed."""
        deadline = time.monotonic() + self.options.timeout_s
        pause = 0.005
        while True:
            try:
                return self._open()
            except sqlite3.OperationalError as exc:
                busy = "locked" in str(exc) or "busy" in str(exc)
                if not busy or time.monotonic() + pause > deadline:
                    raise StateStoreError(
                        f"cannot open state database {self.path}: {exc}"
                    ) from None
                time.sleep(pause)
                pause = min(pause * 2, 0.1)
            except (sqlite3.Error, OSError) as exc:
                raise StateStoreError(f"cannot open state database {self.path}: {exc}") from None

    def _close_connection(self, conn: sqlite3.Connection) -> None:
        conn.close()

    def _wait_s(self) -> float:
        return self.options.timeout_s

    def _open(self) -> sqlite3.Connection:
        checked = secure_file(self.path)
        timeout = self.options.timeout_s
        conn = sqlite3.connect(
            self.path, timeout=timeout, isolation_level=None, check_same_thread=False
        )
        try:
            _same_file(checked, self.path)  # nothing was swapped in between
            conn.execute(f"PRAGMA busy_timeout = {int(timeout * 1000)}")
            mode = conn.execute("PRAGMA journal_mode = WAL").fetchone()[0]
            if str(mode).lower() != "wal":
                raise StateStoreError(
                    f"state database {self.path} cannot use WAL mode (journal_mode={mode})"
                )
            conn.execute(f"PRAGMA synchronous = {self.options.synchronous.upper()}")
            conn.execute("BEGIN IMMEDIATE")
            conn.execute(
                f"CREATE TABLE IF NOT EXISTS {self._versions} ("
                "conv_id TEXT PRIMARY KEY, version INTEGER NOT NULL, updated_at REAL NOT NULL)"
            )
            conn.execute(
                f"CREATE TABLE IF NOT EXISTS {self._entries} ("
                "conv_id TEXT NOT NULL, key TEXT NOT NULL, value TEXT NOT NULL, "
                "PRIMARY KEY (conv_id, key)) WITHOUT ROWID"
            )
            conn.execute(
                f"CREATE TABLE IF NOT EXISTS {self._floor} ("
                "id INTEGER PRIMARY KEY, version INTEGER NOT NULL)"
            )
            conn.execute("COMMIT")
            for side in _SIDE_FILES:  # created by SQLite with the database's mode
                _check_file(self.path + side)
        except BaseException:
            conn.close()
            raise
        return conn

    # -- raw reads and writes
    def _read(self, conv_id: str) -> tuple[int, Rows]:
        with self._lease() as conn:
            try:
                return joined_rows(conn.execute(self._select_sql("?"), (conv_id,)))
            except sqlite3.Error as exc:
                raise StateStoreError(f"cannot read state from {self.path}: {exc}") from None

    def _write(self, conv_id: str, expected: int, rows: Rows, dropped: list[str]) -> int:
        return self._transaction(
            "write state to", lambda conn: self._apply(conn, conv_id, expected, rows, dropped)
        )

    def prune(self, *, before: float) -> int:
        def delete(conn: sqlite3.Connection) -> int:
            conn.execute(  # versions never repeat: remember the highest one deleted
                f"INSERT INTO {self._floor} (id, version) "
                f"SELECT 1, max(version) FROM {self._versions} WHERE updated_at < ? "
                "GROUP BY 1 HAVING count(*) > 0 "
                "ON CONFLICT (id) DO UPDATE SET version = max(version, excluded.version)",
                (before,),
            )
            conn.execute(
                f"DELETE FROM {self._entries} WHERE conv_id IN "
                f"(SELECT conv_id FROM {self._versions} WHERE updated_at < ?)",
                (before,),
            )
            sql = f"DELETE FROM {self._versions} WHERE updated_at < ?"
            return int(conn.execute(sql, (before,)).rowcount)

        return self._transaction("prune state in", delete)

    def _transaction(self, action: str, body: Callable[[sqlite3.Connection], T]) -> T:
        """``body`` in one ``BEGIN IMMEDIATE`` transaction (the file's write lock),
        rolled back when it raises; a database error is a StateStoreError."""
        with self._lease() as conn:
            try:
                conn.execute("BEGIN IMMEDIATE")
                try:
                    result = body(conn)
                    conn.execute("COMMIT")
                except BaseException:
                    with contextlib.suppress(sqlite3.Error):
                        conn.execute("ROLLBACK")
                    raise
            except sqlite3.Error as exc:
                raise StateStoreError(f"cannot {action} {self.path}: {exc}") from None
        return result

    def _apply(
        self, conn: sqlite3.Connection, conv_id: str, expected: int, rows: Rows, dropped: list[str]
    ) -> int:
        """The compare-and-set and the changes, in the caller's transaction: the version
        check is the ``WHERE`` of the one statement that bumps it (a conversation's
        first commit inserts its row instead), then one prepared statement per change."""
        now = time.time()
        if expected:
            new = expected + 1
            if conn.execute(self._bump_sql, (new, now, conv_id, expected)).rowcount != 1:
                self._conflict(conn, conv_id, expected)
        else:
            if conn.execute(
                f"SELECT 1 FROM {self._versions} WHERE conv_id = ?", (conv_id,)
            ).fetchone():
                self._conflict(conn, conv_id, expected)
            # above every version a pruned conversation had
            floor = conn.execute(f"SELECT version FROM {self._floor} WHERE id = 1").fetchone()
            new = (floor[0] if floor and isinstance(floor[0], int) else 0) + 1
            conn.execute(
                f"INSERT INTO {self._versions} (conv_id, version, updated_at) VALUES (?, ?, ?)",
                (conv_id, new, now),
            )
        if len(rows) == 1:
            conn.execute(self._put_sql, (conv_id, *rows[0]))
        elif rows:
            conn.executemany(self._put_sql, [(conv_id, k, v) for k, v in rows])
        if dropped:
            conn.executemany(self._drop_sql, [(conv_id, k) for k in dropped])
        return new

    def _conflict(self, conn: sqlite3.Connection, conv_id: str, expected: int) -> None:
        """Raise the StateConflict of a commit whose version check failed (nothing of it
        was written: the caller rolls back)."""
        row = conn.execute(
            f"SELECT version FROM {self._versions} WHERE conv_id = ?", (conv_id,)
        ).fetchone()
        found = 0 if row is None else row[0]
        raise StateConflict(conv_id, expected, found if isinstance(found, int) else None)


#: Files SQLite keeps beside the database.
_SIDE_FILES = ("-wal", "-shm", "-journal")
_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)


def secure_file(path: str) -> tuple[int, int]:
    """Create or check the database file safely, like snapshot files: its folder is
    created 0700 and must not be writable by another user (so nothing can be swapped
    in it after these checks); the file and SQLite's files beside it are never
    symlinks, must be regular files owned by this user, and are made 0600. A new file
    is created with ``O_CREAT | O_EXCL | O_NOFOLLOW``. Returns the file's
    ``(st_dev, st_ino)``; StateStoreError for anything else.

    Existing files are checked with ``lstat`` and ``chmod``, never opened: closing any
    descriptor of a file releases every POSIX lock this process holds on it, which
    would break the locks of a SQLite connection already open on it."""
    folder = os.path.dirname(path)
    try:
        os.makedirs(folder, mode=0o700, exist_ok=True)
        st = os.stat(folder)
    except OSError as exc:
        raise StateStoreError(f"cannot open state database {path}: {exc}") from None
    if st.st_uid not in (os.geteuid(), 0) or st.st_mode & 0o022:
        raise StateStoreError(
            f"state database folder {folder} is writable by other users: a link planted "
            "there could redirect the database; use a private folder"
        )
    for side in _SIDE_FILES:
        _check_file(path + side)
    found = _check_file(path)
    if found is None:
        try:
            os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | _NOFOLLOW, 0o600))
        except FileExistsError:
            pass  # another process created it meanwhile: checked below
        except OSError as exc:
            raise StateStoreError(f"cannot create state database {path}: {exc}") from None
        found = _check_file(path)
        if found is None:
            raise StateStoreError(f"state database file {path} vanished while it was created")
    return found.st_dev, found.st_ino


def _check_file(path: str) -> os.stat_result | None:
    """A file of the store: None if absent; else no symlink, a regular file of this
    user, made 0600 (StateStoreError otherwise)."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise StateStoreError(f"cannot use state database file {path}: {exc}") from None
    if stat.S_ISLNK(st.st_mode):
        raise StateStoreError(f"state database file {path} is a symlink: not followed")
    if not stat.S_ISREG(st.st_mode):
        raise StateStoreError(f"state database file {path} is not a regular file")
    if st.st_uid != os.geteuid():
        raise StateStoreError(f"state database file {path} belongs to another user")
    if stat.S_IMODE(st.st_mode) & 0o077:
        try:
            os.chmod(path, 0o600)
        except OSError as exc:
            raise StateStoreError(
                f"cannot make state database file {path} private: {exc}"
            ) from None
    return st


def _same_file(checked: tuple[int, int], path: str) -> None:
    now = os.lstat(path)
    if checked != (now.st_dev, now.st_ino) or stat.S_ISLNK(now.st_mode):
        raise StateStoreError(f"state database file {path} was replaced while it was opened")


@hookimpl
def ctxpolicy_register_state_stores(register):  # type: ignore[no-untyped-def]
    register(SqliteStateStore)
