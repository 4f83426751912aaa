"""The ``postgres`` state store: one PostgreSQL database shared by a fleet of workers.

Needs ``pip install ctxpolicy[postgres]`` (psycopg 3). Two tables,
``<table>_versions(conv_id, version, updated_at)`` and
``<table>_entries(conv_id, key, value)``, created on first open (under an advisory
lock, so workers starting together do not race). A commit is one statement (one round trip, one transaction):

* ``UPDATE … SET version = version + 1 WHERE conv_id = $1 AND version = $expected``
  (or an ``INSERT … ON CONFLICT DO NOTHING`` for the first commit) — the row lock
  serialises concurrent committers, and the loser's ``WHERE`` no longer matches,
  so it gets :class:`StateConflict` and nothing of it is written;
* in the same statement, only if the version moved: upserts of the given keys and
  deletes of the deleted ones.

A load is one statement (one snapshot). The DSN is interpolated from the
environment when the store opens (default ``${CTXPOLICY_STATE_DSN}``), so a
password never has to be in a policy file; error messages name host, port,
database and user only. A DSN that does not parse is reported without libpq's
message (it quotes the bad token, which may be the password), and every other
message is scrubbed of the password in each form it may take (issue 29 item 2). A store object belongs to the process that opened it:
after ``fork()`` the child opens its own connection and never touches the
parent's.
"""

from __future__ import annotations

import math
import re
from typing import TYPE_CHECKING, Any
from urllib.parse import quote, unquote

from pydantic import Field

from ctxpolicy._install import extra_hint
from ctxpolicy.components import StateConflict, StateStoreError
from ctxpolicy.plugins import hookimpl
from ctxpolicy.state._base import Rows, SqlOptions, SqlStateStore, joined_rows
from ctxpolicy.state.codec import interpolate_option

if TYPE_CHECKING:  # pragma: no cover
    import psycopg

__all__ = ["PostgresOptions", "PostgresStateStore", "describe_dsn", "dsn_secrets", "scrub"]


class PostgresOptions(SqlOptions):
    """Options of the ``postgres`` state store."""

    dsn: str = Field(
        default="${CTXPOLICY_STATE_DSN}",
        description="libpq connection string or URL. `${NAME}` is interpolated from the "
        "environment when the store opens; keep passwords there (or in `~/.pgpass`, "
        "`PGPASSWORD`), never in the policy file.",
    )
    connect_timeout_s: float = Field(
        default=10.0, gt=0, le=600, description="Give up connecting after this long."
    )
    statement_timeout_s: float = Field(
        default=30.0,
        gt=0,
        le=3600,
        description="Server-side limit of one statement (a commit waiting on a lock too).",
    )
    pool_size: int = Field(
        default=4,
        ge=1,
        le=256,
        description="Connections one store opens at most in a process. The sessions of a "
        "gateway or an adapter share one store, so this bounds the server connections of "
        "every open conversation together (keep workers x pool_size below the server's "
        "`max_connections`); a call that finds them all busy waits for one, up to "
        "`connect_timeout_s + statement_timeout_s`.",
    )


def describe_dsn(dsn: str) -> str:
    """``host:port/dbname as user`` of a DSN: enough to find it, never a password."""
    try:
        from psycopg.conninfo import conninfo_to_dict

        info = conninfo_to_dict(dsn)
    except Exception:
        return "the configured PostgreSQL server"
    host = str(info.get("host") or info.get("hostaddr") or "localhost")
    port = str(info.get("port") or "5432")
    where = f"postgresql://{host}:{port}/{info.get('dbname') or ''}"
    user = info.get("user")
    return f"{where} as {user}" if user else where


