"""The gateway's sessions: :class:`ctxpolicy.calls.SessionPool` keyed by (agent, conversation).

A session is created from the agent's resolved policy; the sessions of one store
location share the policy's state store (the embedded sqlite default, or ``state:
{store: postgres}`` for a fleet) and so its bounded connection pool
(``state.options.pool_size``), whatever the number of open conversations. A
conversation evicted here, or served by another worker, resumes from its stored
state. Requests of one conversation are serialised by a per-conversation asyncio
lock: each call sees the state the previous call left. The conversation id the
gateway computes (:mod:`.identity`) is already scoped by tenant and agent, so it is
the stored id as it is. With engine processes (``ctxpolicy serve --engine-processes
N``) a conversation moves to one of them at its first heavy step
(:mod:`ctxpolicy.calls.processes`).
"""

from __future__ import annotations

import asyncio
import os
from collections import OrderedDict
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from ctxpolicy.calls.pool import SessionPool as _Pool

if TYPE_CHECKING:  # pragma: no cover
    from ctxpolicy.engine import Session
    from ctxpolicy.policy.models import Policy

__all__ = ["SessionPool"]


def _as_is(agent: str, tenant: str, conversation: str) -> str:
    return conversation


class SessionPool:
    """Sessions by ``(agent, conversation)``; at most ``max_sessions`` kept open."""

    def __init__(
        self,
        policies: Mapping[str, Policy],
        *,
        max_sessions: int = 4096,
        on_event: Callable[[dict[str, Any]], None] | None = None,
        record: str | None = None,
        observe: Callable[[str], Callable[[dict[str, Any]], None]] | None = None,
        engine_processes: int = 0,
    ) -> None:
        # a directory (always: never one file for every conversation), a trace each
        self.record = record if not record or record.endswith(("/", os.sep)) else record + os.sep
        self.pool = _Pool(
            policies,
            max_sessions=max_sessions,
            stored_id=_as_is,
            on_event=on_event,
            events_for=observe,
            record=self.record,
            engine_processes=engine_processes,
        )
        self.policies = self.pool.policies
        self.max_sessions = self.pool.max_sessions

    @property
    def agents(self) -> list[str]:
        return self.pool.agents

    @property
    def open_sessions(self) -> OrderedDict[tuple[str, str], Session]:
        """The open sessions, ``(agent, conversation) → session``, least recently used
        first (a copy)."""
        return OrderedDict(((agent, conv), s) for (agent, _, conv), s in self.pool.items())

    def lock(self, agent: str, conv: str) -> asyncio.Lock:
        return self.pool.lock(conv, agent=agent)

    def peek(self, agent: str, conv: str) -> Session | None:
        """The open session of the conversation, or None (then :meth:`get` opens it)."""
        return self.pool.peek(conv, agent=agent)

    def get(self, agent: str, conv: str) -> Session:
        """The open session of the conversation, or a new one resuming its stored state."""
        return self.pool.get(conv, agent=agent)

    def close(self) -> None:
        self.pool.close()
