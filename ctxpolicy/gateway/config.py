"""What ``ctxpolicy serve`` was started with (:class:`GatewayConfig`), apart from the app
so the modules that read it never import the app."""

from __future__ import annotations

import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # pragma: no cover
    from ctxpolicy.policy.models import Policy

__all__ = ["HTTP_IMPLS", "LOOP_IMPLS", "GatewayConfig", "server_impls"]


@dataclass
class GatewayConfig:
    """What ``ctxpolicy serve`` was started with."""

    policies: Mapping[str, Policy]
    upstream: str
    anthropic_upstream: str | None = None
    default_agent: str | None = None
    recall: bool = False
    recall_rounds: int = 4
    stream_usage: bool = True  # ask OpenAI-style upstreams for the usage chunk
    #: server-side key sent to ``upstream`` (and to Anthropic paths when there is no
    #: ``anthropic_upstream``) instead of the client's credential
    api_key: str | None = field(default=None, repr=False)
    #: server-side key sent to ``anthropic_upstream``
    anthropic_api_key: str | None = field(default=None, repr=False)
    #: gateway tokens a client must present (none: any credential is a tenant)
    client_tokens: tuple[str, ...] = field(default=(), repr=False)
    #: more request headers holding a client's session id (before the built-in ones)
    session_headers: tuple[str, ...] = ()
    max_body_bytes: int = 32 * 1024 * 1024
    max_sessions: int = 4096
    #: engine processes per worker (0: the engine in the worker's threads); a
    #: conversation moves to one at its first heavy step (ctxpolicy.calls.processes)
    engine_processes: int = 0
    #: a directory: each conversation's requests recorded as a trace (``record=``)
    record: str | None = None
    timeout: float = 600.0
    secret: bytes = field(default=b"", repr=False)
    #: serve ``/dashboard`` (gateway/dashboard.py)
    dashboard: bool = False
    #: a file: every session's events appended as JSON lines (``ctxpolicy report``)
    events: str | None = None


#: uvicorn's HTTP parsers and event loops ``ctxpolicy serve`` can run on, fastest first:
#: ``auto`` takes the first one installed (httptools and uvloop come with the gateway
#: extra; h11 and asyncio always work).
HTTP_IMPLS = ("httptools", "h11")
LOOP_IMPLS = ("uvloop", "asyncio")


def server_impls(http: str = "auto", loop: str = "auto") -> tuple[str, str]:
    """The HTTP parser and event loop to run (``auto``: the fastest installed); a named
    one that is not installed is a :class:`ValueError` saying how to get it."""
    import importlib.util

    def pick(choice: str, impls: tuple[str, ...], what: str) -> str:
        def usable(name: str) -> bool:
            if name in ("h11", "asyncio"):
                return name == "asyncio" or importlib.util.find_spec("h11") is not None
            if name == "uvloop" and sys.platform == "win32":  # pragma: no cover
                return False
            return importlib.util.find_spec(name) is not None

        if choice == "auto":
            return next(n for n in impls if usable(n))
        if choice not in impls:
            raise ValueError(f"unknown {what} {choice!r}; one of auto, {', '.join(impls)}")
        if not usable(choice):
            raise ValueError(
                f"the {what} {choice!r} is not installed (pip install {choice}, or "
                "the gateway extra)"
            )
        return choice

    return pick(http, HTTP_IMPLS, "HTTP parser"), pick(loop, LOOP_IMPLS, "event loop")