class PostgresStateStore(SqlStateStore["psycopg.Connection[Any]"]):
    """State in PostgreSQL: compare-and-set commits for workers on many machines."""

    name = "postgres"
    description = "PostgreSQL via psycopg 3, for a fleet of workers (compare-and-set commits)."
    Options = PostgresOptions

    options: PostgresOptions

    def _open_store(self) -> None:
        try:
            import psycopg  # noqa: F401
        except ImportError:  # pragma: no cover - extra not installed
            raise StateStoreError(
                f"the `postgres` state store needs psycopg 3: {extra_hint('postgres')}"
            ) from None
        self._dsn = interpolate_option(self.options.dsn, self.env, "dsn")
        if not self._dsn.strip():
            raise StateStoreError(
                "state.options.dsn is empty: set CTXPOLICY_STATE_DSN or state.options.dsn"
            )
        self._secrets = dsn_secrets(self._dsn)
        from psycopg.conninfo import conninfo_to_dict

        try:
            conninfo_to_dict(self._dsn)
        except Exception as exc:  # libpq quotes the bad token: never echo it
            raise StateStoreError(
                f"state.options.dsn is not a valid libpq connection string or URL "
                f"({_parse_problem(exc)}); the value is not shown, it may hold a password"
            ) from None
        self.where = scrub(describe_dsn(self._dsn), self._secrets)
        self._commit_texts: dict[bool, str] = {}
        self._start(self.options.table)

    def __repr__(self) -> str:
        return f"PostgresStateStore({self.where!r}, table={self.options.table!r})"

    # -- connection
    def _connect(self) -> psycopg.Connection[Any]:
        import psycopg

        try:
            conn = psycopg.connect(
                self._dsn,
                autocommit=True,
                connect_timeout=max(1, math.ceil(self.options.connect_timeout_s)),
                application_name="ctxpolicy",
            )
        except psycopg.Error as exc:
            raise StateStoreError(
                self._scrub(f"cannot connect to the state database {self.where}: {_reason(exc)}")
            ) from None
        except (OSError, ValueError) as exc:  # a host name the resolver refuses (idna)
            raise StateStoreError(
                f"cannot connect to the state database {self.where}: the host could not be "
                f"resolved ({type(exc).__name__})"
            ) from None
        try:
            ms = int(self.options.statement_timeout_s * 1000)
            conn.execute(f"SET statement_timeout = {ms}")
            self._setup(conn)
        except psycopg.Error as exc:
            conn.close()
            raise StateStoreError(
                self._scrub(f"cannot prepare the state tables in {self.where}: {_reason(exc)}")
            ) from None
        return conn

    def _usable(self, conn: psycopg.Connection[Any]) -> bool:
        return not (conn.closed or conn.broken)

    def _wait_s(self) -> float:
        return self.options.connect_timeout_s + self.options.statement_timeout_s

    def _close_connection(self, conn: psycopg.Connection[Any]) -> None:
        conn.close()

    def _setup(self, conn: psycopg.Connection[Any]) -> None:
        with conn.transaction():
            conn.execute("SELECT pg_advisory_xact_lock(hashtext(%s))", (self._versions,))
            conn.execute(
                f"CREATE TABLE IF NOT EXISTS {self._versions} ("
                "conv_id text PRIMARY KEY, version bigint NOT NULL, "
                "updated_at timestamptz NOT NULL DEFAULT now())"
            )
            conn.execute(
                f"CREATE TABLE IF NOT EXISTS {self._entries} ("
                "conv_id text NOT NULL, key text NOT NULL, value text NOT NULL, "
                "PRIMARY KEY (conv_id, key))"
            )
            conn.execute(
                f"CREATE TABLE IF NOT EXISTS {self._floor} ("
                "id integer PRIMARY KEY, version bigint NOT NULL)"
            )

    def _fail(self, action: str, exc: Exception) -> StateStoreError:
        """A database error (a broken connection is closed when it goes back to the
        pool, and the next call connects anew)."""
        return StateStoreError(
            self._scrub(f"cannot {action} the state database {self.where}: {_reason(exc)}")
        )

    def _scrub(self, text: str) -> str:
        return scrub(text, getattr(self, "_secrets", ()))

    # -- raw reads and writes
    def _read(self, conv_id: str) -> tuple[int, Rows]:
        import psycopg

        with self._lease() as conn:
            try:
                return joined_rows(conn.execute(self._select_sql("%s"), (conv_id,)).fetchall())
            except psycopg.Error as exc:
                raise self._fail("read", exc) from None

    def _write(self, conv_id: str, expected: int, rows: Rows, dropped: list[str]) -> int:
        import psycopg

        with self._lease() as conn:
            try:
                row = conn.execute(
                    self._commit_sql(expected),
                    {
                        "conv": conv_id,
                        "expected": expected,
                        "keys": [k for k, _ in rows],
                        "values": [v for _, v in rows],
                        "dropped": dropped,
                    },
                ).fetchone()
            except psycopg.Error as exc:
                raise self._fail("write", exc) from None
        if row is None:
            raise StateConflict(conv_id, expected)  # nothing of it was written
        return int(row[0])

    def prune(self, *, before: float) -> int:
        """One statement: a conversation committed meanwhile holds its row lock, and
        the delete re-checks its (new) ``updated_at`` once the lock is released."""
        import psycopg

        with self._lease() as conn:
            try:
                row = conn.execute(
                    f"WITH v AS (DELETE FROM {self._versions} "
                    "WHERE updated_at < to_timestamp(%(before)s) RETURNING conv_id, version), "
                    f"e AS (DELETE FROM {self._entries} "
                    "WHERE conv_id IN (SELECT conv_id FROM v)), "
                    # versions never repeat: remember the highest one deleted
                    f"f AS (INSERT INTO {self._floor} AS f (id, version) "
                    "SELECT 1, max(version) FROM v HAVING count(*) > 0 "
                    "ON CONFLICT (id) DO UPDATE SET version = GREATEST(f.version, EXCLUDED.version)) "
                    "SELECT count(*) FROM v",
                    {"before": before},
                ).fetchone()
            except psycopg.Error as exc:
                raise self._fail("prune", exc) from None
        return int(row[0]) if row else 0

    def _commit_sql(self, expected: int) -> str:
        """One statement, so one round trip and one implicit transaction: bump the
        version iff it is ``expected`` (the row lock serialises committers; a loser's
        ``WHERE`` no longer matches), and only then upsert and delete entries. Built
        once per kind (first commit or not): the same text every time, so psycopg
        prepares it on the server after a few commits."""
        first = expected == 0
        cached = self._commit_texts.get(first)
        if cached is None:
            cached = self._commit_texts[first] = self._build_commit_sql(first)
        return cached

    def _build_commit_sql(self, first: bool) -> str:
        if first:
            bump = (
                f"INSERT INTO {self._versions} (conv_id, version) VALUES (%(conv)s, "
                f"COALESCE((SELECT version FROM {self._floor} WHERE id = 1), 0) + 1) "
                "ON CONFLICT (conv_id) DO NOTHING RETURNING version"
            )
        else:
            bump = (
                f"UPDATE {self._versions} SET version = version + 1, updated_at = now() "
                "WHERE conv_id = %(conv)s AND version = %(expected)s RETURNING version"
            )
        return (
            f"WITH v AS ({bump}), "
            f"d AS (DELETE FROM {self._entries} WHERE conv_id = %(conv)s "
            "AND key = ANY(%(dropped)s::text[]) AND EXISTS (SELECT 1 FROM v)), "
            f"p AS (INSERT INTO {self._entries} (conv_id, key, value) "
            "SELECT %(conv)s, k, val FROM unnest(%(keys)s::text[], %(values)s::text[]) "
            "AS t(k, val) WHERE EXISTS (SELECT 1 FROM v) "
            "ON CONFLICT (conv_id, key) DO UPDATE SET value = EXCLUDED.value) "
            "SELECT version FROM v"
        )


