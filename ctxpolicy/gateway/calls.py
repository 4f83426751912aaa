"""One prepared call through the gateway, driven by :class:`ctxpolicy.calls.CallDriver`.

The driver owns the protocol (prepare, overflow retry, usage, recall rounds) and runs
every engine step in a worker thread; this module is the HTTP side of it: how a request
is read (:func:`parse`), sent upstream and its reply read (:class:`_Call` is the
driver's :class:`~ctxpolicy.calls.WireFormat`: an upstream error is a reply the driver
shows ``on_error``, a stream is held by :class:`~.recall_stream.RecallProbe` only while
a recall round may follow), and relayed to the client.

The hot path of a non-compacting call is one worker-thread hop (open the session if it
is not open, then ``prepare``; for a large request also building the outgoing body) and
the upstream round trip; the provider's usage is
recorded after the answer is on its way to the client, while the conversation's lock is
still held, so the next call of the conversation sees it and the client does not wait
for it. Reading and building a body over :data:`INLINE_BYTES` also goes through
:func:`ctxpolicy.calls.off_loop`: never on the event loop.
"""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncIterator, Callable, Coroutine, Mapping, Sequence
from typing import TYPE_CHECKING, Any, NamedTuple, Protocol

import httpx
from starlette.requests import Request
from starlette.responses import Response

from ctxpolicy.calls import CallDriver, off_loop, run_on
from ctxpolicy.calls.driver import Message, Record, ToolCallRef, Tools
from ctxpolicy.gateway import recall as recall_mod
from ctxpolicy.gateway.errors import RESP_DROP, UpstreamError, body_chunks, error_response
from ctxpolicy.gateway.identity import Conversation, Identity
from ctxpolicy.gateway.recall_stream import RecallProbe
from ctxpolicy.gateway.routing import OPENAI
from ctxpolicy.gateway.sse import StreamScanner
from ctxpolicy.wire import Extracted, Wire, WireError, for_api

if TYPE_CHECKING:  # pragma: no cover
    from starlette.responses import StreamingResponse

    from ctxpolicy.engine import Session
    from ctxpolicy.gateway.config import GatewayConfig
    from ctxpolicy.gateway.metrics import Metrics
    from ctxpolicy.gateway.sessions import SessionPool

__all__ = ["Gateway", "Incoming", "Parsed", "Prepared", "completion", "parse", "prepare_sync"]

log = logging.getLogger("ctxpolicy.gateway")


class Gateway(Protocol):
    """What a prepared call uses of the gateway's app (``app.Gateway``), so this module
    never imports the app."""

    config: GatewayConfig
    identity: Identity
    metrics: Metrics
    pool: SessionPool

    async def forward(
        self, request: Request, headers: Mapping[str, str], provider: str, path: str, body: bytes
    ) -> Response: ...

    def upstream_headers(self, headers: Mapping[str, str], provider: str) -> dict[str, str]: ...

    def upstream_url(self, provider: str, path: str, query: str) -> str: ...

    async def send(
        self, method: str, url: str, headers: dict[str, str], body: bytes
    ) -> httpx.Response: ...

    def prepared(self, agent: str, done: Prepared) -> list[dict[str, Any]]: ...

    def after(self, work: Coroutine[Any, Any, None], release: Callable[[], None]) -> None: ...

    def stream_back(
        self,
        resp: httpx.Response,
        on_done: Any = None,
        scanner: StreamScanner | None = None,
        release: Any = None,
        chunks: AsyncIterator[bytes] | None = None,
    ) -> StreamingResponse: ...


class Incoming(NamedTuple):
    """One client request the gateway prepares: what it came with and where it goes."""

    request: Request
    headers: dict[str, str]
    #: the wire format (``chat``, ``responses``, ``anthropic``) and the policy's agent
    api: str
    agent: str
    #: the upstream path and the raw body
    path: str
    body: bytes
    tenant: str


