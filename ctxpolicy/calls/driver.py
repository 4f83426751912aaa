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
the event loop: every engine step (:meth:`~CallDriver.prepare_step`,
:meth:`~CallDriver.overflow_step`, :meth:`~CallDriver.usage_step`,
:meth:`~CallDriver.recall_step`) goes through :meth:`CallDriver._engine`, which hands it
to a worker thread with :func:`off_loop`.

A host that speaks a provider's wire itself (the gateway) gives a :class:`WireFormat`:
a provider's failure arrives as a response (shown to ``on_error``, handed back as the
answer when it is not retried), a streamed answer is read only as far as the recall
decision needs (:meth:`WireFormat.settle`), a recall round continues the request in the
wire's own form (:meth:`WireFormat.continued`), and the final answer goes to the host's
``relay`` with the driver's usage step, to call once the provider's usage is known (the
end of a stream). Subclasses change an engine step (the gateway's prepare also counts its
metrics); they never call the engine themselves.

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
import os
import sys
import threading
import weakref
from collections.abc import Awaitable, Callable, Coroutine, Sequence
from typing import TYPE_CHECKING, Any, Protocol, TypeGuard, TypeVar, overload, runtime_checkable

if TYPE_CHECKING:  # pragma: no cover
    from ctxpolicy.engine import Session

