"""One :class:`~ctxpolicy.Session` per (agent, conversation), bounded, least recently used out.

A session is created from the agent's resolved policy with the policy's own state store
(the embedded sqlite default, or ``state: {store: postgres}`` for a fleet), so a
conversation evicted here, or served by another worker, resumes from its stored state.
Requests of one conversation are serialised by a per-conversation asyncio lock: each
call sees the state the previous call left.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import threading
from collections import OrderedDict
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # pragma: no cover
    from ctxpolicy.engine import Session
    from ctxpolicy.policy.models import Policy

__all__ = ["SessionPool"]


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
    ) -> None:
        self.policies = dict(policies)
        # a directory (always: never one file for every conversation), a trace each
        self.record = record if not record or record.endswith(("/", os.sep)) else record + os.sep
        self.max_sessions = max(1, max_sessions)
        self._on_event = on_event
        #: agent -> the ``on_event`` of its sessions (the dashboard's), else ``on_event``
        self._observe = observe
        self._sessions: OrderedDict[tuple[str, str], Session] = OrderedDict()
        self._locks: dict[tuple[str, str], asyncio.Lock] = {}
        self._guard = threading.Lock()

    @property
    def agents(self) -> list[str]:
        return sorted(self.policies)

    def lock(self, agent: str, conv: str) -> asyncio.Lock:
        key = (agent, conv)
        lk = self._locks.get(key)
        if lk is None:
            lk = self._locks[key] = asyncio.Lock()
        return lk

    def peek(self, agent: str, conv: str) -> Session | None:
        """The open session of the conversation, or None (then :meth:`get` opens it)."""
        key = (agent, conv)
        with self._guard:
            s = self._sessions.get(key)
            if s is not None:
                self._sessions.move_to_end(key)
            return s

    def get(self, agent: str, conv: str) -> Session:
        """The open session of the conversation, or a new one resuming its stored state."""
        from ctxpolicy.engine import Session

        key = (agent, conv)
        with self._guard:
            s = self._sessions.get(key)
            if s is not None:
                self._sessions.move_to_end(key)
                return s
        on_event = self._observe(agent) if self._observe is not None else self._on_event
        s = Session(self.policies[agent], conv_id=conv, on_event=on_event, record=self.record)
        evicted: list[Session] = []
        with self._guard:
            other = self._sessions.get(key)
            if other is not None:  # created meanwhile by another thread
                evicted.append(s)
                s = other
            else:
                self._sessions[key] = s
            while len(self._sessions) > self.max_sessions:
                old_key, old = self._sessions.popitem(last=False)
                lk = self._locks.get(old_key)
                if lk is not None and not lk.locked():
                    self._locks.pop(old_key, None)
                evicted.append(old)
        for e in evicted:
            _close(e)
        return s

    def close(self) -> None:
        with self._guard:
            sessions = list(self._sessions.values())
            self._sessions.clear()
        for s in sessions:
            _close(s)


def _close(s: Session) -> None:
    with contextlib.suppress(Exception):  # a store failing to close is not fatal
        s.close()
