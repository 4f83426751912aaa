"""A scripted, local LLM server speaking the OpenAI and Anthropic HTTP APIs.

For tests and examples that drive a *real* SDK (``openai``, ``anthropic``,
anything OpenAI-compatible) against a model with a small context window::

    with ScriptedLLMServer(window=6000, script=[{"content": "hi"}]) as srv:
        client = openai.OpenAI(base_url=srv.base_url, api_key="test")
        client.chat.completions.create(model="m", messages=[...])
        srv.requests[-1]          # the JSON body the SDK sent

The server listens on ``127.0.0.1`` only (a free port), in a daemon thread, using
nothing but :mod:`http.server`. Every request body is recorded. A request whose
prompt counts more tokens than ``window`` is rejected exactly like the provider
does (HTTP 400, ``context_length_exceeded`` / ``prompt is too long``), stating
the real limit; otherwise the next scripted reply is returned.

Token counts are ctxpolicy's exact tiktoken count (``cl100k_base``, offline copy)
with the OpenAI chat framing, tool schemas included — the same count a policy
using ``tokenizer: cl100k_base`` computes, so tests can reason about it exactly.

Endpoints: ``POST /v1/chat/completions``, ``POST /v1/responses`` (OpenAI),
``POST /v1/messages`` (Anthropic), ``GET /v1/models``. Chat Completions and Messages
stream too (``stream: true``): the same reply as server-sent events, in the providers'
event shapes (chat chunks with a usage chunk when ``stream_options.include_usage`` is
set, then ``[DONE]``; Anthropic ``message_start`` ... ``message_stop``; Responses
``response.created`` ... ``response.completed``, as the Codex CLI reads them).

Scripted replies (``script``) are dicts, the same for every API:

* ``{"content": "text"}`` — a final text answer;
* ``{"tool_calls": [{"name": "read_file", "arguments": {...}, "id": "optional"}],
  "content": "optional text"}`` — tool calls (several = parallel calls);
* ``{"overflow": True}`` — reject this request as a context overflow whatever its size;
* ``{"status": 500, "body": {...}}`` — any other HTTP error;
* ``"prompt_tokens": N`` in a reply overrides the reported ``usage`` input tokens;
* ``"delay": S`` — answer after S seconds; a client that disconnects meanwhile is seen
  (``abandoned`` counts it) and gets nothing;
* ``"headers": {...}`` — extra response headers (e.g. ``retry-after`` on a 429);
* ``"thinking": "text"`` (Anthropic) — a signed thinking block before the answer
  (``signature`` given or made up);
* a dict with ``"choices"`` (OpenAI) / ``"type": "message"`` (Anthropic) /
  ``"object": "response"`` (Responses) is returned verbatim.

``script`` may be a list (the n-th accepted request gets the n-th reply; once it is
used up every request gets ``{"content": "done"}``) or a callable receiving the
request body (plus, if it takes two arguments, the API name ``"chat"``,
``"responses"`` or ``"anthropic"``) and returning a reply.

Beside this module, one topic each: :mod:`.server_count` (how a request is counted),
:mod:`.server_replies` (reply and error bodies: an error takes the shape of the provider
the wire layer names for the API), :mod:`.server_events` (the streams).
"""

from __future__ import annotations

import inspect
import itertools
import json
import os
import select
import socket
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Literal

# counting, reply bodies and streams live beside this module, one topic each; the
# names tests and examples import from here stay importable from here
from ctxpolicy.testing.server_count import count_anthropic_tokens as count_anthropic_tokens
from ctxpolicy.testing.server_count import count_openai_tokens as count_openai_tokens
from ctxpolicy.testing.server_count import count_request
from ctxpolicy.testing.server_events import sse_events as sse_events
from ctxpolicy.testing.server_replies import _anthropic_reply as _anthropic_reply
from ctxpolicy.testing.server_replies import _chat_reply as _chat_reply
from ctxpolicy.testing.server_replies import error_body, overflow_body, reply_body

__all__ = ["RecordedRequest", "ScriptedLLMServer", "count_anthropic_tokens", "count_openai_tokens"]

Api = Literal["chat", "responses", "anthropic"]
Reply = dict[str, Any]
Script = Callable[..., Reply] | Sequence[Reply] | None

#: Upper bound of one request body (bytes); larger bodies get HTTP 413.
MAX_BODY_BYTES = 32 * 1024 * 1024
#: Recorded requests kept (oldest dropped first).
MAX_RECORDS = 20_000

_DEFAULT_REPLY: Reply = {"content": "done"}


@dataclass(frozen=True)
class RecordedRequest:
    """One request the server received."""

    api: Api
    path: str
    body: dict[str, Any]
    tokens: int
    status: int


# --------------------------------------------------------------------------- server


