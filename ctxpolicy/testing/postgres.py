"""A real, throw-away PostgreSQL server for tests (never a mock).

:class:`PostgresServer` runs ``initdb`` into a temporary directory and ``pg_ctl
start`` on a free local port (TCP on 127.0.0.1 only, password authentication),
and removes everything on :meth:`~PostgresServer.stop`. The binaries come from
``pg_config --bindir`` (else ``/usr/lib/postgresql/*/bin``). ``initdb`` and the
server refuse to run as root, so under root they run as the ``postgres`` user
(``runuser``) in a directory that user owns. Starting takes about three seconds.

The test suite uses it through the ``postgres_server`` fixture (tests/conftest.py);
``make test`` installs PostgreSQL with apt-get when ``pg_config`` is missing.
"""

from __future__ import annotations

import contextlib
import glob
import os
import pwd
import secrets
import shutil
import socket
import subprocess
import tempfile
from dataclasses import dataclass, field

__all__ = ["PostgresServer", "PostgresUnavailable", "find_bindir"]


class PostgresUnavailable(RuntimeError):
    """PostgreSQL is not installed, or the server did not start (reason in the message)."""


def find_bindir() -> str:
    """Directory holding ``initdb`` and ``pg_ctl``; PostgresUnavailable if none."""
    candidates = []
    with contextlib.suppress(OSError, subprocess.SubprocessError):
        out = subprocess.run(
            ["pg_config", "--bindir"], capture_output=True, text=True, timeout=10, check=True
        )
        candidates.append(out.stdout.strip())
    candidates.extend(sorted(glob.glob("/usr/lib/postgresql/*/bin"), reverse=True))
    for d in candidates:
        if os.path.isfile(os.path.join(d, "initdb")) and os.path.isfile(os.path.join(d, "pg_ctl")):
            return d
    raise PostgresUnavailable(
        "PostgreSQL server binaries not found (no initdb/pg_ctl via `pg_config --bindir` "
        "or /usr/lib/postgresql/*/bin); `make test` installs them with apt-get"
    )


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class PostgresServer:
    """One PostgreSQL cluster in a temporary directory; ``dsn`` once started."""

    user: str = "ctxpolicy"
    password: str = field(default_factory=lambda: secrets.token_hex(12))
    port: int = 0
    base: str = ""
    bindir: str = ""
    _as_postgres: bool = False

    @property
    def dsn(self) -> str:
        return (
            f"postgresql://{self.user}:{self.password}@127.0.0.1:{self.port}/postgres"
            "?connect_timeout=10"
        )

    @property
    def data(self) -> str:
        return os.path.join(self.base, "data")

    def _run(self, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
        cmd = list(args)
        if self._as_postgres:
            cmd = ["runuser", "-u", "postgres", "--", *cmd]
        return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, check=False)

    def start(self) -> PostgresServer:
        self.bindir = find_bindir()
        self._as_postgres = os.geteuid() == 0
        self.base = tempfile.mkdtemp(prefix="ctxpolicy-pg-")
        try:
            if self._as_postgres:
                try:
                    pw = pwd.getpwnam("postgres")
                except KeyError:
                    raise PostgresUnavailable(
                        "running as root but there is no `postgres` user to run initdb as"
                    ) from None
                os.chown(self.base, pw.pw_uid, pw.pw_gid)
            pwfile = os.path.join(self.base, "pwfile")
            with open(pwfile, "w") as fh:
                fh.write(self.password + "\n")
            if self._as_postgres:
                os.chown(pwfile, pw.pw_uid, pw.pw_gid)
            init = self._run(
                os.path.join(self.bindir, "initdb"),
                "-D",
                self.data,
                "-U",
                self.user,
                f"--pwfile={pwfile}",
                "--auth=scram-sha-256",
                "--encoding=UTF8",
                "--no-sync",
            )
            os.unlink(pwfile)
            if init.returncode != 0:
                raise PostgresUnavailable(f"initdb failed: {init.stderr.strip()[-800:]}")
            self._start_on_free_port()
        except BaseException:
            self.stop()
            raise
        return self

    def _start_on_free_port(self) -> None:
        log = os.path.join(self.base, "server.log")
        last = ""
        for _ in range(3):  # another process may take the port between probe and bind
            self.port = _free_port()
            opts = (
                f"-p {self.port} -k {self.base} -c listen_addresses=127.0.0.1 "
                "-c fsync=off -c full_page_writes=off -c max_connections=50"
            )
            res = self._run(
                os.path.join(self.bindir, "pg_ctl"),
                "-D",
                self.data,
                "-l",
                log,
                "-o",
                opts,
                "-w",
                "-t",
                "60",
                "start",
            )
            if res.returncode == 0:
                return
            with contextlib.suppress(OSError), open(log) as fh:
                last = fh.read()[-800:]
            last = last or res.stderr.strip()[-800:]
        raise PostgresUnavailable(f"PostgreSQL did not start: {last}")

    def stop(self) -> None:
        """Stop the server (immediately: the data is thrown away) and remove its files."""
        if self.base and os.path.isdir(self.data) and self.bindir:
            self._run(
                os.path.join(self.bindir, "pg_ctl"),
                "-D",
                self.data,
                "-m",
                "immediate",
                "-w",
                "stop",
                timeout=60,
            )
        if self.base:
            shutil.rmtree(self.base, ignore_errors=True)
            self.base = ""

    def __enter__(self) -> PostgresServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
