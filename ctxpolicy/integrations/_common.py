"""Shared helpers of the SDK adapters: optional imports, sessions, the retry loop."""

from __future__ import annotations

import importlib
from collections.abc import Awaitable, Callable, Mapping, Sequence
from types import ModuleType
from typing import TYPE_CHECKING, Any, TypeVar

from ctxpolicy._install import extra_hint
from ctxpolicy.wire.base import is_given as is_given
from ctxpolicy.wire.base import json_args as json_args
from ctxpolicy.wire.base import parse_args as parse_args
from ctxpolicy.wire.base import to_plain as to_plain

if TYPE_CHECKING:  # pragma: no cover
    from ctxpolicy.engine import Session
    from ctxpolicy.policy.models import Policy

T = TypeVar("T")
Message = dict[str, Any]


def require(module: str, extra: str) -> ModuleType:
    """Import an optional SDK, or fail with the pip command that installs it."""
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        raise ImportError(
            f"ctxpolicy.integrations.{extra} needs the {module!r} package, which is not "
            f"installed: {extra_hint(extra)}"
        ) from exc


def conversation_key(agent: str, conv_id: str) -> str:
    """The id under which an adapter stores the conversation ``conv_id`` of ``agent``.

    Every adapter keys a framework's thread or session id by the agent (the policy's
    ``agent`` name) too, so two agents on one thread never share a state or a
    snapshot folder (docs/state.md). Agent names never contain ``/``, so the key is
    injective: ``conversation_key(a, c) == conversation_key(a2, c2)`` only when both
    parts are equal.
    """
    if not isinstance(conv_id, str) or not conv_id:
        raise ValueError(f"a conversation id must be a non-empty string, not {conv_id!r}")
    if "/" in agent:
        raise ValueError(f"agent name {agent!r} must not contain '/'")
    return f"{agent}/{conv_id}"


def as_session(
    session: Session | Policy | str,
    *,
    agent: str = "default",
    conv_id: str | None = None,
    **options: Any,
) -> Session:
    """A :class:`~ctxpolicy.Session` from a session, a resolved policy or a policy file.

    ``conv_id`` names the conversation whose stored state the new session resumes
    (docs/state.md); a given session must already have that id. ``record=PATH`` (a
    file, or a directory for one file per conversation) records the new session's
    trace (:mod:`ctxpolicy.engine.recorder`).
    """
    from ctxpolicy.engine import Session
    from ctxpolicy.policy.models import Policy

    if conv_id is not None:
        options["conv_id"] = conv_id
    if options.get("record") is None:
        options.pop("record", None)
    if isinstance(session, Session):
        if conv_id is not None and session.conv_id != conv_id:
            raise ValueError(
                f"the session is conversation {session.conv_id!r}, not conv_id={conv_id!r}"
            )
        if "record" in options:
            raise ValueError(
                "record= makes a new session record its trace; pass it to "
                "ctxpolicy.Session(..., record=PATH) when the session is made here"
            )
        return session
    if isinstance(session, Policy):
        return Session(session, **options)
    if isinstance(session, str) or hasattr(session, "__fspath__"):
        from ctxpolicy import load_policy

        return Session(load_policy(session, agent=agent), **options)
    raise TypeError(
        f"expected a ctxpolicy.Session, a Policy or a policy file path, not {type(session).__name__}"
    )


def call_with_retry(
    session: Session,
    messages: Sequence[Mapping[str, Any]],
    tools: Sequence[Mapping[str, Any]] | None,
    send: Callable[[list[Message]], T],
    *,
    catch: tuple[type[BaseException], ...] = (Exception,),
) -> T:
    """``send(session.prepare(messages))``; on a context overflow, reactive retry.

    An exception of type ``catch`` is shown to ``session.on_error``: not an overflow
    re-raises it, an overflow retries with the compacted messages, and the session
    raises :class:`~ctxpolicy.ContextOverflowError` once its retries are used up.
    """
    prepared = session.prepare(messages, tools=tools)
    while True:
        try:
            return send(prepared)
        except catch as exc:
            retry = session.on_error(exc, messages, tools)
            if retry is None:
                raise
            prepared = retry


async def acall_with_retry(
    session: Session,
    messages: Sequence[Mapping[str, Any]],
    tools: Sequence[Mapping[str, Any]] | None,
    send: Callable[[list[Message]], Awaitable[T]],
    *,
    catch: tuple[type[BaseException], ...] = (Exception,),
) -> T:
    """Async twin of :func:`call_with_retry`."""
    prepared = session.prepare(messages, tools=tools)
    while True:
        try:
            return await send(prepared)
        except catch as exc:
            retry = session.on_error(exc, messages, tools)
            if retry is None:
                raise
            prepared = retry


def is_async_callable(fn: Any) -> bool:
    """True for coroutine functions, also behind the SDKs' ``functools.wraps`` decorators."""
    import inspect

    try:
        return inspect.iscoroutinefunction(fn) or inspect.iscoroutinefunction(inspect.unwrap(fn))
    except Exception:  # pragma: no cover - odd callables
        return False


class Proxy:
    """Delegates every attribute it does not define to the wrapped object."""

    def __init__(self, inner: Any) -> None:
        self._inner = inner

    def __getattr__(self, name: str) -> Any:  # only called for names not found here
        return getattr(object.__getattribute__(self, "_inner"), name)

    def __dir__(self) -> list[str]:
        return sorted(set(dir(type(self))) | set(dir(object.__getattribute__(self, "_inner"))))

    def __repr__(self) -> str:
        return f"<ctxpolicy {type(self).__name__} of {object.__getattribute__(self, '_inner')!r}>"
