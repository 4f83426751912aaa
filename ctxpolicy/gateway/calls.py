"""One prepared call through the gateway: prepare, forward, overflow retry, recall rounds.

The hot path of a non-compacting call is one worker-thread hop (open the session if it
is not open, then ``prepare``) and the upstream round trip; the provider's usage is
recorded after the answer is on its way to the client, while the conversation's lock is
still held, so the next call of the conversation sees it and the client does not wait
for it. Every engine call, and the reading and building of a body over
:data:`INLINE_BYTES`, goes through :func:`ctxpolicy.calls.off_loop`: never on the event
loop.
"""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncIterator, Mapping
from typing import TYPE_CHECKING, Any, NamedTuple

import httpx
from starlette.requests import Request
from starlette.responses import Response

from ctxpolicy.calls import off_loop
from ctxpolicy.gateway import recall as recall_mod
from ctxpolicy.gateway.errors import RESP_DROP, UpstreamError, error_response
from ctxpolicy.gateway.identity import Conversation, Identity
from ctxpolicy.gateway.recall_stream import RecallProbe
from ctxpolicy.gateway.routing import OPENAI
from ctxpolicy.gateway.sse import StreamScanner
from ctxpolicy.wire import Extracted, WireError, for_api

if TYPE_CHECKING:  # pragma: no cover
    from ctxpolicy.engine import Session
    from ctxpolicy.gateway.app import Gateway

__all__ = ["Parsed", "Prepared", "completion", "parse", "prepare_sync"]

log = logging.getLogger("ctxpolicy.gateway")


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


