"""The gateway's ASGI app (starlette): routes, limits, health, metrics, the call loop.

``POST /v1/chat/completions`` and ``/v1/responses`` (OpenAI) and ``POST /v1/messages``
(Anthropic), under an optional ``/agents/{name}`` prefix, are prepared by the
conversation's session and forwarded through one pooled :class:`httpx.AsyncClient`;
streaming answers are passed through chunk by chunk as they arrive. Every other path a
provider serves is forwarded unchanged to that provider (:mod:`.routing`), any other is
a 404. ``GET /healthz`` and ``GET /metrics`` (Prometheus text) are the gateway's own.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import secrets
import time
import urllib.request
from collections.abc import AsyncIterator, Callable, Coroutine, Mapping
from typing import Any

import anyio
import httpx
from starlette.applications import Starlette
from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse, PlainTextResponse, Response, StreamingResponse
from starlette.routing import Route

from ctxpolicy.calls import off_loop
from ctxpolicy.gateway.calls import Incoming, Prepared, completion
from ctxpolicy.gateway.config import GatewayConfig
from ctxpolicy.gateway.dashboard import PREFIX, Dashboard, observers
from ctxpolicy.gateway.errors import RESP_DROP, UpstreamError, body_chunks, error_response
from ctxpolicy.gateway.identity import Identity, Refused
from ctxpolicy.gateway.metrics import Metrics
from ctxpolicy.gateway.routing import (
    ANTHROPIC,
    OPENAI,
    PREPARED,
    UnknownAgent,
    Unplaced,
    provider_of,
    resolve_agent,
)
from ctxpolicy.gateway.sessions import SessionPool
from ctxpolicy.gateway.sse import StreamScanner
from ctxpolicy.gateway.unprepared import classify
from ctxpolicy.wire import WIRES, WireError

__all__ = ["GatewayConfig", "UpstreamError", "create_app"]

log = logging.getLogger("ctxpolicy.gateway")

#: The APIs (:data:`ctxpolicy.wire.WIRES`) whose requests the gateway prepares.

SECRET_ENV = "CTXPOLICY_GATEWAY_SECRET"
_HOP = frozenset(
    {
        "host",
        "content-length",
        "connection",
        "keep-alive",
        "transfer-encoding",
        "te",
        "trailer",
        "upgrade",
        "proxy-authorization",
        "proxy-connection",
        "accept-encoding",
    }
)


def _origin(url: str) -> str:
    url = url.rstrip("/")
    return url[:-3] if url.endswith("/v1") else url


def environment_proxy(url: str) -> str | None:
    """The proxy the environment names for ``url`` (``HTTPS_PROXY``, ``HTTP_PROXY``,
    ``ALL_PROXY``; ``NO_PROXY`` exempts a host and its subdomains, ``*`` every host), read
    by the standard library as httpx's own clients read it; None to connect directly."""
    parsed = httpx.URL(url)
    proxies = urllib.request.getproxies()
    if urllib.request.proxy_bypass(parsed.host):
        return None
    proxy = proxies.get(parsed.scheme) or proxies.get("all")
    if not proxy:
        return None
    return proxy if "://" in proxy else "http://" + proxy


def _default_headers() -> dict[str, str]:
    """The headers an httpx client adds to a request that lacks them (accept, the
    encodings it decodes, user-agent), read from a client that never sends."""
    return dict(httpx.AsyncClient(transport=httpx.AsyncBaseTransport()).headers)


#: upstream urls kept parsed with their transport (a query string makes a url of its own)
_TARGETS = 256


class _TooLarge(Exception):
    pass


async def _read_body(request: Request, limit: int) -> bytes:
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise _TooLarge
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise _TooLarge
        chunks.append(chunk)
    return b"".join(chunks)