class ScriptedLLMServer:
    """A local OpenAI- and Anthropic-compatible server with a context window.

    * ``base_url`` — for ``openai.OpenAI(base_url=...)`` (ends with ``/v1``);
    * ``anthropic_base_url`` — for ``anthropic.Anthropic(base_url=...)``;
    * ``requests`` — JSON bodies received, in order (rejected ones included);
    * ``records`` — :class:`RecordedRequest` per request (API, tokens, status);
    * ``rejections`` — how many requests were rejected as a context overflow;
    * ``window`` — may be changed while running.

    Use as a context manager, or ``start()`` / ``stop()``.
    """

    def __init__(
        self, window: int = 8192, script: Script = None, *, model: str = "scripted-model"
    ) -> None:
        if window <= 0:
            raise ValueError("window must be positive")
        self.window = int(window)
        self.model = model
        self._script = script
        self._script_iter = iter(list(script)) if isinstance(script, Sequence) else None
        self._script_arity = _arity(script) if callable(script) else 0
        self._lock = threading.Lock()
        self._records: deque[RecordedRequest] = deque(maxlen=MAX_RECORDS)
        self.rejections = 0
        #: requests whose client disconnected during a ``delay`` (never answered)
        self.abandoned = 0
        self._ids = itertools.count(1)
        self._httpd: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    # -- lifecycle --------------------------------------------------------------------
    def start(self) -> ScriptedLLMServer:
        if self._httpd is not None:
            return self
        server = self

        class Handler(_Handler):
            owner = server

        httpd = _Server(("127.0.0.1", 0), Handler)
        self._httpd = httpd
        self._thread = threading.Thread(
            target=httpd.serve_forever, name="ScriptedLLMServer", daemon=True
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        httpd, self._httpd = self._httpd, None
        if httpd is not None:
            httpd.shutdown()
            httpd.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None

    def __enter__(self) -> ScriptedLLMServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- addresses ----------------------------------------------------------------------
    @property
    def port(self) -> int:
        if self._httpd is None:
            raise RuntimeError(
                "the server is not running (call start() or use it as a context manager)"
            )
        return int(self._httpd.server_address[1])

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def base_url(self) -> str:
        """OpenAI-compatible base URL (``.../v1``)."""
        return f"{self.url}/v1"

    @property
    def anthropic_base_url(self) -> str:
        """Base URL for the Anthropic SDK (it appends ``/v1/messages`` itself)."""
        return self.url

    # -- records --------------------------------------------------------------------------
    @property
    def records(self) -> list[RecordedRequest]:
        with self._lock:
            return list(self._records)

    @property
    def requests(self) -> list[dict[str, Any]]:
        return [r.body for r in self.records]

    @property
    def accepted(self) -> list[RecordedRequest]:
        return [r for r in self.records if r.status == 200]

    def reset(self) -> None:
        """Forget recorded requests and the rejection count (the script position stays)."""
        with self._lock:
            self._records.clear()
            self.rejections = 0

    # -- handling -----------------------------------------------------------------------
    def _next_reply(self, body: dict[str, Any], api: Api) -> Reply:
        script = self._script
        if script is None:
            return dict(_DEFAULT_REPLY)
        if callable(script):
            reply = script(body, api) if self._script_arity >= 2 else script(body)
            return dict(reply) if reply is not None else dict(_DEFAULT_REPLY)
        assert self._script_iter is not None
        with self._lock:
            return dict(next(self._script_iter, _DEFAULT_REPLY))

    def _record(self, api: Api, path: str, body: dict[str, Any], tokens: int, status: int) -> None:
        with self._lock:
            self._records.append(RecordedRequest(api, path, body, tokens, status))

    def handle(self, api: Api, path: str, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        """Answer one request: ``(status, JSON body)``. Public for direct unit tests."""
        status, payload, _ = self.handle_full(api, path, body)
        return status, payload

    def handle_full(
        self, api: Api, path: str, body: dict[str, Any]
    ) -> tuple[int, dict[str, Any], Reply]:
        """:meth:`handle` with the scripted reply (its ``delay`` and ``headers``)."""
        reply: Reply = {}
        status, payload = self._handle(api, path, body, reply)
        return status, payload, reply

    def _handle(
        self, api: Api, path: str, body: dict[str, Any], seen: Reply
    ) -> tuple[int, dict[str, Any]]:
        try:
            tokens = count_request(api, body)
        except Exception as exc:
            self._record(api, path, body, -1, 400)
            return 400, error_body(api, 400, f"could not read the request: {exc}")
        window = self.window
        if tokens > window:
            with self._lock:
                self.rejections += 1
            self._record(api, path, body, tokens, 400)
            return 400, overflow_body(api, tokens, window)
        reply = self._next_reply(body, api)
        seen.update(reply)
        if reply.get("overflow"):
            with self._lock:
                self.rejections += 1
            self._record(api, path, body, tokens, 400)
            return 400, overflow_body(api, max(tokens, window + 1), window)
        if "status" in reply and int(reply["status"]) != 200:
            status = int(reply["status"])
            self._record(api, path, body, tokens, status)
            return status, dict(reply.get("body") or error_body(api, status, "scripted error"))
        self._record(api, path, body, tokens, 200)
        if (
            "choices" in reply
            or reply.get("type") == "message"
            or reply.get("object") == "response"
        ):
            return 200, reply
        prompt_tokens = int(reply.get("prompt_tokens", tokens))
        model = str(body.get("model") or self.model)

        def ids() -> str:
            return f"call_{next(self._ids):05d}"

        return 200, reply_body(api, reply, model, prompt_tokens, ids)


def _arity(fn: Callable[..., Any]) -> int:
    try:
        params = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):
        return 1
    if any(p.kind == p.VAR_POSITIONAL for p in params):
        return 2
    return sum(1 for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD))


