"""The gateway's ASGI app (starlette): routes, limits, health, metrics, the call loop.

``POST /v1/chat/completions`` (OpenAI) and ``POST /v1/messages`` (Anthropic), under an
optional ``/agents/{name}`` prefix, are prepared by the conversation's session and
forwarded through one pooled :class:`httpx.AsyncClient`; streaming answers are passed
through chunk by chunk as they arrive. Every other path is forwarded unchanged.
``GET /healthz`` and ``GET /metrics`` (Prometheus text) are the gateway's own.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import secrets
import time
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import anyio.to_thread
import httpx
from starlette.applications import Starlette
from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse, PlainTextResponse, Response, StreamingResponse
from starlette.routing import Route

from ctxpolicy.gateway import recall as recall_mod
from ctxpolicy.gateway import wire_anthropic, wire_openai
from ctxpolicy.gateway.identity import conversation_id
from ctxpolicy.gateway.metrics import Metrics
from ctxpolicy.gateway.routing import UnknownAgent, resolve_agent
from ctxpolicy.gateway.sessions import SessionPool
from ctxpolicy.gateway.sse import StreamScanner
from ctxpolicy.gateway.wire_openai import WireError

if TYPE_CHECKING:  # pragma: no cover
    from ctxpolicy.engine import Session
    from ctxpolicy.policy.models import Policy

__all__ = ["GatewayConfig", "UpstreamError", "create_app"]

log = logging.getLogger("ctxpolicy.gateway")

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
_RESP_DROP = frozenset(
    {"content-length", "connection", "keep-alive", "transfer-encoding", "content-encoding"}
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
    timeout: float = 600.0
    secret: bytes = field(default=b"", repr=False)


class UpstreamError(Exception):
    """An upstream HTTP error, shaped so :func:`is_context_overflow` can read it."""

    def __init__(self, status_code: int, text: str) -> None:
        self.status_code = status_code
        self.body: Any
        try:
            self.body = json.loads(text)
        except ValueError:
            self.body = text
        err = self.body.get("error") if isinstance(self.body, dict) else None
        self.message = str(err.get("message", text)) if isinstance(err, dict) else text
        self.code = err.get("code") if isinstance(err, dict) else None
        super().__init__(f"upstream HTTP {status_code}: {text[:2000]}")


def _origin(url: str) -> str:
    url = url.rstrip("/")
    return url[:-3] if url.endswith("/v1") else url


def _error(status: int, message: str, api: str = "chat") -> JSONResponse:
    if api == "anthropic":
        kind = {
            400: "invalid_request_error",
            404: "not_found_error",
            413: "request_too_large",
        }.get(status, "api_error")
        return JSONResponse(
            {"type": "error", "error": {"type": kind, "message": message}}, status_code=status
        )
    return JSONResponse(
        {"error": {"message": message, "type": "invalid_request_error", "code": None}},
        status_code=status,
    )


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
        self.pool = SessionPool(config.policies, max_sessions=config.max_sessions)
        self.client: httpx.AsyncClient | None = None
        self.upstream = _origin(config.upstream)
        self.anthropic_upstream = _origin(config.anthropic_upstream or config.upstream)

    async def startup(self) -> None:
        self.client = httpx.AsyncClient(
            timeout=httpx.Timeout(self.config.timeout, connect=30.0),
            limits=httpx.Limits(max_connections=512, max_keepalive_connections=256),
        )

    async def shutdown(self) -> None:
        if self.client is not None:
            await self.client.aclose()
        await anyio.to_thread.run_sync(self.pool.close)

    # -- helpers -------------------------------------------------------------------
    def _headers(self, request: Request, api: str) -> dict[str, str]:
        out = {
            k: v
            for k, v in request.headers.items()
            if k not in _HOP and not k.startswith("x-ctxpolicy-")
        }
        if self.config.api_key:
            out.pop("authorization", None)
            out.pop("x-api-key", None)
            if api == "anthropic":
                out["x-api-key"] = self.config.api_key
            else:
                out["authorization"] = f"Bearer {self.config.api_key}"
        return out

    def _url(self, api: str, path: str, query: str) -> str:
        base = self.anthropic_upstream if api == "anthropic" else self.upstream
        return base + path + (("?" + query) if query else "")

    async def _send(
        self, method: str, url: str, headers: dict[str, str], body: bytes
    ) -> httpx.Response:
        assert self.client is not None
        req = self.client.build_request(method, url, headers=headers, content=body)
        t0 = time.perf_counter()
        resp = await self.client.send(req, stream=True)
        self.metrics.upstream(time.perf_counter() - t0)
        return resp

    # -- routes --------------------------------------------------------------------
    async def healthz(self, request: Request) -> Response:
        return JSONResponse({"status": "ok", "agents": self.pool.agents})

    async def metrics_route(self, request: Request) -> Response:
        return PlainTextResponse(
            self.metrics.render(), media_type="text/plain; version=0.0.4; charset=utf-8"
        )

    async def dispatch(self, request: Request) -> Response:
        path = request.url.path
        if path in ("/healthz", "/metrics") and request.method == "GET":
            return await (
                self.healthz(request) if path == "/healthz" else self.metrics_route(request)
            )
        api = "anthropic" if path.endswith("/v1/messages") else "chat"
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
                return _error(404, str(exc), api)
        try:
            body = await _read_body(request, self.config.max_body_bytes)
        except _TooLarge:
            return _error(
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
                return await self.completion(request, api, agent, rest, data)
            except (ValueError, WireError) as exc:
                self.metrics.request(api, agent, 400)
                return _error(400, f"invalid request body: {str(exc)[:300]}", api)
            except RecursionError:
                self.metrics.request(api, agent, 400)
                return _error(400, "invalid request body: nested too deeply", api)
            except Exception as exc:  # never a traceback (it could quote the request)
                log.error("agent=%s internal error %s", agent, type(exc).__name__)
                self.metrics.request(api, agent, 500)
                return _error(500, f"gateway internal error ({type(exc).__name__})", api)
        return await self.forward(request, api if agent else "other", rest, body)

    async def forward(self, request: Request, api: str, path: str, body: bytes) -> Response:
        """An unknown path: forwarded unchanged, the answer streamed back."""
        try:
            resp = await self._send(
                request.method,
                self._url(api, path, request.url.query),
                self._headers(request, api),
                body,
            )
        except httpx.HTTPError as exc:
            return _error(502, f"upstream unreachable: {type(exc).__name__}")
        return self._stream_back(resp)

    def _stream_back(
        self,
        resp: httpx.Response,
        on_done: Any = None,
        scanner: StreamScanner | None = None,
        release: Any = None,
    ) -> StreamingResponse:
        """The upstream's answer to the client chunk by chunk as it arrives (never whole)."""
        headers = {k: v for k, v in resp.headers.items() if k.lower() not in _RESP_DROP}

        async def body() -> AsyncIterator[bytes]:
            try:
                async for chunk in resp.aiter_raw():
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

        return StreamingResponse(body(), status_code=resp.status_code, headers=headers)

    async def completion(
        self, request: Request, api: str, agent: str, path: str, data: dict[str, Any]
    ) -> Response:
        wire = wire_anthropic if api == "anthropic" else wire_openai
        conv_anth = wire_anthropic.extract(data) if api == "anthropic" else None
        if conv_anth is not None:
            messages = conv_anth.messages
            client_tools = data.get("tools")
            count_tools = wire_anthropic.tools_for_count(client_tools)
        else:
            messages, count_tools = wire_openai.extract(data)
            client_tools = data.get("tools")
        stream = data.get("stream") is True
        injected_usage = False
        if stream and api == "chat" and self.config.stream_usage:
            opts = data.get("stream_options")
            if not (isinstance(opts, dict) and opts.get("include_usage")):
                # the usage chunk feeds record_usage; the client that did not ask for it
                # never sees it (StreamScanner drops it)
                injected_usage = True
                data = {
                    **data,
                    "stream_options": {
                        **(opts if isinstance(opts, dict) else {}),
                        "include_usage": True,
                    },
                }
        use_recall = self.config.recall and not stream
        send_tools = None
        if use_recall:
            extra = (
                recall_mod.anthropic_tools() if api == "anthropic" else recall_mod.openai_tools()
            )
            send_tools = recall_mod.with_tools(client_tools, extra)
            count_tools = (count_tools or []) + [
                t
                for t in recall_mod.openai_tools()
                if t["function"]["name"]
                not in {(c.get("function") or {}).get("name") for c in (count_tools or [])}
            ]
        conv = conversation_id(request.headers, agent, messages, self.secret)
        headers = self._headers(request, api)
        url = self._url(api, path, request.url.query)
        lock = self.pool.lock(agent, conv)
        await lock.acquire()
        released = False
        handed_off = False  # the stream releases the lock once it is done

        def release() -> None:
            nonlocal released
            if not released:
                released = True
                lock.release()

        try:
            session = await anyio.to_thread.run_sync(self.pool.get, agent, conv)
            prepared = await self._prepare(session, agent, messages, count_tools)
            raw_anth = list(data["messages"]) if conv_anth is not None else None
            rounds = 0
            while True:
                up = (
                    wire_anthropic.build(data, conv_anth, prepared, send_tools)
                    if conv_anth is not None
                    else wire_openai.build(data, prepared, send_tools)
                )
                try:
                    resp = await self._send("POST", url, headers, up)
                except httpx.HTTPError as exc:
                    self.metrics.request(api, agent, 502)
                    return _error(502, f"upstream unreachable: {type(exc).__name__}", api)
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
                        self.metrics.request(api, agent, resp.status_code)
                        return Response(
                            text.encode(),
                            status_code=resp.status_code,
                            media_type=resp.headers.get("content-type", "application/json"),
                        )
                    self.metrics.retry(agent)
                    prepared = retry
                    continue
                if stream:
                    self.metrics.request(api, agent, resp.status_code)

                    async def done(tokens: int, s: Session = session) -> None:
                        await anyio.to_thread.run_sync(s.record_usage, tokens)

                    scanner = StreamScanner(api, drop_usage_chunk=injected_usage)
                    out = self._stream_back(resp, done, scanner, release)
                    handed_off = True
                    return out
                raw = await resp.aread()
                await resp.aclose()
                try:
                    answer = json.loads(raw)
                except ValueError:
                    answer = None
                tokens = wire.usage(answer)
                if tokens:
                    await anyio.to_thread.run_sync(session.record_usage, tokens)
                if use_recall and rounds < self.config.recall_rounds:
                    msg, calls = wire.assistant_and_calls(answer)
                    if msg is not None and recall_mod.is_recall_only([c[1] for c in calls]):
                        rounds += 1
                        self.metrics.recall(agent)
                        _, handler = session.recall_tool()
                        results = [
                            (cid, await anyio.to_thread.run_sync(handler, name, args))
                            for cid, name, args in calls
                        ]
                        if conv_anth is not None and raw_anth is not None:
                            raw_anth = [*raw_anth, msg, wire_anthropic.tool_results_turn(results)]
                            conv_anth = wire_anthropic.AnthropicConversation(
                                raw_anth, data.get("system")
                            )
                            messages = conv_anth.messages
                        else:
                            messages = [
                                *messages,
                                msg,
                                *(wire_openai.tool_message(cid, text) for cid, text in results),
                            ]
                        prepared = await self._prepare(session, agent, messages, count_tools)
                        continue
                self.metrics.request(api, agent, resp.status_code)
                rh = {k: v for k, v in resp.headers.items() if k.lower() not in _RESP_DROP}
                return Response(raw, status_code=resp.status_code, headers=rh)
        finally:
            if not handed_off:
                release()

    async def _prepare(
        self,
        session: Session,
        agent: str,
        messages: list[dict[str, Any]],
        tools: list[dict[str, Any]] | None,
    ) -> list[dict[str, Any]]:
        before = sum(session.stats.compactions.values())
        prepared: list[dict[str, Any]] = await anyio.to_thread.run_sync(
            session.prepare, messages, tools
        )
        status = session.status or {}
        after = sum(session.stats.compactions.values())
        saved = int(status.get("tokens_in", 0) or 0) - int(status.get("used", 0) or 0)
        self.metrics.prepared(agent, after - before, saved)
        return prepared


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
