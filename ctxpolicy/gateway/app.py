"""The gateway's ASGI app (starlette): routes, limits, health, metrics, the call loop.

``POST /v1/chat/completions`` (OpenAI) and ``POST /v1/messages`` (Anthropic), under an
optional ``/agents/{name}`` prefix, are prepared by the conversation's session and
forwarded through one pooled :class:`httpx.AsyncClient`; streaming answers are passed
through chunk by chunk as they arrive. Every other path is forwarded unchanged.
``GET /healthz`` and ``GET /metrics`` (Prometheus text) are the gateway's own.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import secrets
import time
from collections.abc import AsyncIterator, Callable, Coroutine, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import anyio
import anyio.to_thread
import httpx
from starlette.applications import Starlette
from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse, PlainTextResponse, Response, StreamingResponse
from starlette.routing import Route

from ctxpolicy.gateway.calls import Prepared, completion
from ctxpolicy.gateway.dashboard import PREFIX, Dashboard, observers
from ctxpolicy.gateway.errors import RESP_DROP, UpstreamError, error_response
from ctxpolicy.gateway.metrics import Metrics
from ctxpolicy.gateway.routing import UnknownAgent, resolve_agent
from ctxpolicy.gateway.sessions import SessionPool
from ctxpolicy.gateway.sse import StreamScanner
from ctxpolicy.gateway.unprepared import classify
from ctxpolicy.wire import WIRES, WireError, for_path

if TYPE_CHECKING:  # pragma: no cover
    from ctxpolicy.policy.models import Policy

__all__ = ["GatewayConfig", "UpstreamError", "create_app"]

log = logging.getLogger("ctxpolicy.gateway")

#: The APIs (:data:`ctxpolicy.wire.WIRES`) whose requests the gateway prepares.
_PREPARED = ("chat", "anthropic")

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


@dataclass
class GatewayConfig:
    """What ``ctxpolicy serve`` was started with."""

    policies: Mapping[str, Policy]
    upstream: str
    anthropic_upstream: str | None = None
    default_agent: str | None = None
    recall: bool = False
    recall_rounds: int = 4
    stream_usage: bool = True  # ask OpenAI-style upstreams for the usage chunk
    api_key: str | None = field(default=None, repr=False)  # server-side credential
    max_body_bytes: int = 32 * 1024 * 1024
    max_sessions: int = 4096
    #: a directory: each conversation's requests recorded as a trace (``record=``)
    record: str | None = None
    timeout: float = 600.0
    secret: bytes = field(default=b"", repr=False)
    #: serve ``/dashboard`` (gateway/dashboard.py)
    dashboard: bool = False
    #: a file: every session's events appended as JSON lines (``ctxpolicy report``)
    events: str | None = None


def _origin(url: str) -> str:
    url = url.rstrip("/")
    return url[:-3] if url.endswith("/v1") else url


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
        )
        self.client: httpx.AsyncClient | None = None
        self.upstream = _origin(config.upstream)
        self.anthropic_upstream = _origin(config.anthropic_upstream or config.upstream)
        self._tasks: set[asyncio.Task[None]] = set()

    async def startup(self) -> None:
        self.client = httpx.AsyncClient(
            timeout=httpx.Timeout(self.config.timeout, connect=30.0),
            limits=httpx.Limits(max_connections=512, max_keepalive_connections=256),
        )

    async def shutdown(self) -> None:
        if self._tasks:  # usage still being recorded: let it finish before closing
            await asyncio.gather(*self._tasks, return_exceptions=True)
        if self.client is not None:
            await self.client.aclose()
        await anyio.to_thread.run_sync(self.pool.close)

    # -- helpers -------------------------------------------------------------------
    def upstream_headers(self, request: Request, api: str) -> dict[str, str]:
        out = {
            k: v
            for k, v in request.headers.items()
            if k not in _HOP and not k.startswith("x-ctxpolicy-")
        }
        if self.config.api_key:
            out.pop("authorization", None)
            out.pop("x-api-key", None)
            out.update(WIRES.get(api, WIRES["chat"]).auth_headers(self.config.api_key))
        return out

    def upstream_url(self, api: str, path: str, query: str) -> str:
        provider = WIRES[api].provider if api in WIRES else "openai"
        base = {"anthropic": self.anthropic_upstream}.get(provider, self.upstream)
        return base + path + (("?" + query) if query else "")

    async def send(
        self, method: str, url: str, headers: dict[str, str], body: bytes
    ) -> httpx.Response:
        assert self.client is not None
        req = self.client.build_request(method, url, headers=headers, content=body)
        t0 = time.perf_counter()
        resp = await self.client.send(req, stream=True)
        self.metrics.upstream(time.perf_counter() - t0)
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
        if path in ("/healthz", "/metrics") and request.method == "GET":
            return await (
                self.healthz(request) if path == "/healthz" else self.metrics_route(request)
            )
        wire = for_path(path)
        api = wire.name if wire is not None and wire.name in _PREPARED else "chat"
        agent: str | None = None
        rest = path
        if path.startswith("/agents/") or (
            request.method == "POST" and path.endswith(("/v1/chat/completions", "/v1/messages"))
        ):
            try:
                agent, rest = resolve_agent(
                    path, request.headers, self.config.default_agent, self.pool.agents
                )
            except UnknownAgent as exc:
                return error_response(404, str(exc), api)
        try:
            body = await _read_body(request, self.config.max_body_bytes)
        except _TooLarge:
            return error_response(
                413,
                f"request body larger than the gateway's limit of {self.config.max_body_bytes} "
                "bytes (ctxpolicy serve --max-body-bytes)",
                api,
            )
        except ClientDisconnect:
            return Response(status_code=499)
        if request.method == "POST" and rest in ("/v1/chat/completions", "/v1/messages"):
            assert agent is not None
            try:
                data = json.loads(body)
                if not isinstance(data, dict):
                    raise WireError("the request body must be a JSON object")
                return await completion(self, request, api, agent, rest, data)
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
        self.metrics.forward(*classify(request.method, rest))
        return await self.forward(request, api if agent else "other", rest, body)

    async def forward(self, request: Request, api: str, path: str, body: bytes) -> Response:
        """An unknown path: forwarded unchanged, the answer streamed back."""
        try:
            resp = await self.send(
                request.method,
                self.upstream_url(api, path, request.url.query),
                self.upstream_headers(request, api),
                body,
            )
        except httpx.HTTPError as exc:
            return error_response(502, f"upstream unreachable: {type(exc).__name__}")
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
        source = chunks if chunks is not None else resp.aiter_raw()

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
    from ctxpolicy.policy.resolve import resolve_all

    raw = json.loads(os.environ["CTXPOLICY_GATEWAY_CONFIG"])
    policies, _ = resolve_all(raw.pop("policy"))
    key_env = raw.pop("api_key_env", None)
    api_key = os.environ.get(key_env) if key_env else None
    return create_app(GatewayConfig(policies=policies, api_key=api_key, **raw))
