"""How one model call goes through a :class:`~ctxpolicy.Session`, for every front end.

The protocol, written once::

    prepared = session.prepare(messages, tools)           # the budgeted request
    response = send(prepared)                             # the host's handler
      on a provider overflow: session.on_error(...) → send again (bounded by the policy)
    session.record_usage(usage of response)               # what the provider counted
    recall round: the model called only ctx_recall/ctx_search → answer them, send again

Each reason to send again is its own small step (like httpx's ``send`` →
``_send_handling_auth`` → ``_send_handling_redirects`` → ``_send_single_request``):
:meth:`CallDriver._recall_rounds` → :meth:`CallDriver._prepared_call` →
:meth:`CallDriver._overflow_retries` → ``send``. :meth:`CallDriver.call` is the sync
form, :meth:`CallDriver.acall` the async one; the async one never runs the engine on
the event loop: every engine call goes through :func:`off_loop`, the one place that
hands it to a worker thread.

Frameworks that call back instead of handing over the call (pydantic-ai's capability
hooks, Google ADK's plugin, the OpenAI Agents SDK's input filter) use
:class:`CallSteps`: ``before_model`` → the prepared messages; ``failed`` → the messages
to send again, or None to give up; ``done`` → usage recorded.

The driver reads a response through a small :class:`ResponseFormat` (its usage, its
tool calls, the engine messages of a tool-results turn); :class:`UsageOnly` is the
format of a host that only records usage.
"""

from __future__ import annotations

import functools
import weakref
from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING, Any, Protocol, TypeVar, runtime_checkable

if TYPE_CHECKING:  # pragma: no cover
    from ctxpolicy.engine import Session

__all__ = [
    "RECALL_NAMES",
    "CallDriver",
    "CallSteps",
    "Message",
    "ResponseFormat",
    "ToolCallRef",
    "UsageOnly",
    "off_loop",
]

R = TypeVar("R")
T = TypeVar("T")
Message = dict[str, Any]
Tools = Sequence[dict[str, Any]] | None
#: one tool call of a response: ``(call id, tool name, arguments)``
ToolCallRef = tuple[str, str, Any]
#: the tools the driver answers itself (ctxpolicy.snapshots.recall's names)
RECALL_NAMES = frozenset({"ctx_recall", "ctx_search"})


@runtime_checkable
class ResponseFormat(Protocol):
    """What the driver needs to read of a provider's response (one per wire format)."""

    def usage(self, response: Any) -> int | None:
        """The prompt tokens the provider counted for this call, None if not given."""
        ...

    def tool_calls(self, response: Any) -> list[ToolCallRef]:
        """The tool calls of the response, in order (empty: a final answer)."""
        ...

    def results_turn(self, response: Any, results: Sequence[tuple[str, str]]) -> list[Message]:
        """The engine messages (OpenAI chat) that continue the conversation after
        ``response``: its assistant turn, then one tool result per ``(call id, text)``."""
        ...


class UsageOnly:
    """A :class:`ResponseFormat` that reads usage with ``read`` and sees no tool calls
    (a host that answers its tools itself)."""

    def __init__(self, read: Callable[[Any], int | None]) -> None:
        self._read = read

    def usage(self, response: Any) -> int | None:
        return self._read(response)

    def tool_calls(self, response: Any) -> list[ToolCallRef]:
        return []

    def results_turn(self, response: Any, results: Sequence[tuple[str, str]]) -> list[Message]:
        raise NotImplementedError("UsageOnly sees no tool calls")


async def off_loop(fn: Callable[..., T], /, *args: Any, **kwargs: Any) -> T:
    """``fn(*args, **kwargs)`` in a worker thread: the one place where an async front
    end hands the engine (prepare, on_error, record_usage, add_tool_result, recall,
    opening a session) off the event loop. Context variables go with it."""
    call = functools.partial(fn, *args, **kwargs)
    try:
        import anyio.to_thread
    except ImportError:  # pragma: no cover - anyio comes with every async SDK we support
        import asyncio

        return await asyncio.to_thread(call)
    return await anyio.to_thread.run_sync(call)


