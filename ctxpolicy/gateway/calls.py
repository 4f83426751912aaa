"""One prepared call through the gateway: prepare, forward, overflow retry, recall rounds.

The hot path of a non-compacting call is one worker-thread hop (open the session if it
is not open, then ``prepare``) and the upstream round trip; the provider's usage is
recorded after the answer is on its way to the client, while the conversation's lock is
still held, so the next call of the conversation sees it and the client does not wait
for it.
"""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any, NamedTuple

import anyio.to_thread
import httpx
from starlette.requests import Request
from starlette.responses import Response

from ctxpolicy.gateway import recall as recall_mod
from ctxpolicy.gateway.errors import RESP_DROP, UpstreamError, error_response
from ctxpolicy.gateway.identity import conversation_id
from ctxpolicy.gateway.recall_stream import RecallProbe
from ctxpolicy.gateway.sse import StreamScanner
from ctxpolicy.wire import for_api

if TYPE_CHECKING:  # pragma: no cover
    from ctxpolicy.engine import Session
    from ctxpolicy.gateway.app import Gateway

__all__ = ["Prepared", "completion", "prepare_sync"]

log = logging.getLogger("ctxpolicy.gateway")


class Prepared(NamedTuple):
    """What one ``prepare`` returned: the messages, compactions run, tokens saved."""

    messages: list[dict[str, Any]]
    compactions: int
    saved: int


async def completion(
    gw: Gateway, request: Request, api: str, agent: str, path: str, data: dict[str, Any]
) -> Response:
    """Answer one Chat Completions or Messages request of ``agent``."""
    wire = for_api(api)
    stream = data.get("stream") is True
    injected_usage = False
    if stream and gw.config.stream_usage:
        asked = wire.with_stream_usage(data)
        if asked is not None:
            # the usage chunk feeds record_usage; the client that did not ask for it
            # never sees it (StreamScanner drops it)
            injected_usage = True
            data = asked
    req = wire.extract(data)
    messages, count_tools = req.messages, req.tools
    client_tools = data.get("tools")
    send_tools = None
    if gw.config.recall:
        send_tools = recall_mod.with_tools(client_tools, wire.tools(recall_mod.openai_tools()))
        have = {(c.get("function") or {}).get("name") for c in (count_tools or [])}
        count_tools = (count_tools or []) + [
            t for t in recall_mod.openai_tools() if t["function"]["name"] not in have
        ]
    conv = conversation_id(request.headers, agent, messages, gw.secret)
    headers = gw.upstream_headers(request, api)
    url = gw.upstream_url(api, path, request.url.query)
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
            session, done_prep = await anyio.to_thread.run_sync(open_and_prepare)
        else:
            session = open_session
            done_prep = await anyio.to_thread.run_sync(prepare_sync, session, messages, count_tools)
        prepared = gw.prepared(agent, done_prep)
        rounds = 0
        while True:
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
                    retry = await anyio.to_thread.run_sync(
                        session.on_error, failure, messages, count_tools
                    )
                except Exception:  # ContextOverflowError: the retries are used up
                    log.info("agent=%s conv=%s overflow retries exhausted", agent, conv)
                    retry = None
                if retry is None:
                    gw.metrics.request(api, agent, resp.status_code)
                    return Response(
                        text.encode(),
                        status_code=resp.status_code,
                        media_type=resp.headers.get("content-type", "application/json"),
                    )
                gw.metrics.retry(agent)
                prepared = retry
                continue
            recall_left = gw.config.recall and rounds < gw.config.recall_rounds
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
                            await anyio.to_thread.run_sync(session.record_usage, scan.usage)
                if answer is None:
                    gw.metrics.request(api, agent, resp.status_code)

                    async def done(tokens: int, s: Session = session) -> None:
                        await anyio.to_thread.run_sync(s.record_usage, tokens)

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
                    await anyio.to_thread.run_sync(session.record_usage, tokens)
            msg, calls = wire.assistant_and_calls(answer)
            if msg is None or not recall_mod.is_recall_only([c[1] for c in calls]):
                gw.metrics.request(api, agent, resp.status_code)
                rh = {k: v for k, v in resp.headers.items() if k.lower() not in RESP_DROP}
                return Response(raw, status_code=resp.status_code, headers=rh)
            rounds += 1
            gw.metrics.recall(agent)
            _, handler = session.recall_tool()
            results = [
                (cid, await anyio.to_thread.run_sync(handler, name, args))
                for cid, name, args in calls
            ]
            req = wire.with_round(req, msg, results)
            messages = req.messages
            done_prep = await anyio.to_thread.run_sync(prepare_sync, session, messages, count_tools)
            prepared = gw.prepared(agent, done_prep)
    finally:
        if not handed_off:
            release()


async def _record(session: Session, tokens: int) -> None:
    await anyio.to_thread.run_sync(session.record_usage, tokens)


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
    saved = int(status.get("tokens_in", 0) or 0) - int(status.get("used", 0) or 0)
    return Prepared(prepared, after - before, saved)