class Prepared(NamedTuple):
    """What one ``prepare`` returned: the messages, compactions run, tokens saved."""

    messages: list[dict[str, Any]]
    compactions: int
    saved: int
    #: ``(prefix tokens, limit)`` when the client's fixed prefix (leading system
    #: messages and tool definitions) alone exceeds window - reserve_output
    over: tuple[int, int] | None = None


class Parsed(NamedTuple):
    """A request body read for one prepared call (built off the event loop when large)."""

    req: Extracted | None  # None: a stored Responses conversation (forwarded unprepared)
    conversation: Conversation | None
    #: the usage event of a stream was asked for by the gateway, not the client
    injected_usage: bool


#: Bodies up to this size are read on the event loop (tens of microseconds); larger ones
#: (a long history: milliseconds to seconds of JSON and conversion) in a worker thread.
INLINE_BYTES = 32 * 1024


def parse(
    identity: Identity,
    body: bytes,
    api: str,
    agent: str,
    tenant: str,
    headers: Mapping[str, str],
    stream_usage: bool,
) -> Parsed:
    """The JSON body as the wire reads it (engine messages, tools to count), and the
    conversation it belongs to."""
    wire = for_api(api)
    data = json.loads(body)
    if not isinstance(data, dict):
        raise WireError("the request body must be a JSON object")
    stateless = getattr(wire, "stateless", None)
    if stateless is not None and not stateless(data):
        # previous_response_id / conversation: the provider holds the history, this
        # request has only the new items, nothing the gateway could compact
        return Parsed(None, None, False)
    injected = False
    if stream_usage and data.get("stream") is True:
        asked = wire.with_stream_usage(data)
        if asked is not None:
            # the usage event feeds record_usage; the client that did not ask for it
            # never sees it (StreamScanner drops it)
            injected = True
            data = asked
    req = wire.extract(data)
    conversation = identity.conversation(headers, agent, tenant, data, req.messages)
    return Parsed(req, conversation, injected)


async def completion(gw: Gateway, incoming: Incoming) -> Response:
    """Answer one Chat Completions, Responses or Messages request of its agent."""
    request, headers_in, api, agent, path, body, tenant = incoming
    large = len(body) > INLINE_BYTES
    args = (gw.identity, body, api, agent, tenant, headers_in, gw.config.stream_usage)
    if not large:
        parsed = parse(*args)
    else:
        parsed = await off_loop(parse, *args)
    req, conversation, injected_usage = parsed
    if req is None or conversation is None:
        gw.metrics.forward(path, "previous_response_id")
        log.info(
            "agent=%s api=%s forwarded unprepared: previous_response_id or conversation (the "
            "provider keeps this conversation)",
            agent,
            api,
        )
        return await gw.forward(request, headers_in, OPENAI, path, body)
    call = _Call(gw, incoming, req, conversation.id)
    call.large, call.injected_usage = large, injected_usage
    await call.lock.acquire()
    try:
        return await call.run()
    finally:
        if not call.handed_off:  # else the stream (or the usage task) releases it once done
            call.release()


class _PrefixTooLarge(Exception):
    """The client's fixed prefix alone exceeds the agent's budget (HTTP 400)."""

    def __init__(self, fixed: int, limit: int) -> None:
        super().__init__(fixed, limit)
        self.fixed = fixed
        self.limit = limit


class _Unreachable(Exception):
    """The upstream could not be reached (HTTP 502)."""


class _Failed(NamedTuple):
    """An upstream error answer, read (at most 1 MB of it) and closed."""

    status: int
    text: str
    headers: dict[str, str]