async def completion(
    gw: Gateway,
    request: Request,
    headers_in: dict[str, str],
    api: str,
    agent: str,
    path: str,
    body: bytes,
    tenant: str,
) -> Response:
    """Answer one Chat Completions, Responses or Messages request of ``agent``."""
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
    wire = for_api(api)
    data = req.body
    messages, count_tools = req.messages, req.tools
    client_tools = data.get("tools")
    stream = data.get("stream") is True
    send_tools = None
    # the client's own tool of a recall tool's name wins: the gateway then offers no
    # recall tools and answers no recall call of this request (it is the client's call)
    names = {(c.get("function") or {}).get("name") for c in (count_tools or [])}
    recall_on = gw.config.recall and not (names & recall_mod.RECALL_NAMES)
    if recall_on:
        send_tools = recall_mod.with_tools(client_tools, wire.tools(recall_mod.openai_tools()))
        have = {(c.get("function") or {}).get("name") for c in (count_tools or [])}
        count_tools = (count_tools or []) + [
            t for t in recall_mod.openai_tools() if t["function"]["name"] not in have
        ]
    conv = conversation.id
    provider = wire.provider
    headers = gw.upstream_headers(headers_in, provider)
    url = gw.upstream_url(provider, path, request.url.query)
    lock = gw.pool.lock(agent, conv)
    await lock.acquire()
    released = False
    handed_off = False  # the stream (or the usage task) releases the lock once done

    def release() -> None:
        nonlocal released
        if not released:
            released = True
            lock.release()

    pool = gw.pool

    def open_and_prepare() -> tuple[Session, Prepared]:
        s = pool.get(agent, conv)
        return s, prepare_sync(s, messages, count_tools)

    try:
        open_session = pool.peek(agent, conv)
        if open_session is None:  # one worker-thread hop: open (resume) and prepare
            session, done_prep = await off_loop(open_and_prepare)
        else:
            session = open_session
            done_prep = await off_loop(prepare_sync, session, messages, count_tools)
        if done_prep.over is not None:
            gw.metrics.prefix_too_large(agent)
            gw.metrics.request(api, agent, 400)
            fixed, limit = done_prep.over
            log.warning(
                "agent=%s conv=%s fixed prefix %d tokens > budget %d", agent, conv, fixed, limit
            )
            return error_response(400, prefix_message(agent, fixed, limit), api)
        prepared = gw.prepared(agent, done_prep)
        rounds = 0
        while True:
            if large:  # the conversion and JSON of a long history: off the event loop
                up = await off_loop(wire.build, req, prepared, send_tools)
            else:
                up = wire.build(req, prepared, send_tools)
            try:
                resp = await gw.send("POST", url, headers, up)
            except httpx.HTTPError as exc:
                gw.metrics.request(api, agent, 502)
                return error_response(502, f"upstream unreachable: {type(exc).__name__}", api)
            if resp.status_code >= 400:
                text = (await resp.aread())[:1_000_000].decode("utf-8", "replace")
                await resp.aclose()
                failure = UpstreamError(resp.status_code, text)
                try:
                    retry = await off_loop(session.on_error, failure, messages, count_tools)
                except Exception:  # ContextOverflowError: the retries are used up
                    log.info("agent=%s conv=%s overflow retries exhausted", agent, conv)
                    retry = None
                if retry is None:
                    gw.metrics.request(api, agent, resp.status_code)
                    # the provider's headers too: retry-after, x-should-retry, request id,
                    # rate limits (the client's own retry logic reads them)
                    rh = {k: v for k, v in resp.headers.items() if k.lower() not in RESP_DROP}
                    return Response(text.encode(), status_code=resp.status_code, headers=rh)
                gw.metrics.retry(agent)
                prepared = retry
                continue
            recall_left = recall_on and rounds < gw.config.recall_rounds
            answer: Any = None
            raw = b""
            if stream:
                chunks = resp.aiter_raw()
                held = b""
                if recall_left:
                    probe = RecallProbe(api)
                    async for chunk in chunks:
                        if probe.feed(chunk):
                            break
                    held = bytes(probe.held)
                    answer = probe.answer()
                    if answer is not None:  # a recall-only call: answered here
                        await resp.aclose()
                        scan = StreamScanner(api)
                        scan.feed(held)
                        scan.flush()
                        if scan.usage:
                            await off_loop(session.record_usage, scan.usage)
                if answer is None:
                    gw.metrics.request(api, agent, resp.status_code)

                    async def done(tokens: int, s: Session = session) -> None:
                        await off_loop(s.record_usage, tokens)

                    scanner = StreamScanner(api, drop_usage_chunk=injected_usage)
                    out = gw.stream_back(resp, done, scanner, release, _prefixed(held, chunks))
                    handed_off = True
                    return out
            else:
                raw = await resp.aread()
                await resp.aclose()
                try:
                    answer = json.loads(raw)
                except ValueError:
                    answer = None
                tokens = wire.usage(answer)
                if not recall_left:
                    gw.metrics.request(api, agent, resp.status_code)
                    rh = {k: v for k, v in resp.headers.items() if k.lower() not in RESP_DROP}
                    if tokens:  # recorded while the answer goes out; the lock waits for it
                        gw.after(_record(session, tokens), release)
                        handed_off = True
                    return Response(raw, status_code=resp.status_code, headers=rh)
                if tokens:
                    await off_loop(session.record_usage, tokens)
            msg, calls = wire.assistant_and_calls(answer)
            if msg is None or not recall_mod.is_recall_only([c[1] for c in calls]):
                gw.metrics.request(api, agent, resp.status_code)
                rh = {k: v for k, v in resp.headers.items() if k.lower() not in RESP_DROP}
                return Response(raw, status_code=resp.status_code, headers=rh)
            rounds += 1
            gw.metrics.recall(agent)
            _, handler = session.recall_tool()
            results = [(cid, await off_loop(handler, name, args)) for cid, name, args in calls]
            req = wire.with_round(req, msg, results)
            messages = req.messages
            done_prep = await off_loop(prepare_sync, session, messages, count_tools)
            prepared = gw.prepared(agent, done_prep)
    finally:
        if not handed_off:
            release()


def prefix_message(agent: str, fixed: int, limit: int) -> str:
    """The error a client gets when its fixed prefix alone does not fit the agent's budget."""
    return (
        f"ctxpolicy: agent {agent!r}: the client's fixed prefix (system prompt and tool "
        f"definitions) is {fixed} tokens, over the {limit} tokens this agent's policy allows "
        "a request (window - reserve_output); nothing in it can be compacted. Use an agent "
        "whose model has a larger window (ctxpolicy explain shows the budget), or send "
        "fewer tools."
    )


async def _record(session: Session, tokens: int) -> None:
    await off_loop(session.record_usage, tokens)


async def _prefixed(held: bytes, rest: AsyncIterator[bytes]) -> AsyncIterator[bytes]:
    if held:
        yield held
    async for chunk in rest:
        yield chunk


def prepare_sync(
    session: Session, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None
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