def _reason(exc: Exception) -> str:
    """The server's message, first line only (scrubbed by the caller)."""
    text = str(exc).strip().splitlines()
    return text[0][:500] if text else type(exc).__name__


#: the userinfo's password of a URL, up to its last ``@`` (also when it holds ``/``)
_URL_PASSWORD = re.compile(r"^\s*[A-Za-z][\w+.-]*://[^:@]*:(.*)@", re.DOTALL)
_KW_PASSWORD = re.compile(r"(?:^|\s)password\s*=\s*('(?:[^'\\]|\\.)*'?|\S*)", re.IGNORECASE)


def dsn_secrets(dsn: str) -> tuple[str, ...]:
    """Every form in which the password of ``dsn`` could appear in a message: as
    parsed by libpq, as written (percent-encoded, quoted), decoded; also when the DSN
    does not parse (found by the URL and ``password=`` syntax)."""
    found: set[str] = set()
    try:
        from psycopg.conninfo import conninfo_to_dict

        pw = conninfo_to_dict(dsn).get("password")
        if pw:
            found.add(str(pw))
    except Exception:
        pass
    for rx in (_URL_PASSWORD, _KW_PASSWORD):
        for m in rx.finditer(dsn):
            raw = m.group(1)
            if raw:
                found.update({raw, raw.strip("'"), unquote(raw)})
    out: set[str] = set()
    for f in found:
        if f:
            out.update({f, quote(f, safe=""), repr(f)[1:-1], f.replace("'", "\\'")})
    return tuple(sorted((f for f in out if f), key=len, reverse=True))


def scrub(text: str, secrets: tuple[str, ...] | list[str]) -> str:
    """``text`` with every one of ``secrets`` (longest first) replaced by ``***``."""
    for secret in secrets:
        if secret in text:
            text = text.replace(secret, "***")
    return text


def _parse_problem(exc: Exception) -> str:
    """libpq's parse error without anything it quotes (its words before a quote or
    a colon: "invalid percent-encoded token", "unterminated quoted string ...")."""
    first = (str(exc).strip().splitlines() or [""])[0]
    words = re.split(r"[\"':]", first, maxsplit=1)[0].strip()
    return words if re.fullmatch(r"[A-Za-z /=-]{3,120}", words) else "malformed"


@hookimpl
def ctxpolicy_register_state_stores(register):  # type: ignore[no-untyped-def]
    register(PostgresStateStore)