class _Answer:
    """A complete answer: a non-streamed body, or a recall-only stream read to its end."""

    __slots__ = ("_turn", "body", "headers", "raw", "status", "usage")

    def __init__(
        self, status: int, headers: dict[str, str], raw: bytes, body: Any, usage: int | None
    ) -> None:
        self.status = status
        self.headers = headers
        self.raw = raw
        self.body = body
        self.usage = usage
        self._turn: tuple[dict[str, Any] | None, list[Any]] | None = None

    def turn(self, wire: Wire) -> tuple[dict[str, Any] | None, list[Any]]:
        """The assistant turn (the wire's form) and its tool calls (read once)."""
        if self._turn is None:
            self._turn = wire.assistant_and_calls(self.body)
        return self._turn


class _Streamed(NamedTuple):
    """A streamed answer on its way: what the recall probe held, then the rest."""

    resp: httpx.Response
    held: bytes
    chunks: AsyncIterator[bytes]


_Reply = _Failed | _Answer | _Streamed


class _Call:
    """One prepared call of the gateway: its request, its upstream, how a reply is read
    (the :class:`~ctxpolicy.calls.WireFormat` of :class:`~ctxpolicy.calls.CallDriver`)
    and relayed to the client."""

    def __init__(self, gw: Gateway, incoming: Incoming, req: Extracted, conv: str) -> None:
        request, headers_in, api, agent, path, _body, _tenant = incoming
        self.gw = gw
        self.api = api
        self.agent = agent
        self.conv = conv
        self.req = req
        self.wire = wire = for_api(api)
        #: the body is large: built off the event loop
        self.large = False
        #: the stream's usage event was asked for by the gateway (dropped from the relay)
        self.injected_usage = False
        #: serialises the conversation's calls; released once the answer is out
        self.lock = gw.pool.lock(agent, conv)
        self.released = False
        self.handed_off = False
        #: a large request's outgoing body, built in the worker thread of the engine step
        #: that prepared its messages: ``(those messages, the body)``
        self.built: tuple[list[dict[str, Any]], bytes] | None = None
        count_tools = req.tools
        self.send_tools: Any = None
        # the client's own tool of a recall tool's name wins: the gateway then offers no
        # recall tools and answers no recall call of this request (it is the client's call)
        names = {(c.get("function") or {}).get("name") for c in (count_tools or [])}
        self.recall_on = gw.config.recall and not (names & recall_mod.RECALL_NAMES)
        if self.recall_on:
            self.send_tools = recall_mod.with_tools(
                req.body.get("tools"), wire.tools(recall_mod.openai_tools())
            )
            count_tools = (count_tools or []) + [
                t for t in recall_mod.openai_tools() if t["function"]["name"] not in names
            ]
        self.count_tools = count_tools
        self.stream = req.body.get("stream") is True
        provider = wire.provider
        self.headers = gw.upstream_headers(headers_in, provider)
        self.url = gw.upstream_url(provider, path, request.url.query)

    def release(self) -> None:
        if not self.released:
            self.released = True
            self.lock.release()

    async def run(self) -> Response:
        gw, pool, agent, conv = self.gw, self.gw.pool, self.agent, self.conv
        driver = _Driver(
            self,
            open=lambda: pool.get(agent, conv),
            format=self,
            recall_rounds=gw.config.recall_rounds if self.recall_on else 0,
            catch=(),  # an upstream error arrives as a reply (:meth:`failure`)
        )
        try:
            return await driver.acall(
                self.req.messages, self.count_tools, self.send, relay=self.relay
            )
        except _PrefixTooLarge as exc:
            gw.metrics.prefix_too_large(agent)
            gw.metrics.request(self.api, agent, 400)
            log.warning(
                "agent=%s conv=%s fixed prefix %d tokens > budget %d",
                agent,
                conv,
                exc.fixed,
                exc.limit,
            )
            return error_response(400, prefix_message(agent, exc.fixed, exc.limit), self.api)
        except _Unreachable as exc:
            gw.metrics.request(self.api, agent, 502)
            return error_response(502, f"upstream unreachable: {exc}", self.api)

    # -- sending -------------------------------------------------------------------
    async def send(self, prepared: list[dict[str, Any]]) -> _Reply:
        """One upstream attempt with ``prepared``: an error read whole, a body read whole,
        or a stream not read yet."""
        wire, gw = self.wire, self.gw
        built, self.built = self.built, None
        if built is not None and built[0] is prepared:  # built in the engine step's hop
            up = built[1]
        elif self.large:  # the conversion and JSON of a long history: off the event loop
            up = await off_loop(wire.build, self.req, prepared, self.send_tools)
        else:
            up = wire.build(self.req, prepared, self.send_tools)
        try:
            resp = await gw.send("POST", self.url, self.headers, up)
        except httpx.HTTPError as exc:
            raise _Unreachable(type(exc).__name__) from None
        if resp.status_code >= 400:
            text = (await resp.aread())[:1_000_000].decode("utf-8", "replace")
            await resp.aclose()
            return _Failed(resp.status_code, text, _passed_on(resp))
        if self.stream:
            return _Streamed(resp, b"", body_chunks(resp))
        raw = await resp.aread()
        await resp.aclose()
        try:
            answer = json.loads(raw)
        except ValueError:
            answer = None
        return _Answer(resp.status_code, _passed_on(resp), raw, answer, wire.usage(answer))

    # -- the WireFormat the driver reads replies with -------------------------------
    def failure(self, reply: _Reply) -> BaseException | None:
        if isinstance(reply, _Failed):
            return UpstreamError(reply.status, reply.text)
        return None

    def usage(self, reply: _Reply) -> int | None:
        return reply.usage if isinstance(reply, _Answer) else None

    def tool_calls(self, reply: _Reply) -> list[ToolCallRef]:
        if not isinstance(reply, _Answer):
            return []
        msg, calls = reply.turn(self.wire)
        return [] if msg is None else list(calls)

    def results_turn(self, reply: _Reply, results: Sequence[tuple[str, str]]) -> list[Message]:
        raise NotImplementedError("the gateway continues a request in its wire's form")

    def continued(
        self, messages: list[Message], reply: _Reply, results: Sequence[tuple[str, str]]
    ) -> list[Message]:
        assert isinstance(reply, _Answer)
        msg, _ = reply.turn(self.wire)
        assert msg is not None
        self.req = self.wire.with_round(self.req, msg, results)
        return self.req.messages

    async def settle(self, reply: _Reply) -> _Reply:
        """A stream held until it shows it is not a recall-only call; a recall-only one
        read to its end and closed (its usage read from what was held)."""
        if not isinstance(reply, _Streamed):
            return reply
        probe = RecallProbe(self.api)
        async for chunk in reply.chunks:
            if probe.feed(chunk):
                break
        held = bytes(probe.held)
        answer = probe.answer()
        if answer is None:
            return reply._replace(held=held)
        resp = reply.resp
        await resp.aclose()
        scan = StreamScanner(self.api)
        scan.feed(held)
        scan.flush()
        return _Answer(resp.status_code, _passed_on(resp), b"", answer, scan.usage)

    # -- the final reply to the client ---------------------------------------------
    async def relay(self, reply: _Reply, record: Record) -> Response:
        """``reply`` to the client; the usage recorded through ``record`` while the
        answer goes out (the conversation's lock held until it is)."""
        gw = self.gw
        if isinstance(reply, _Failed):
            gw.metrics.request(self.api, self.agent, reply.status)
            # the provider's headers too: retry-after, x-should-retry, request id, rate
            # limits (the client's own retry logic reads them)
            return Response(reply.text.encode(), status_code=reply.status, headers=reply.headers)
        if isinstance(reply, _Streamed):
            gw.metrics.request(self.api, self.agent, reply.resp.status_code)
            scanner = StreamScanner(self.api, drop_usage_chunk=self.injected_usage)
            chunks = _prefixed(reply.held, reply.chunks)
            out = gw.stream_back(reply.resp, record, scanner, self.release, chunks)
            self.handed_off = True
            return out
        gw.metrics.request(self.api, self.agent, reply.status)
        if reply.usage:  # recorded while the answer goes out; the lock waits for it
            gw.after(record(reply.usage), self.release)
            self.handed_off = True
        return Response(reply.raw, status_code=reply.status, headers=reply.headers)


