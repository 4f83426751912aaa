"""Shared pytest fixtures (keep small; append yours below)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
DATA = REPO / "tests" / "data"

#: A fixed environment for policy tests, so ${...} interpolation is deterministic.
POLICY_ENV = {"HOME": "/home/test", "CTXPOLICY_HOME": "/srv/ctx"}


@pytest.fixture(autouse=True)
def _private_ctxpolicy_home(
    tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every test gets its own ``CTXPOLICY_HOME``: snapshots and the default sqlite
    session state of one test never leak into another (or into ``~/.ctxpolicy``)."""
    monkeypatch.setenv("CTXPOLICY_HOME", str(tmp_path_factory.mktemp("ctxpolicy-home")))


@pytest.fixture(autouse=True)
def _terminal_width_unset(monkeypatch: pytest.MonkeyPatch) -> None:
    """Command output is laid out as when piped (no ``COLUMNS``/``LINES``), whatever the
    runner: pytest-xdist's workers set ``COLUMNS=80``, which narrowed tables."""
    monkeypatch.delenv("COLUMNS", raising=False)
    monkeypatch.delenv("LINES", raising=False)


@pytest.fixture
def policy_env() -> dict[str, str]:
    return dict(POLICY_ENV)


@pytest.fixture
def register_plugin() -> Iterator[Callable[[object, str], str]]:
    """``register_plugin(obj, name)`` for the real registry; unregistered after the test."""
    from ctxpolicy import plugins

    names: list[str] = []

    def _register(obj: object, name: str) -> str:
        names.append(plugins.register_plugin(obj, name=name))
        return names[-1]

    yield _register
    for name in reversed(names):
        plugins.unregister_plugin(name)


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[object]:
    """A real PostgreSQL server for the whole run (ctxpolicy.testing.postgres).

    Skips with the reason when PostgreSQL cannot start here, but fails under CI
    (``CI`` set), where ``make test`` installs it.
    """
    import os

    from ctxpolicy.testing.postgres import PostgresServer, PostgresUnavailable

    server = PostgresServer()
    try:
        server.start()
    except PostgresUnavailable as exc:
        if os.environ.get("CI"):
            pytest.fail(f"{exc} (CI must run the PostgreSQL tests)")
        pytest.skip(str(exc))
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def no_fact_price() -> Iterator[None]:
    """:func:`tests.engine_helpers.cache_alone` for one test."""
    from tests.engine_helpers import cache_alone

    with cache_alone():
        yield