def _tokens(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


class CallDriver:
    """One conversation's model calls: prepare → send → overflow retry → usage → recall.

    ``format`` reads responses (None: usage is not recorded and there are no recall
    rounds); ``recall_rounds`` is how many times the driver answers a response whose
    tool calls are all ``ctx_recall``/``ctx_search`` and sends again (0: never);
    ``catch`` are the exceptions of ``send`` shown to ``session.on_error`` (one that
    is not an overflow is re-raised; the policy's ``on_overflow.retries`` bounds the
    retries, then :class:`~ctxpolicy.ContextOverflowError` is raised).
    """

    def __init__(
        self,
        session: Session,
        *,
        format: ResponseFormat | None = None,
        recall_rounds: int = 0,
        catch: tuple[type[BaseException], ...] = (Exception,),
    ) -> None:
        self.session = session
        self.format = format
        self.recall_rounds = max(0, int(recall_rounds))
        self.catch = catch

    # -- the sync form -------------------------------------------------------------
    def call(
        self, messages: Sequence[Message], tools: Tools, send: Callable[[list[Message]], R]
    ) -> R:
        """The answer of ``send`` for ``messages`` under the session's policy."""
        return self._recall_rounds(list(messages), tools, send)

    def _recall_rounds(
        self, messages: list[Message], tools: Tools, send: Callable[[list[Message]], R]
    ) -> R:
        rounds = 0
        while True:
            response = self._prepared_call(messages, tools, send)
            calls = self._recall_calls(response, rounds)
            if calls is None:
                return response
            messages = self._continued(messages, response, self._answer(calls))
            rounds += 1

    def _prepared_call(
        self, messages: list[Message], tools: Tools, send: Callable[[list[Message]], R]
    ) -> R:
        prepared = self.session.prepare(messages, tools=tools)
        response = self._overflow_retries(messages, tools, prepared, send)
        tokens = self._usage(response)
        if tokens is not None:
            self.session.record_usage(tokens)
        return response

    def _overflow_retries(
        self,
        messages: list[Message],
        tools: Tools,
        prepared: list[Message],
        send: Callable[[list[Message]], R],
    ) -> R:
        while True:
            try:
                return send(prepared)
            except self.catch as exc:
                retry = self.session.on_error(exc, messages, tools)
                if retry is None:
                    raise
                prepared = retry

    # -- the async form: the same steps, every engine call off the event loop -------
    async def acall(
        self,
        messages: Sequence[Message],
        tools: Tools,
        send: Callable[[list[Message]], Awaitable[R]],
    ) -> R:
        """Async twin of :meth:`call`; the engine runs in a worker thread."""
        return await self._arecall_rounds(list(messages), tools, send)

    async def _arecall_rounds(
        self, messages: list[Message], tools: Tools, send: Callable[[list[Message]], Awaitable[R]]
    ) -> R:
        rounds = 0
        while True:
            response = await self._aprepared_call(messages, tools, send)
            calls = self._recall_calls(response, rounds)
            if calls is None:
                return response
            results = await off_loop(self._answer, calls)
            messages = self._continued(messages, response, results)
            rounds += 1

    async def _aprepared_call(
        self, messages: list[Message], tools: Tools, send: Callable[[list[Message]], Awaitable[R]]
    ) -> R:
        prepared = await off_loop(self.session.prepare, messages, tools)
        response = await self._aoverflow_retries(messages, tools, prepared, send)
        tokens = self._usage(response)
        if tokens is not None:
            await off_loop(self.session.record_usage, tokens)
        return response

    async def _aoverflow_retries(
        self,
        messages: list[Message],
        tools: Tools,
        prepared: list[Message],
        send: Callable[[list[Message]], Awaitable[R]],
    ) -> R:
        while True:
            try:
                return await send(prepared)
            except self.catch as exc:
                retry = await off_loop(self.session.on_error, exc, messages, tools)
                if retry is None:
                    raise
                prepared = retry

    # -- decisions shared by both forms (no engine call) ---------------------------
    def _usage(self, response: Any) -> int | None:
        return None if self.format is None else _tokens(self.format.usage(response))

    def _recall_calls(self, response: Any, rounds: int) -> list[ToolCallRef] | None:
        """The calls to answer here, or None when the response goes to the host."""
        if self.format is None or rounds >= self.recall_rounds:
            return None
        calls = self.format.tool_calls(response)
        if not calls or any(name not in RECALL_NAMES for _, name, _ in calls):
            return None
        return calls

    def _answer(self, calls: Sequence[ToolCallRef]) -> list[tuple[str, str]]:
        _, handler = self.session.recall_tool()
        return [(cid, handler(name, args)) for cid, name, args in calls]

    def _continued(
        self, messages: list[Message], response: Any, results: Sequence[tuple[str, str]]
    ) -> list[Message]:
        assert self.format is not None
        return [*messages, *self.format.results_turn(response, results)]


class CallSteps:
    """The driver's steps one at a time, for frameworks that call back.

    One object serves every conversation of a host (each call names its session):

    * :meth:`before_model` — the prepared messages of an attempt (after a deferred
      overflow: ``on_error``'s compacted messages);
    * :meth:`failed` — the messages to send again after ``exc``, or None to give up
      (not an overflow); :meth:`defer` instead remembers an overflow for the next
      :meth:`before_model` (for hosts that retry by calling the hooks again);
    * :meth:`done` — the provider's usage recorded.

    The ``a…`` twins run the engine off the event loop (:func:`off_loop`).
    """

    def __init__(self, format: ResponseFormat | None = None) -> None:
        self.format = format
        self._pending: weakref.WeakKeyDictionary[Session, BaseException] = (
            weakref.WeakKeyDictionary()
        )

    def before_model(
        self, session: Session, messages: Sequence[Message], tools: Tools = None
    ) -> list[Message]:
        error = self._pending.pop(session, None)
        if error is not None:
            retry = session.on_error(error, list(messages), tools)
            if retry is not None:
                return retry
        return session.prepare(list(messages), tools=tools)

    def failed(
        self, session: Session, exc: BaseException, messages: Sequence[Message], tools: Tools = None
    ) -> list[Message] | None:
        return session.on_error(exc, list(messages), tools)

    def defer(self, session: Session, exc: BaseException) -> bool:
        """True when ``exc`` is a context overflow: the next :meth:`before_model` of
        ``session`` answers it (compaction, the window learned); False: give up."""
        from ctxpolicy.engine.overflow import is_context_overflow

        if not is_context_overflow(exc):
            return False
        self._pending[session] = exc
        return True

    def forget(self, session: Session) -> None:
        """Drop what is pending for ``session`` (it was closed)."""
        self._pending.pop(session, None)

    def done(self, session: Session, response: Any) -> None:
        tokens = None if self.format is None else _tokens(self.format.usage(response))
        if tokens is not None:
            session.record_usage(tokens)

    async def abefore_model(
        self, session: Session, messages: Sequence[Message], tools: Tools = None
    ) -> list[Message]:
        return await off_loop(self.before_model, session, messages, tools)

    async def afailed(
        self, session: Session, exc: BaseException, messages: Sequence[Message], tools: Tools = None
    ) -> list[Message] | None:
        return await off_loop(self.failed, session, exc, messages, tools)

    async def adone(self, session: Session, response: Any) -> None:
        tokens = None if self.format is None else _tokens(self.format.usage(response))
        if tokens is not None:
            await off_loop(session.record_usage, tokens)
