"""Shared helpers of the SDK adapters: optional imports, sessions, the retry loop."""

from __future__ import annotations

import importlib
from collections.abc import Awaitable, Callable, Mapping, Sequence
from types import ModuleType
from typing import TYPE_CHECKING, Any, TypeVar, cast

from ctxpolicy._install import extra_hint
from ctxpolicy.calls.driver import CallDriver, off_loop
from ctxpolicy.calls.pool import conversation_key
from ctxpolicy.conversation.messages import call_arguments
from ctxpolicy.wire.base import is_given, json_args, parse_args, to_plain

__all__ = [
    "Proxy",
    "acall_with_retry",
    "as_session",
    "call_args",
    "call_with_retry",
    "conversation_key",
    "converted",
    "is_async_callable",
    "is_given",
    "json_args",
    "lazy_class",
    "parse_args",
    "recall_docs",
    "require",
    "to_plain",
]

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
    from ctxpolicy.calls.processes import PlacedSession, RemoteSession

    if isinstance(session, Session | RemoteSession | PlacedSession):
        if conv_id is not None and session.conv_id != conv_id:
            raise ValueError(
                f"the session is conversation {session.conv_id!r}, not conv_id={conv_id!r}"
            )
        if "record" in options:
            raise ValueError(
                "record= makes a new session record its trace; pass it to "
                "ctxpolicy.Session(..., record=PATH) when the session is made here"
            )
        return session  # a RemoteSession or PlacedSession acts as one
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
    raises :class:`~ctxpolicy.ContextOverflowError` once its retries are used up
    (:class:`ctxpolicy.calls.CallDriver`).
    """
    driver = CallDriver(session, catch=catch)
    return driver.call(cast(Sequence[Message], messages), _tools(tools), send)


async def acall_with_retry(
    session: Session,
    messages: Sequence[Mapping[str, Any]],
    tools: Sequence[Mapping[str, Any]] | None,
    send: Callable[[list[Message]], Awaitable[T]],
    *,
    catch: tuple[type[BaseException], ...] = (Exception,),
) -> T:
    """Async twin of :func:`call_with_retry`: the engine runs in a worker thread."""
    driver = CallDriver(session, catch=catch)
    return await driver.acall(cast(Sequence[Message], messages), _tools(tools), send)


#: A request of at least this many messages (or items) is converted to engine messages
#: in a worker thread by the async adapters: converting a long history (tens of
#: milliseconds for thousands of messages) would hold the event loop.
LONG_REQUEST = 200


async def converted(items: Sequence[Any], convert: Callable[[], T]) -> T:
    """``convert()`` (the engine messages of ``items``): in a worker thread when the
    request is long (:data:`LONG_REQUEST`), here otherwise (a hop costs more than a
    short conversion)."""
    if len(items) >= LONG_REQUEST:
        return await off_loop(convert)
    return convert()


def _tools(tools: Sequence[Mapping[str, Any]] | None) -> list[dict[str, Any]] | None:
    return None if tools is None else cast(list[dict[str, Any]], list(tools))


def is_async_callable(fn: Any) -> bool:
    """True for coroutine functions, also behind the SDKs' ``functools.wraps`` decorators."""
    import inspect

    try:
        return inspect.iscoroutinefunction(fn) or inspect.iscoroutinefunction(inspect.unwrap(fn))
    except Exception:  # pragma: no cover - odd callables
        return False


def call_args(call: Mapping[str, Any]) -> Any:
    """A tool call's arguments parsed from their JSON text (``{}`` when they are not JSON)."""
    import json

    try:
        return json.loads(call_arguments(call) or "{}")
    except ValueError:
        return {}


def recall_docs() -> dict[str, str]:
    """The descriptions of the recall tools (``ctx_recall``, ``ctx_search``) by name,
    for a framework's own tool objects."""
    from ctxpolicy.snapshots.recall import recall_tools

    return {s["function"]["name"]: s["function"]["description"] for s in recall_tools()}


def lazy_class(module: str, name: str, make: Callable[[], type]) -> Callable[[str], Any]:
    """A module ``__getattr__`` that builds the class ``name`` with ``make`` on its first
    access (a class that subclasses a framework's base: importing the module never
    needs the framework)."""
    made: list[type] = []

    def getattr_(attr: str) -> Any:
        if attr == name:
            if not made:
                made.append(make())
            return made[0]
        raise AttributeError(f"module {module!r} has no attribute {attr!r}")

    return getattr_


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