class Gateway:
    """The state of one worker: config, session pool, metrics, the upstream client."""

    def __init__(self, config: GatewayConfig) -> None:
        self.config = config
        self.secret = config.secret or os.environ.get(SECRET_ENV, "").encode() or _volatile()
        self.metrics = Metrics()
        self.dashboard = Dashboard(self) if config.dashboard else None
        self.pool = SessionPool(
            config.policies,
            max_sessions=config.max_sessions,
            record=config.record,
            observe=observers(self),
            engine_processes=config.engine_processes,
        )
        self.identity = Identity(
            self.secret,
            session_headers=config.session_headers,
            client_tokens=config.client_tokens,
        )
        self.upstream = _origin(config.upstream)
        self.anthropic_upstream = _origin(config.anthropic_upstream or config.upstream)
        # each provider its own base and credential; without an Anthropic upstream of its
        # own, Anthropic paths go to the one upstream with its key (a proxy speaking both)
        self.bases = {OPENAI: self.upstream, ANTHROPIC: self.anthropic_upstream}
        self.auth = {OPENAI: WIRES["chat"].auth_headers, ANTHROPIC: WIRES["anthropic"].auth_headers}
        self.keys = {
            OPENAI: config.api_key,
            ANTHROPIC: config.anthropic_api_key
            or (config.api_key if not config.anthropic_upstream else None),
        }
        self._tasks: set[asyncio.Task[None]] = set()
        self._defaults: dict[str, str] = {}
        self._extensions: dict[str, Any] = {}
        self._transports: dict[str, httpx.AsyncBaseTransport] = {}
        self._targets: dict[str, tuple[httpx.AsyncBaseTransport, httpx.URL]] = {}

    async def startup(self) -> None:
        timeout = httpx.Timeout(self.config.timeout, connect=30.0)
        limits = httpx.Limits(max_connections=512, max_keepalive_connections=256)
        processes = self.pool.pool.processes
        if processes is not None:  # serving once the engine processes are up
            await off_loop(processes.start, wait=True)
        # a request goes straight to the transport of its upstream (its connection pool,
        # through the proxy the environment names for it): a client's URL merging,
        # cookie jar, auth and redirect layers cost a fifth of the gateway's own time per
        # call, and a gateway must not keep one tenant's cookies for the next
        self._defaults = _default_headers()
        self._extensions = {"timeout": timeout.as_dict()}
        by_proxy: dict[str | None, httpx.AsyncBaseTransport] = {}
        for base in set(self.bases.values()):
            proxy = environment_proxy(base)
            if proxy not in by_proxy:
                by_proxy[proxy] = httpx.AsyncHTTPTransport(
                    limits=limits, proxy=None if proxy is None else httpx.Proxy(proxy)
                )
            self._transports[base + "/"] = by_proxy[proxy]

    async def shutdown(self) -> None:
        if self._tasks:  # usage still being recorded: let it finish before closing
            await asyncio.gather(*self._tasks, return_exceptions=True)
        for transport in {id(t): t for t in self._transports.values()}.values():
            await transport.aclose()
        self._transports = {}
        self._targets = {}
        await off_loop(self.pool.close)

    # -- helpers -------------------------------------------------------------------
    def upstream_headers(self, headers: Mapping[str, str], provider: str) -> dict[str, str]:
        """The client's headers for ``provider``'s upstream: hop-by-hop and the gateway's
        own dropped, the server's key of that provider (if any) instead of the client's."""
        out = {
            k: v for k, v in headers.items() if k not in _HOP and not k.startswith("x-ctxpolicy-")
        }
        key = self.keys[provider]
        if key:
            out.pop("authorization", None)
            out.pop("x-api-key", None)
            out.update(self.auth[provider](key))
        return out

    def upstream_url(self, provider: str, path: str, query: str) -> str:
        return self.bases[provider] + path + (("?" + query) if query else "")

    async def send(
        self, method: str, url: str, headers: dict[str, str], body: bytes
    ) -> httpx.Response:
        """``method url`` to its upstream, the answer not read yet (streamed)."""
        target = self._targets.get(url)
        if target is None:  # the few urls a gateway calls, parsed once (a bounded cache)
            transport = next((t for p, t in self._transports.items() if url.startswith(p)), None)
            if transport is None:  # every url is built from a base: a bug, said as one
                raise RuntimeError("no upstream transport for this url (gateway not started?)")
            if len(self._targets) >= _TARGETS:
                self._targets.clear()
            target = self._targets[url] = (transport, httpx.URL(url))
        transport, parsed = target
        req = httpx.Request(
            method,
            parsed,
            headers={**self._defaults, **headers},
            content=body,
            extensions=self._extensions,
        )
        t0 = time.perf_counter()
        resp = await transport.handle_async_request(req)
        self.metrics.upstream(time.perf_counter() - t0)
        resp.request = req
        return resp

    def prepared(self, agent: str, done: Prepared) -> list[dict[str, Any]]:
        """Count one ``prepare`` in the metrics; its messages."""
        self.metrics.prepared(agent, done.compactions, done.saved)
        return done.messages

    def after(self, work: Coroutine[Any, Any, None], release: Callable[[], None]) -> None:
        """Run ``work`` now, concurrently with the answer going out; ``release`` after it
        (the conversation's lock), whatever happens to the answer or the client."""

        async def run() -> None:
            try:
                await work
            except Exception as exc:  # recorded nowhere else: log the kind only
                log.warning("usage not recorded: %s", type(exc).__name__)
            finally:
                release()

        task = asyncio.get_running_loop().create_task(run())
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    # -- routes --------------------------------------------------------------------
    async def healthz(self, request: Request) -> Response:
        return JSONResponse({"status": "ok", "agents": self.pool.agents})

    async def metrics_route(self, request: Request) -> Response:
        return PlainTextResponse(
            self.metrics.render(), media_type="text/plain; version=0.0.4; charset=utf-8"
        )

    async def dispatch(self, request: Request) -> Response:
        path = request.url.path
        if self.dashboard is not None and (path == PREFIX or path.startswith(PREFIX + "/")):
            return await self.dashboard.route(request)
        method = request.method
        if method in ("GET", "HEAD") and path in ("/healthz", "/metrics", "/"):
            if path == "/metrics":
                return await self.metrics_route(request)
            return await self.healthz(request)
        # one pass over the raw headers (names arrive lower-cased); every lookup after it
        # is a dict lookup
        headers = {k.decode("latin-1"): v.decode("latin-1") for k, v in request.headers.raw}
        shape = "anthropic" if headers.get("anthropic-version") else "chat"
        agent: str | None = None
        rest = path
        try:
            if path.startswith("/agents/"):
                agent, rest = resolve_agent(
                    path, headers, self.config.default_agent, self.pool.agents
                )
            provider = provider_of(rest, headers)
        except (UnknownAgent, Unplaced) as exc:
            self.metrics.refusal("unknown agent" if isinstance(exc, UnknownAgent) else "no route")
            return error_response(404, str(exc), shape)
        api = PREPARED.get((provider, rest)) if method == "POST" else None
        shape = "anthropic" if provider == ANTHROPIC else "chat"
        if api is not None and agent is None:
            try:
                agent, _ = resolve_agent(rest, headers, self.config.default_agent, self.pool.agents)
            except UnknownAgent as exc:
                self.metrics.refusal("unknown agent")
                return error_response(404, str(exc), shape)
        try:
            tenant = self.identity.tenant(headers, server_key=bool(self.keys[provider]))
        except Refused as exc:
            self.metrics.refusal("no credential")
            return error_response(401, str(exc), shape)
        try:
            body = await _read_body(request, self.config.max_body_bytes)
        except _TooLarge:
            return error_response(
                413,
                f"request body larger than the gateway's limit of {self.config.max_body_bytes} "
                "bytes (ctxpolicy serve --max-body-bytes)",
                shape,
            )
        except ClientDisconnect:
            return Response(status_code=499)
        if api is not None:
            assert agent is not None
            call = self.prepared_call(Incoming(request, headers, api, agent, rest, body, tenant))
            return await self.guarded(request, api, agent, call)
        self.metrics.forward(*classify(method, rest))
        return await self.forward(request, headers, provider, rest, body)

    async def prepared_call(self, incoming: Incoming) -> Response:
        api, agent = incoming.api, incoming.agent
        try:
            return await completion(self, incoming)
        except (ValueError, WireError) as exc:
            self.metrics.request(api, agent, 400)
            return error_response(400, f"invalid request body: {str(exc)[:300]}", api)
        except RecursionError:
            self.metrics.request(api, agent, 400)
            return error_response(400, "invalid request body: nested too deeply", api)
        except Exception as exc:  # never a traceback (it could quote the request)
            log.error("agent=%s internal error %s", agent, type(exc).__name__)
            self.metrics.request(api, agent, 500)
            return error_response(500, f"gateway internal error ({type(exc).__name__})", api)

    async def guarded(
        self, request: Request, api: str, agent: str, work: Coroutine[Any, Any, Response]
    ) -> Response:
        """Run ``work`` (one prepared call) until its answer starts, cancelled as soon as
        the client disconnects: the upstream call is abandoned and the conversation's
        lock released at once (an answer already streaming is cut by the relay)."""
        me = asyncio.current_task()
        gone = False

        async def watch() -> None:
            nonlocal gone
            while (await request.receive())["type"] != "http.disconnect":
                pass
            gone = True
            if me is not None:
                me.cancel()

        watcher = asyncio.get_running_loop().create_task(watch())
        try:
            return await work
        except asyncio.CancelledError:
            if not gone or me is None:
                raise
            me.uncancel()  # our own cancellation, answered here
            self.metrics.disconnect(api, agent)
            log.info("agent=%s client disconnected: upstream call cancelled", agent)
            return Response(status_code=499)
        finally:
            watcher.cancel()

    async def forward(
        self, request: Request, headers: Mapping[str, str], provider: str, path: str, body: bytes
    ) -> Response:
        """A path the gateway does not prepare: forwarded unchanged to its provider's
        upstream, the answer streamed back."""
        try:
            resp = await self.send(
                request.method,
                self.upstream_url(provider, path, request.url.query),
                self.upstream_headers(headers, provider),
                body,
            )
        except httpx.HTTPError as exc:
            return error_response(
                502,
                f"upstream unreachable: {type(exc).__name__}",
                "anthropic" if provider == ANTHROPIC else "chat",
            )
        return self.stream_back(resp)

    def stream_back(
        self,
        resp: httpx.Response,
        on_done: Any = None,
        scanner: StreamScanner | None = None,
        release: Any = None,
        chunks: AsyncIterator[bytes] | None = None,
    ) -> StreamingResponse:
        """The upstream's answer to the client chunk by chunk as it arrives (never whole);
        ``chunks`` when part of it was read already (held by the recall probe)."""
        headers = {k: v for k, v in resp.headers.items() if k.lower() not in RESP_DROP}
        source = chunks if chunks is not None else body_chunks(resp)

        async def body() -> AsyncIterator[bytes]:
            try:
                async for chunk in source:
                    out = scanner.feed(chunk) if scanner is not None else chunk
                    if out:
                        yield out
                if scanner is not None:
                    rest = scanner.flush()
                    if rest:
                        yield rest
            finally:
                await resp.aclose()
                try:
                    if on_done is not None and scanner is not None and scanner.usage:
                        await on_done(scanner.usage)
                finally:
                    if release is not None:
                        release()

        return _Relay(body(), resp, release, status_code=resp.status_code, headers=headers)


