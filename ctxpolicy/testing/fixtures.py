"""pytest fixtures for ctxpolicy users and plugin authors.

Available in every test once ctxpolicy is installed (the ``pytest11`` entry point
loads :mod:`ctxpolicy.testing.plugin`, which re-exports these):

* ``ctxpolicy_session(policy, agent="default", **session_kw)`` — a
  :class:`ctxpolicy.Session` from policy text (YAML or TOML, written to a temporary
  file so diagnostics carry a path) or from a path;
* ``make_conversation(rounds=8, seed=0, ...)`` —
  :func:`ctxpolicy.testing.conversations.make_conversation`;
* ``local_llm_server(window=..., script=...)`` — a started
  :class:`ctxpolicy.testing.server.ScriptedLLMServer` (OpenAI-compatible, on
  localhost), closed at the end of the test.

Nothing heavy is imported until a fixture is used.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:  # pragma: no cover
    from ctxpolicy.engine import Session

__all__ = ["ctxpolicy_session", "local_llm_server", "make_conversation", "policy_file"]


def _looks_like_toml(text: str) -> bool:
    for line in text.splitlines():
        s = line.strip()
        if not s or s.startswith("#"):
            continue
        return s.startswith("[") or ("=" in s and ":" not in s.split("=", 1)[0])
    return False


def policy_file(directory: Path, policy: str | os.PathLike[str], *, name: str = "policy") -> Path:
    """A path for ``policy``: the file itself, or its text written under ``directory``."""
    if isinstance(policy, os.PathLike):
        return Path(policy)
    if "\n" not in policy and len(policy) < 4096 and Path(policy).is_file():
        return Path(policy)
    suffix = ".toml" if _looks_like_toml(policy) else ".yaml"
    directory.mkdir(parents=True, exist_ok=True)
    n = 0
    path = directory / f"{name}{suffix}"
    while path.exists():
        n += 1
        path = directory / f"{name}-{n}{suffix}"
    path.write_text(policy, encoding="utf-8")
    return path


@pytest.fixture
def ctxpolicy_session(tmp_path: Path) -> Callable[..., Session]:
    """Factory: ``ctxpolicy_session(policy_text_or_path, agent="default", **kw) -> Session``.

    ``kw`` goes to :class:`ctxpolicy.Session` (``conv_id``, ``summarizer``,
    ``snapshot_store``, ``on_event``, ``env``, ...). An invalid policy raises
    :class:`ctxpolicy.PolicyError` with ``file:line:col`` diagnostics.

    Unless ``env`` is given, the session's environment is ``os.environ`` with
    ``CTXPOLICY_HOME`` and ``HOME`` pointing into the test's ``tmp_path``, so the
    default snapshot store (``${CTXPOLICY_HOME:-~/.ctxpolicy}/snapshots``) and any
    ``~/…`` path write under ``tmp_path``, never into the real home. (A policy with
    an absolute or a relative ``snapshots.path`` writes where it says.)
    """
    from ctxpolicy.engine import Session
    from ctxpolicy.resolve.load import load_policy

    def factory(policy: str | os.PathLike[str], agent: str = "default", **kw: Any) -> Session:
        path = policy_file(tmp_path / "ctxpolicy", policy)
        loaded = load_policy(path, agent=agent)
        kw.setdefault("conv_id", "test")
        if "env" not in kw:
            home = tmp_path / "home"
            kw["env"] = {
                **os.environ,
                "CTXPOLICY_HOME": str(home / ".ctxpolicy"),
                "HOME": str(home),
            }
        return Session(loaded, **kw)

    return factory


@pytest.fixture
def make_conversation() -> Callable[..., list[dict[str, Any]]]:
    """Factory: realistic seeded conversations (see ``ctxpolicy.testing.conversations``)."""
    from ctxpolicy.testing.conversations import make_conversation as build

    return build


@pytest.fixture
def local_llm_server() -> Iterator[Callable[..., Any]]:
    """Factory: ``local_llm_server(window=8192, script=[...]) -> ScriptedLLMServer``.

    The server is started on localhost (``.base_url``, ``.requests``) and stopped
    when the test ends.
    """
    try:
        from ctxpolicy.testing.server import ScriptedLLMServer
    except ImportError as exc:  # pragma: no cover - shipped with ctxpolicy
        pytest.skip(f"ctxpolicy.testing.server is unavailable: {exc}")
    started: list[Any] = []

    def factory(**kw: Any) -> Any:
        server = ScriptedLLMServer(**kw)
        server.__enter__()
        started.append(server)
        return server

    yield factory
    for server in reversed(started):
        server.__exit__(None, None, None)
