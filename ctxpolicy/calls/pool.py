"""The one session pool of every front end: sessions by (agent, tenant, conversation).

A :class:`SessionPool` keeps at most ``max_sessions`` sessions open (least recently
used closed first); a conversation evicted here resumes from its stored state when it
comes back. A conversation in the middle of a call (its :meth:`SessionPool.lock` held, or
inside :meth:`SessionPool.using`) is never evicted: the pool then stays over ``max_sessions`` until the call ends. The sessions of a pool share one state store per store location (the
policy's ``state:`` store and options), so the store's bounded connection pool
(``state.options.pool_size``) bounds the connections of every open conversation
together: with PostgreSQL, N open conversations use at most ``pool_size`` server
connections, and a call that finds them all busy waits for one instead of running in
memory. A ``memory`` store is shared too, and bounded with the pool: it keeps the open
conversations and the ``max_sessions`` most recently evicted ones (an evicted
conversation that comes back soon resumes from it); the state of an older evicted
conversation is dropped (:attr:`SessionPool.released` counts them) and that
conversation starts afresh if it comes back (a durable store resumes it).

Engine processes: ``SessionPool(..., engine_processes=N)`` keeps the sessions in N
worker processes instead (:mod:`ctxpolicy.calls.processes`): a conversation lives in
one of them, chosen by its key, and :meth:`SessionPool.get` returns a
:class:`~ctxpolicy.calls.processes.RemoteSession` that runs each step there, so one
conversation's long history never holds the interpreter lock of the process that
serves the others. Each process opens the policy's store itself; a ``memory`` store
is then one per process (a conversation always comes back to the same process).

Keys: :func:`conversation_key` stores a framework's conversation id under the agent
(and the tenant, when the host has one), so two agents or two tenants on one id never
share a stored state. Thread-safe: the gateway's worker threads and a framework's
threads may open sessions concurrently.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterator, Mapping
from typing import TYPE_CHECKING, Any

from ctxpolicy.calls.processes import heavy_limits

if TYPE_CHECKING:  # pragma: no cover
    from ctxpolicy.calls.processes import EngineProcesses
    from ctxpolicy.components import StateStore
    from ctxpolicy.engine import Session
    from ctxpolicy.policy.models import Policy

__all__ = ["Key", "SessionPool", "conversation_key", "resolve_policy"]

#: ``(agent, tenant, conversation)``; tenant ``""`` when the host has none
Key = tuple[str, str, str]
MAX_SESSIONS = 1024
#: the tenant part of a private conversation's key (never a real tenant's)
_PRIVATE = "\x00private"


def conversation_key(agent: str, conv_id: str, tenant: str = "") -> str:
    """The id under which a front end stores the conversation ``conv_id`` of ``agent``
    (of ``tenant``, when given).

    ``"<agent>/<conv_id>"``, or ``"<agent>@<tenant>/<conv_id>"``: two agents or two
    tenants on one conversation id never share a state or a snapshot folder
    (docs/state.md). Agent names never contain ``/`` or ``@`` and tenants never
    contain ``/``, so the key is injective: equal keys only for equal parts.
    """
    if not isinstance(conv_id, str) or not conv_id:
        raise ValueError(f"a conversation id must be a non-empty string, not {conv_id!r}")
    if "/" in agent or "@" in agent:
        raise ValueError(f"agent name {agent!r} must not contain '/' or '@'")
    if "/" in tenant:
        raise ValueError("a tenant must not contain '/'")
    return f"{agent}@{tenant}/{conv_id}" if tenant else f"{agent}/{conv_id}"


def stored_under_key(agent: str, tenant: str, conversation: str) -> str:
    """The pool's default ``stored_id``: :func:`conversation_key`."""
    return conversation_key(agent, conversation, tenant)


def resolve_policy(
    policy: Any, agent: str = "default", *, who: str = "this front end", per: str = "conversation"
) -> Policy:
    """A resolved policy from a policy object or a policy file (``agent`` names the
    agent in it); a :class:`~ctxpolicy.Session` is refused (a pool makes one per
    conversation)."""
    from ctxpolicy.engine import Session
    from ctxpolicy.policy.models import Policy

    if isinstance(policy, Policy):
        return policy
    if isinstance(policy, Session):
        raise TypeError(
            f"{who} makes one session per {per}: pass a policy (object or file), not a Session"
        )
    if isinstance(policy, str) or hasattr(policy, "__fspath__"):
        from ctxpolicy import load_policy

        return load_policy(policy, agent=agent)
    raise TypeError(f"expected a Policy or a policy file path, not {type(policy).__name__}")