class _Driver(CallDriver):
    """The call driver with the gateway's metrics in its engine steps."""

    def __init__(self, call: _Call, **kw: Any) -> None:
        super().__init__(None, **kw)
        self.owner = call

    def prepare_step(self, messages: list[Message], tools: Tools) -> list[Message]:
        done: Prepared = run_on(self.session, prepare_sync, messages, tools, weight=messages)
        if done.over is not None:
            raise _PrefixTooLarge(*done.over)
        return self._built(self.owner.gw.prepared(self.owner.agent, done))

    def overflow_step(
        self, exc: BaseException, messages: list[Message], tools: Tools
    ) -> list[Message] | None:
        try:
            retry = super().overflow_step(exc, messages, tools)
        except Exception:  # ContextOverflowError: the retries are used up
            log.info(
                "agent=%s conv=%s overflow retries exhausted", self.owner.agent, self.owner.conv
            )
            retry = None
        if retry is not None:
            self.owner.gw.metrics.retry(self.owner.agent)
            self._built(retry)
        return retry

    def _built(self, prepared: list[Message]) -> list[Message]:
        """A large request's outgoing body built here, in the engine step's worker
        thread, so that sending it is no second hop off the event loop."""
        call = self.owner
        if call.large:
            call.built = (prepared, call.wire.build(call.req, prepared, call.send_tools))
        return prepared

    def recall_step(self, calls: Sequence[ToolCallRef]) -> list[tuple[str, str]]:
        self.owner.gw.metrics.recall(self.owner.agent)
        return super().recall_step(calls)