class _Relay(StreamingResponse):
    """A streamed answer that releases the conversation's lock however it ends: the body's
    own cleanup may never run (a client gone before the first chunk) or be cut short by
    the cancellation of a client disconnect."""

    def __init__(
        self,
        content: AsyncIterator[bytes],
        upstream: httpx.Response,
        release: Callable[[], None] | None,
        **kw: Any,
    ) -> None:
        super().__init__(content, **kw)
        self._upstream = upstream
        self._release = release

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            try:
                with anyio.CancelScope(shield=True):
                    await self._upstream.aclose()
            finally:
                if self._release is not None:
                    self._release()


def _volatile() -> bytes:
    log.warning(
        "%s is not set: conversation ids are keyed by a per-process secret and do not "
        "survive a restart or match other workers",
        SECRET_ENV,
    )
    return secrets.token_bytes(32)


def create_app(config: GatewayConfig) -> Starlette:
    """The gateway app for ``config`` (run it with uvicorn)."""
    gw = Gateway(config)
    methods = ["GET", "POST", "PUT", "PATCH", "DELETE", "OPTIONS", "HEAD"]

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        await gw.startup()
        try:
            yield
        finally:
            await gw.shutdown()

    app = Starlette(routes=[Route("/{path:path}", gw.dispatch, methods=methods)], lifespan=lifespan)
    app.state.gateway = gw
    return app


def create_app_from_env() -> Starlette:
    """Factory for ``uvicorn --workers N``: the config ``ctxpolicy serve`` put in the env."""
    from ctxpolicy.resolve.load import resolve_all

    raw = json.loads(os.environ["CTXPOLICY_GATEWAY_CONFIG"])
    policies, _ = resolve_all(raw.pop("policy"))

    def env(name: str | None) -> str | None:
        return os.environ.get(name) or None if name else None

    api_key = env(raw.pop("api_key_env", None))
    anthropic_key = env(raw.pop("anthropic_api_key_env", None))
    tokens = env(raw.pop("client_token_env", None))
    return create_app(
        GatewayConfig(
            policies=policies,
            api_key=api_key,
            anthropic_api_key=anthropic_key,
            client_tokens=tuple(t.strip() for t in (tokens or "").split(",") if t.strip()),
            session_headers=tuple(raw.pop("session_headers", ()) or ()),
            **raw,
        )
    )