class _Unavailable:
    """What a session of the pool loads from when the shared store cannot be opened:
    the session reports ``state.unavailable`` with the reason and runs in memory; the
    pool tries the store again for the next session it opens."""

    name = "unavailable"

    def __init__(self, error: str) -> None:
        self.error = error

    def load(self, conv_id: str) -> Any:
        from ctxpolicy.components import StateStoreError

        raise StateStoreError(self.error)

    def close(self) -> None:
        pass


class SessionPool:
    """Open sessions by ``(agent, tenant, conversation)``, at most ``max_sessions``.

    ``policies`` is one resolved policy (the pool's only agent) or ``{agent: policy}``.
    ``stored_id(agent, tenant, conversation)`` is the conversation id a session is
    stored under (default :func:`conversation_key`). ``session_options`` go to every
    :class:`~ctxpolicy.Session` (``on_event``, ``record``, ``env``, ``summarizer`` …);
    ``state_store=`` gives every session that store instead of the policy's (not
    closed by the pool). ``engine_processes`` > 0 runs the sessions in that many worker
    processes (the session options must then be picklable; ``on_event`` and
    ``events_for`` stay in this process and get the events after each step): a
    conversation runs in this process until a step of at least ``heavy`` =
    ``(messages, characters)`` (default :func:`~ctxpolicy.calls.processes.heavy_limits`)
    moves it to its engine process, where it stays.
    """

    def __init__(
        self,
        policies: Policy | Mapping[str, Policy],
        *,
        max_sessions: int = MAX_SESSIONS,
        stored_id: Callable[[str, str, str], str] = stored_under_key,
        events_for: Callable[[str], Callable[[dict[str, Any]], None]] | None = None,
        engine_processes: int = 0,
        heavy: tuple[int, int] | None = None,
        **session_options: Any,
    ) -> None:
        if isinstance(policies, Mapping):
            self.policies: dict[str, Policy] = dict(policies)
        else:
            self.policies = {policies.agent: policies}
        if not self.policies:
            raise ValueError("a session pool needs at least one policy")
        self.max_sessions = max(1, int(max_sessions))
        self.stored_id = stored_id
        self._given_store: StateStore | None = session_options.pop("state_store", None)
        self.options = session_options
        #: agent -> the ``on_event`` of that agent's sessions (instead of ``on_event``)
        self.events_for = events_for
        self._sessions: OrderedDict[Key, Session] = OrderedDict()
        self._locks: dict[Key, asyncio.Lock] = {}
        #: key -> the number of threads using its session (:meth:`using`)
        self._users: dict[Key, int] = {}
        self._stores: dict[str, StateStore] = {}
        self._guard = threading.Lock()
        self._store_guard = threading.Lock()
        self._closed = False
        #: key -> (memory store, stored id) of the open conversations of a memory store
        self._in_memory: dict[Key, tuple[Any, str]] = {}
        #: the same of evicted ones still kept, least recently evicted first
        self._evicted: OrderedDict[Key, tuple[Any, str]] = OrderedDict()
        #: conversations whose state an eviction dropped from a ``memory`` store
        self.released = 0
        #: called with each session the pool closes (eviction or close)
        self.on_close: Callable[[Session], None] | None = None
        #: the worker processes of the sessions (None: sessions in this process)
        self.processes: EngineProcesses | None = None
        #: ``(messages, characters)``: a step of at least either moves its conversation
        #: to an engine process (:class:`~ctxpolicy.calls.processes.PlacedSession`)
        self.heavy = heavy or heavy_limits()
        if engine_processes > 0:
            self.processes = self._processes(engine_processes)

    def _processes(self, n: int) -> EngineProcesses:
        from ctxpolicy.calls.processes import EngineProcesses

        if self._given_store is not None:
            raise ValueError(
                "a state_store object cannot be shared with engine processes: give the "
                "policy's state: store (sqlite, postgres) instead"
            )
        options = {k: v for k, v in self.options.items() if k != "on_event"}
        spec = {
            "policies": self.policies,
            "max_sessions": self.max_sessions,
            "stored_id": self.stored_id,
            "options": options,
        }
        processes = EngineProcesses(
            n, spec, on_event=self.options.get("on_event"), events_for=self.events_for
        )
        processes.start()  # in the background: the first calls do not wait for imports
        return processes

    # -- policies ------------------------------------------------------------------
    @property
    def agents(self) -> list[str]:
        return sorted(self.policies)

    @property
    def policy(self) -> Policy:
        """The policy of a one-agent pool."""
        if len(self.policies) != 1:
            raise ValueError(f"this pool serves several agents: {self.agents}")
        return next(iter(self.policies.values()))

    def _agent(self, agent: str | None) -> str:
        if agent is None:
            return self.policy.agent
        if agent not in self.policies:
            raise KeyError(f"no policy for agent {agent!r} (known: {self.agents})")
        return agent

    # -- sessions ------------------------------------------------------------------
    def _key(self, conversation: str, *, agent: str | None = None, tenant: str = "") -> Key:
        return (self._agent(agent), tenant, conversation)

    def peek(
        self, conversation: str, *, agent: str | None = None, tenant: str = ""
    ) -> Session | None:
        """The open session of the conversation, or None (then :meth:`get` opens it)."""
        key = self._key(conversation, agent=agent, tenant=tenant)
        with self._guard:
            s = self._sessions.get(key)
            if s is not None:
                self._sessions.move_to_end(key)
            return s

    def get(self, conversation: str, *, agent: str | None = None, tenant: str = "") -> Session:
        """The open session of the conversation, or a new one resuming its stored state.

        Opening loads the stored state (a database round trip): an async host calls
        this through :func:`ctxpolicy.calls.off_loop`.
        """
        from ctxpolicy.engine import Session

        key = self._key(conversation, agent=agent, tenant=tenant)
        found = self.peek(conversation, agent=key[0], tenant=tenant)
        if found is not None:
            return found
        conv_id = self.stored_id(key[0], tenant, conversation)
        policy = self.policies[key[0]]
        store = self._store_for(policy)
        forget = store is not self._given_store and callable(getattr(store, "forget", None))
        in_memory = (store, conv_id) if forget else None
        if self.processes is not None:
            from ctxpolicy.calls.processes import PlacedSession, RemoteSession

            def here() -> Session:
                return Session(policy, conv_id=conv_id, state_store=store, **self._options(key[0]))

            remote = RemoteSession(self.processes, key, conv_id=conv_id)
            # a memory store's state cannot follow a conversation to another process:
            # one with state here stays here
            fresh = not forget or store.load(conv_id).version == 0
            placed: Any = PlacedSession(
                here, remote, movable=not forget, fresh=fresh, limits=self.heavy
            )
            return self._keep(key, placed, in_memory)
        s = Session(policy, conv_id=conv_id, state_store=store, **self._options(key[0]))
        return self._keep(key, s, in_memory)

    def private(self, token: str, *, agent: str | None = None) -> Session:
        """A conversation that no other caller, process or worker can resume: in
        memory only, a random id, its own snapshot folder; kept here under ``token``
        (one invocation of a framework without a thread id)."""
        from ctxpolicy.engine import Session

        key = (self._agent(agent), _PRIVATE, str(token))
        with self._guard:
            found = self._sessions.get(key)
            if found is not None:
                self._sessions.move_to_end(key)
                return found
        if self.processes is not None:
            from ctxpolicy.calls.processes import PlacedSession, RemoteSession

            def here() -> Session:
                return Session(self.policies[key[0]], **self._options(key[0]))

            remote = RemoteSession(self.processes, (key[0], "", key[2]), private=True)
            placed: Any = PlacedSession(here, remote, movable=False, fresh=True, limits=self.heavy)
            return self._keep(key, placed)
        return self._keep(key, Session(self.policies[key[0]], **self._options(key[0])))

    def close_private(self, token: str, *, agent: str | None = None) -> bool:
        """Close the :meth:`private` conversation ``token`` now (False: none open)."""
        return self.discard(str(token), agent=agent, tenant=_PRIVATE)

    def _options(self, agent: str) -> dict[str, Any]:
        if self.events_for is None:
            return self.options
        return {**self.options, "on_event": self.events_for(agent)}

    def _keep(self, key: Key, s: Session, in_memory: tuple[Any, str] | None = None) -> Session:
        evicted: list[Session] = []
        with self._guard:
            other = self._sessions.get(key)
            if other is not None:  # opened meanwhile by another thread
                evicted.append(s)
                s = other
            else:
                self._sessions[key] = s
                if in_memory is not None:
                    self._evicted.pop(key, None)  # open again
                    self._in_memory[key] = in_memory
            evicted += self._trim(keep=key)
        for e in evicted:
            self._close(e)
        return s

    def _trim(self, *, keep: Key) -> list[Session]:
        """Evict least recently used sessions down to ``max_sessions`` (under the guard)
        and return them to close. A session whose conversation lock is held is in the
        middle of a call: it is never evicted (it counts as just used and moves to the
        end), so the pool may stay over ``max_sessions`` until those calls end; the next
        session opened trims it again. ``keep`` (the session being handed out) stays."""
        evicted: list[Session] = []
        candidates = len(self._sessions)
        while len(self._sessions) > self.max_sessions and candidates > 0:
            candidates -= 1
            old_key = next(iter(self._sessions))
            if old_key == keep or self._in_use(old_key):
                self._sessions.move_to_end(old_key)
                continue
            old = self._sessions.pop(old_key)
            self._locks.pop(old_key, None)
            evicted.append(old)
            self._release(old_key)
        return evicted

    def _locked(self, key: Key) -> bool:
        """The conversation's lock is held, or was just released to a waiting call that
        has not run yet (dropping the lock then would let a later call of the
        conversation take a new one and run beside it)."""
        lk = self._locks.get(key)
        return lk is not None and (lk.locked() or bool(getattr(lk, "_waiters", None)))

    def _in_use(self, key: Key) -> bool:
        """A call of the conversation is under way (under the guard)."""
        return self._locked(key) or key in self._users

    @contextlib.contextmanager
    def using(
        self, conversation: str, *, agent: str | None = None, tenant: str = ""
    ) -> Iterator[None]:
        """Marks the conversation in use for the block (a thread's step, as holding its
        :meth:`lock` does for an async call): its session is not evicted meanwhile."""
        key = self._key(conversation, agent=agent, tenant=tenant)
        with self._guard:
            self._users[key] = self._users.get(key, 0) + 1
        try:
            yield
        finally:
            with self._guard:
                left = self._users.pop(key) - 1
                if left:
                    self._users[key] = left

    def _release(self, key: Key) -> None:
        """An evicted conversation of a shared ``memory`` store: kept among the
        ``max_sessions`` most recently evicted; the state of the oldest past them is
        dropped (under the guard: a session of that key opened after it loads nothing)."""
        found = self._in_memory.pop(key, None)
        if found is None:
            return
        self._evicted[key] = found
        while len(self._evicted) > self.max_sessions:
            _, (store, conv_id) = self._evicted.popitem(last=False)
            with contextlib.suppress(Exception):
                if store.forget(conv_id):
                    self.released += 1

    def discard(self, conversation: str, *, agent: str | None = None, tenant: str = "") -> bool:
        """Close the open session of the conversation now (its state stays in the store);
        False when none is open."""
        key = self._key(conversation, agent=agent, tenant=tenant)
        with self._guard:
            s = self._sessions.pop(key, None)
            if s is None:
                return False
            if not self._locked(key):
                self._locks.pop(key, None)
            self._release(key)
        self._close(s)
        return True

    def lock(
        self, conversation: str, *, agent: str | None = None, tenant: str = ""
    ) -> asyncio.Lock:
        """The asyncio lock that serialises one conversation's calls (an async host
        holds it around a whole call, so each call sees the state the previous left)."""
        key = self._key(conversation, agent=agent, tenant=tenant)
        with self._guard:
            lk = self._locks.get(key)
            if lk is None:
                lk = self._locks[key] = asyncio.Lock()
            return lk

    def __len__(self) -> int:
        with self._guard:
            return len(self._sessions)

    def sessions(self) -> list[Session]:
        """The open sessions, least recently used first."""
        with self._guard:
            return list(self._sessions.values())

    def items(self) -> list[tuple[Key, Session]]:
        """``(key, session)`` of the open sessions, least recently used first."""
        with self._guard:
            return list(self._sessions.items())

    def conversations(self) -> list[str]:
        """The conversation part of the open sessions' keys, least recently used first."""
        with self._guard:
            return [conv for (_, _, conv) in self._sessions]

    # -- the shared state store ----------------------------------------------------
    def state_store(self, agent: str | None = None) -> StateStore | None:
        """The store the sessions of ``agent`` share, opened on first use (None: it
        cannot be opened now)."""
        store = self._store_for(self.policies[self._agent(agent)])
        return None if isinstance(store, _Unavailable) else store

    def _store_for(self, policy: Policy) -> Any:
        if self._given_store is not None:
            return self._given_store
        from ctxpolicy.components import StateStoreError
        from ctxpolicy.state import open_state_store, state_home

        env = self.options.get("env")
        where = json.dumps(
            [policy.state.store, policy.state.options, state_home(policy, env)],
            sort_keys=True,
            default=str,
        )
        with self._store_guard:
            store = self._stores.get(where)
            if store is not None:
                return store
            try:
                store = open_state_store(policy, env=env)
            except (StateStoreError, ValueError) as exc:
                return _Unavailable(str(exc))
            self._stores[where] = store
            return store

    # -- closing -------------------------------------------------------------------
    def _close(self, s: Session) -> None:
        if self.on_close is not None:
            with contextlib.suppress(Exception):
                self.on_close(s)
        with contextlib.suppress(Exception):  # a store failing to close is not fatal
            s.close()

    def close(self) -> None:
        """Close every open session and the stores the pool opened."""
        with self._guard:
            sessions = list(self._sessions.values())
            self._sessions.clear()
            self._locks.clear()
            self._in_memory.clear()
            self._evicted.clear()
        for s in sessions:
            if self.processes is None:
                self._close(s)
            elif self.on_close is not None:  # the processes close their own sessions
                with contextlib.suppress(Exception):
                    self.on_close(s)
        with self._store_guard:
            stores = list(self._stores.values())
            self._stores.clear()
        for store in stores:
            with contextlib.suppress(Exception):
                store.close()
        if self.processes is not None:
            self.processes.close()