__all__ = [
    "RECALL_NAMES",
    "CallDriver",
    "CallSteps",
    "Message",
    "Record",
    "ResponseFormat",
    "ToolCallRef",
    "UsageOnly",
    "WireFormat",
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
#: the driver's usage step as a relay gets it: ``await record(tokens)`` (off the loop)
Record = Callable[[int], Coroutine[Any, Any, None]]


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


@runtime_checkable
class WireFormat(ResponseFormat, Protocol):
    """A :class:`ResponseFormat` of a host that speaks a provider's wire itself."""

    def failure(self, response: Any) -> BaseException | None:
        """The error to show ``session.on_error`` when ``response`` is a provider's
        failure (an HTTP error status), None for an answer."""
        ...

    async def settle(self, response: Any) -> Any:
        """``response`` read as far as the recall decision needs (called only while
        recall rounds remain): a streamed answer is held until it shows it is not a
        recall-only call (what was read is kept for the relay), or to its end."""
        ...

    def continued(
        self, messages: list[Message], response: Any, results: Sequence[tuple[str, str]]
    ) -> list[Message]:
        """The engine messages of the request continued by ``response``'s assistant turn
        and the ``(call id, text)`` results of its calls (the wire keeps its own form)."""
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


def _speaks_wire(format: ResponseFormat) -> TypeGuard[WireFormat]:
    """A :class:`WireFormat` (by its methods: ``isinstance`` on a runtime protocol costs
    tens of microseconds, and a driver is made per call)."""
    return all(callable(getattr(format, m, None)) for m in ("failure", "settle", "continued"))


class _Plain:
    """A :class:`ResponseFormat` as a :class:`WireFormat`: failures are raised by
    ``send``, answers arrive whole, a round appends its turn."""

    def __init__(self, fmt: ResponseFormat) -> None:
        self.fmt = fmt

    def usage(self, response: Any) -> int | None:
        return self.fmt.usage(response)

    def tool_calls(self, response: Any) -> list[ToolCallRef]:
        return self.fmt.tool_calls(response)

    def results_turn(self, response: Any, results: Sequence[tuple[str, str]]) -> list[Message]:
        return self.fmt.results_turn(response, results)

    def failure(self, response: Any) -> BaseException | None:
        return None

    async def settle(self, response: Any) -> Any:
        return response

    def continued(
        self, messages: list[Message], response: Any, results: Sequence[tuple[str, str]]
    ) -> list[Message]:
        return [*messages, *self.fmt.results_turn(response, results)]


#: The interpreter's switch interval (seconds) while engine work runs in a worker thread
#: (``CTXPOLICY_SWITCH_INTERVAL`` overrides it; ``0`` leaves the interpreter's own).
#: CPython's default, 5 ms, is what every other thread waits at most for the
#: interpreter lock held by a long ``prepare``: a small call of another conversation
#: needs it several times (the event loop, its own worker thread), so under a long
#: history each hand-off costs up to 5 ms. Lowered only while engine work runs, and
#: only when the interpreter's is higher; restored when the last one ends.
SWITCH_INTERVAL = 0.0005


class _Responsive:
    """The lowered switch interval while at least one engine call runs off the loop."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._running = 0
        self._saved: float | None = None
        self._set: float | None = None

    def target(self) -> float:
        raw = os.environ.get("CTXPOLICY_SWITCH_INTERVAL")
        if raw is None:
            return SWITCH_INTERVAL
        try:
            return max(0.0, float(raw))
        except ValueError:
            return SWITCH_INTERVAL

    def enter(self) -> None:
        with self._lock:
            self._running += 1
            if self._running > 1:
                return
            target = self.target()
            current = sys.getswitchinterval()
            if target > 0 and current > target:
                self._saved, self._set = current, target
                sys.setswitchinterval(target)

    def leave(self) -> None:
        with self._lock:
            self._running -= 1
            if self._running or self._saved is None:
                return
            # restored unless someone else changed it meanwhile (theirs wins)
            if self._set is not None and abs(sys.getswitchinterval() - self._set) < 1e-9:
                sys.setswitchinterval(self._saved)
            self._saved = self._set = None


_RESPONSIVE = _Responsive()


def _in_worker(call: Callable[[], T]) -> T:
    _RESPONSIVE.enter()
    try:
        return call()
    finally:
        _RESPONSIVE.leave()


async def off_loop(fn: Callable[..., T], /, *args: Any, **kwargs: Any) -> T:
    """``fn(*args, **kwargs)`` in a worker thread: the one place where an async front
    end hands the engine (prepare, on_error, record_usage, add_tool_result, recall,
    opening a session) off the event loop. Context variables go with it. While it runs,
    the interpreter's switch interval is :data:`SWITCH_INTERVAL` (the other threads,
    the event loop's included, get the interpreter lock back sooner)."""
    call = functools.partial(_in_worker, functools.partial(fn, *args, **kwargs))
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
    retries, then :class:`~ctxpolicy.ContextOverflowError` is raised). ``session`` may
    be None when ``open`` is given: the first engine step opens it (opening a stored
    conversation and preparing its first call are then one worker-thread hop).
    """

    def __init__(
        self,
        session: Session | None,
        *,
        format: ResponseFormat | None = None,
        recall_rounds: int = 0,
        catch: tuple[type[BaseException], ...] = (Exception,),
        open: Callable[[], Session] | None = None,
    ) -> None:
        if session is None and open is None:
            raise ValueError("a call driver needs a session or a way to open one")
        self._session = session
        self._open = open
        self.format = format
        self._wire: WireFormat | None = (
            None if format is None else format if _speaks_wire(format) else _Plain(format)
        )
        self.recall_rounds = max(0, int(recall_rounds))
        self.catch = catch

    @property
    def session(self) -> Session:
        """The conversation's session (opened by the first engine step when not given)."""
        if self._session is None:
            assert self._open is not None
            self._session = self._open()
        return self._session

    # -- the engine steps: sync, each run off the event loop by the async form ------
    def prepare_step(self, messages: list[Message], tools: Tools) -> list[Message]:
        """The budgeted messages of one request (``session.prepare``)."""
        return self.session.prepare(messages, tools=tools)

    def overflow_step(
        self, exc: BaseException, messages: list[Message], tools: Tools
    ) -> list[Message] | None:
        """The messages to send again after ``exc`` (``session.on_error``), None to
        give up."""
        return self.session.on_error(exc, messages, tools)

    def usage_step(self, tokens: int) -> None:
        """The provider's prompt tokens recorded (``session.record_usage``)."""
        self.session.record_usage(tokens)

    def recall_step(self, calls: Sequence[ToolCallRef]) -> list[tuple[str, str]]:
        """The ``(call id, text)`` answers of recall calls (the session's own snapshots)."""
        _, handler = self.session.recall_tool()
        return [(cid, handler(name, args)) for cid, name, args in calls]

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
            tokens = self._usage(response)
            if tokens is not None:
                self.usage_step(tokens)
            if calls is None:
                return response
            messages = self._continued(messages, response, self.recall_step(calls))
            rounds += 1

    def _prepared_call(
        self, messages: list[Message], tools: Tools, send: Callable[[list[Message]], R]
    ) -> R:
        return self._overflow_retries(messages, tools, self.prepare_step(messages, tools), send)

    def _overflow_retries(
        self,
        messages: list[Message],
        tools: Tools,
        prepared: list[Message],
        send: Callable[[list[Message]], R],
    ) -> R:
        while True:
            try:
                response = send(prepared)
            except self.catch as exc:
                retry = self.overflow_step(exc, messages, tools)
                if retry is None:
                    raise
            else:
                failure = self._failure(response)
                if failure is None:
                    return response
                retry = self.overflow_step(failure, messages, tools)
                if retry is None:
                    return response
            prepared = retry

    # -- the async form: the same steps, every engine step off the event loop -------
    def _engine(self, step: Callable[..., T], /, *args: Any) -> Coroutine[Any, Any, T]:
        """Run one engine step in a worker thread: the async form's only way to the
        engine (the coroutine of :func:`off_loop` itself: no frame of its own to resume
        at each step of the hop)."""
        return off_loop(step, *args)

    @overload
    async def acall(
        self,
        messages: Sequence[Message],
        tools: Tools,
        send: Callable[[list[Message]], Awaitable[R]],
    ) -> R: ...

    @overload
    async def acall(
        self,
        messages: Sequence[Message],
        tools: Tools,
        send: Callable[[list[Message]], Awaitable[R]],
        *,
        relay: Callable[[R, Record], Awaitable[T]],
    ) -> T: ...

    async def acall(
        self,
        messages: Sequence[Message],
        tools: Tools,
        send: Callable[[list[Message]], Awaitable[R]],
        *,
        relay: Callable[[R, Record], Awaitable[T]] | None = None,
    ) -> R | T:
        """Async twin of :meth:`call`; the engine runs in a worker thread.

        ``relay`` (optional) takes the final answer and the driver's usage step: it
        hands the answer to its client and records the usage once it is known (a
        streamed answer's at its end); without it, usage is recorded before the answer
        is returned.
        """
        return await self._arecall_rounds(list(messages), tools, send, relay)

    async def _arecall_rounds(
        self,
        messages: list[Message],
        tools: Tools,
        send: Callable[[list[Message]], Awaitable[R]],
        relay: Callable[[R, Record], Awaitable[T]] | None,
    ) -> R | T:
        rounds = 0
        while True:
            response = await self._aprepared_call(messages, tools, send)
            if self._wire is not None and rounds < self.recall_rounds:
                response = await self._wire.settle(response)
            calls = self._recall_calls(response, rounds)
            if calls is None and relay is not None:
                return await relay(response, self._arecord)
            tokens = self._usage(response)
            if tokens is not None:
                await self._engine(self.usage_step, tokens)
            if calls is None:
                return response
            results = await self._engine(self.recall_step, calls)
            messages = self._continued(messages, response, results)
            rounds += 1

    async def _arecord(self, tokens: int) -> None:
        if _tokens(tokens) is not None:
            await self._engine(self.usage_step, tokens)

    async def _aprepared_call(
        self, messages: list[Message], tools: Tools, send: Callable[[list[Message]], Awaitable[R]]
    ) -> R:
        prepared = await self._engine(self.prepare_step, messages, tools)
        return await self._aoverflow_retries(messages, tools, prepared, send)

    async def _aoverflow_retries(
        self,
        messages: list[Message],
        tools: Tools,
        prepared: list[Message],
        send: Callable[[list[Message]], Awaitable[R]],
    ) -> R:
        while True:
            try:
                response = await send(prepared)
            except self.catch as exc:
                retry = await self._engine(self.overflow_step, exc, messages, tools)
                if retry is None:
                    raise
            else:
                failure = self._failure(response)
                if failure is None:
                    return response
                retry = await self._engine(self.overflow_step, failure, messages, tools)
                if retry is None:
                    return response
            prepared = retry

    # -- decisions shared by both forms (no engine call) ---------------------------
    def _failure(self, response: Any) -> BaseException | None:
        return None if self._wire is None else self._wire.failure(response)

    def _usage(self, response: Any) -> int | None:
        return None if self._wire is None else _tokens(self._wire.usage(response))

    def _recall_calls(self, response: Any, rounds: int) -> list[ToolCallRef] | None:
        """The calls to answer here, or None when the response goes to the host."""
        if self._wire is None or rounds >= self.recall_rounds:
            return None
        calls = self._wire.tool_calls(response)
        if not calls or any(name not in RECALL_NAMES for _, name, _ in calls):
            return None
        return calls

    def _continued(
        self, messages: list[Message], response: Any, results: Sequence[tuple[str, str]]
    ) -> list[Message]:
        assert self._wire is not None
        return self._wire.continued(messages, response, results)


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