_ROUTES: dict[str, Api] = {
    "/v1/chat/completions": "chat",
    "/chat/completions": "chat",
    "/v1/responses": "responses",
    "/responses": "responses",
    "/v1/messages": "anthropic",
}


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    # the listen backlog: socketserver's default of 5 drops the connections of a burst
    # of 50+ concurrent clients (each retried by TCP after ~1 s)
    request_queue_size = 512


class _Handler(BaseHTTPRequestHandler):
    owner: ScriptedLLMServer
    protocol_version = "HTTP/1.1"
    timeout = 30
    # TCP_NODELAY: the headers and the body are two writes; with Nagle on, the body
    # waits for the peer's delayed ACK of the headers (~40 ms on Linux loopback)
    disable_nagle_algorithm = True

    def log_message(self, format: str, *args: Any) -> None:  # silence stderr logging
        return

    def _send(
        self, status: int, payload: Mapping[str, Any], headers: Mapping[str, Any] | None = None
    ) -> None:
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        for k, v in (headers or {}).items():
            self.send_header(str(k), str(v))
        if status != 200 and not any(str(k).lower() == "x-should-retry" for k in headers or {}):
            self.send_header(
                "x-should-retry", "false"
            )  # the SDKs must not retry a 4xx/5xx by themselves
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self) -> None:
        path = self.path.split("?", 1)[0].rstrip("/")
        if path in ("/v1/models", "/models"):
            self._send(
                200,
                {
                    "object": "list",
                    "data": [{"id": self.owner.model, "object": "model", "owned_by": "ctxpolicy"}],
                },
            )
        else:
            self._send(404, {"error": {"message": f"no route {path}", "type": "not_found"}})

    def do_POST(self) -> None:
        path = self.path.split("?", 1)[0].rstrip("/")
        api = _ROUTES.get(path)
        try:
            length = int(self.headers.get("Content-Length") or 0)
        except ValueError:
            length = -1
        if length < 0 or length > MAX_BODY_BYTES:
            self.close_connection = True
            self._send(
                413,
                {"error": {"message": "request body too large", "type": "invalid_request_error"}},
            )
            return
        raw = self.rfile.read(length) if length else b""
        if api is None:
            self._send(404, {"error": {"message": f"no route {path}", "type": "not_found"}})
            return
        try:
            body = json.loads(raw or b"{}")
            if not isinstance(body, dict):
                raise ValueError("body is not a JSON object")
        except ValueError as exc:
            self._send(400, error_body(api, 400, f"invalid JSON: {exc}"))
            return
        reply: Reply = {}
        try:
            status, payload, reply = self.owner.handle_full(api, path, body)
        except Exception as exc:  # a broken script must answer, not hang the client
            status, payload = 500, error_body(api, 500, _script_failure(exc))
        delay = float(reply.get("delay") or 0)
        if delay > 0 and not self._wait(delay):
            with self.owner._lock:
                self.owner.abandoned += 1
            self.close_connection = True
            return
        if status == 200 and body.get("stream") is True:
            self._send_events(sse_events(api, payload, body))
            return
        self._send(status, payload, reply.get("headers"))

    def _wait(self, seconds: float) -> bool:
        """Sleep ``seconds``; False as soon as the client has closed the connection."""
        end = time.monotonic() + seconds
        while True:
            left = end - time.monotonic()
            if left <= 0:
                return True
            readable, _, _ = select.select([self.connection], [], [], min(left, 0.02))
            if readable:
                try:
                    if not self.connection.recv(1, socket.MSG_PEEK):
                        return False  # EOF: the client is gone
                except OSError:
                    return False

    def _send_events(self, events: list[bytes]) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        for ev in events:  # one HTTP chunk per event, flushed as it is written
            self.wfile.write(f"{len(ev):x}\r\n".encode() + ev + b"\r\n")
            self.wfile.flush()
        self.wfile.write(b"0\r\n\r\n")


def _script_failure(exc: BaseException) -> str:
    """One line naming what failed and where (never a stack trace): the error of the
    server's ``script``, and the file:line of the script's frame that raised it."""
    import traceback

    frames = traceback.extract_tb(exc.__traceback__)
    where = ""
    if frames:
        last = frames[-1]
        where = f" at {os.path.basename(last.filename)}:{last.lineno}"
    return f"the scripted model (the server's `script`) failed{where}: {type(exc).__name__}: {exc}"
