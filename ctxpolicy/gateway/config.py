"""What ``ctxpolicy serve`` was started with (:class:`GatewayConfig`), apart from the app
so the modules that read it never import the app."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # pragma: no cover
    from ctxpolicy.policy.models import Policy

__all__ = ["GatewayConfig"]


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