def _passed_on(resp: httpx.Response) -> dict[str, str]:
    """The upstream's response headers passed on to the client."""
    return {k: v for k, v in resp.headers.items() if k.lower() not in RESP_DROP}


def prefix_message(agent: str, fixed: int, limit: int) -> str:
    """The error a client gets when its fixed prefix alone does not fit the agent's budget."""
    return (
        f"ctxpolicy: agent {agent!r}: the client's fixed prefix (system prompt and tool "
        f"definitions) is {fixed} tokens, over the {limit} tokens this agent's policy allows "
        "a request (window - reserve_output); nothing in it can be compacted. Use an agent "
        "whose model has a larger window (ctxpolicy explain shows the budget), or send "
        "fewer tools."
    )


async def _prefixed(held: bytes, rest: AsyncIterator[bytes]) -> AsyncIterator[bytes]:
    if held:
        yield held
    async for chunk in rest:
        yield chunk


def prepare_sync(
    session: Session, messages: list[dict[str, Any]], tools: Sequence[dict[str, Any]] | None
) -> Prepared:
    """``session.prepare`` with what the metrics need (runs in a worker thread)."""
    before = sum(session.stats.compactions.values())
    prepared: list[dict[str, Any]] = session.prepare(messages, tools)
    status = session.status or {}
    after = sum(session.stats.compactions.values())
    used = int(status.get("used", 0) or 0)
    saved = int(status.get("tokens_in", 0) or 0) - used
    over = None
    budget = session.budget()
    limit = budget.window - budget.reserve_output
    if used > limit:  # rare: is it the client's fixed prefix that cannot fit?
        lead = []
        for m in messages:
            if m.get("role") not in ("system", "developer"):
                break
            lead.append(m)
        counter = session.counter
        fixed = counter.count_messages(lead) + (counter.count_tools(tools) if tools else 0)
        if fixed > limit:
            over = (fixed, limit)
    return Prepared(prepared, after - before, saved, over)
