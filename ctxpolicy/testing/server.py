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
set, then ``[DONE]``; Anthropic ``message_start`` ... ``message_stop``). A streaming
Responses request gets a 400.

Scripted replies (``script``) are dicts, the same for every API:

* ``{"content": "text"}`` — a final text answer;
* ``{"tool_calls": [{"name": "read_file", "arguments": {...}, "id": "optional"}],
  "content": "optional text"}`` — tool calls (several = parallel calls);
* ``{"overflow": True}`` — reject this request as a context overflow whatever its size;
* ``{"status": 500, "body": {...}}`` — any other HTTP error;
* ``"prompt_tokens": N`` in a reply overrides the reported ``usage`` input tokens;
* a dict with ``"choices"`` (OpenAI) / ``"type": "message"`` (Anthropic) /
  ``"object": "response"`` (Responses) is returned verbatim.

``script`` may be a list (the n-th accepted request gets the n-th reply; once it is
used up every request gets ``{"content": "done"}``) or a callable receiving the
request body (plus, if it takes two arguments, the API name ``"chat"``,
``"responses"`` or ``"anthropic"``) and returning a reply.
"""

from __future__ import annotations

import inspect
import itertools
import json
import os
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Literal

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


# --------------------------------------------------------------------------- counting

_counter_lock = threading.Lock()
_counter: Any = None


def _get_counter() -> Any:
    global _counter
    with _counter_lock:
        if _counter is None:
            from ctxpolicy.policy.models import ModelSpec
            from ctxpolicy.tokens import TokenCounter

            _counter = TokenCounter(
                ModelSpec(
                    context_window=1_000_000, tokenizer=["cl100k_base", "quicktok:cl100k_base"]
                )
            )
        return _counter


def count_openai_tokens(
    messages: Sequence[Mapping[str, Any]], tools: Sequence[Mapping[str, Any]] | None = None
) -> int:
    """Prompt tokens of a Chat Completions request, as this server counts them."""
    c = _get_counter()
    return int(c.count_messages(list(messages)) + (c.count_tools(list(tools)) if tools else 0))


def _block_text(block: Any) -> str:
    if isinstance(block, str):
        return block
    if not isinstance(block, Mapping):
        return json.dumps(block, default=str)
    btype = block.get("type")
    if btype == "text":
        return str(block.get("text", ""))
    if btype in ("thinking",):
        return str(block.get("thinking", ""))
    if btype == "redacted_thinking":
        return ""
    if btype == "tool_use":
        return f"{block.get('name', '')} {json.dumps(block.get('input', {}), default=str)}"
    if btype == "tool_result":
        content = block.get("content")
        if isinstance(content, list):
            return "\n".join(_block_text(b) for b in content)
        return "" if content is None else str(content)
    if btype in ("image", "document"):
        return ""
    return json.dumps(block, default=str)


def count_anthropic_tokens(body: Mapping[str, Any]) -> int:
    """Prompt tokens of a Messages API request (text blocks, tool use/results, tools)."""
    msgs: list[dict[str, Any]] = []
    system = body.get("system")
    if system:
        text = system if isinstance(system, str) else "\n".join(_block_text(b) for b in system)
        msgs.append({"role": "system", "content": text})
    images = 0
    for m in body.get("messages") or []:
        content = m.get("content")
        if isinstance(content, list):
            images += sum(
                1
                for b in content
                if isinstance(b, Mapping) and b.get("type") in ("image", "document")
            )
            text = "\n".join(_block_text(b) for b in content)
        else:
            text = "" if content is None else str(content)
        msgs.append({"role": str(m.get("role", "user")), "content": text})
    tools = [t for t in body.get("tools") or [] if isinstance(t, Mapping)]
    return count_openai_tokens(msgs, tools) + 1600 * images


def _responses_messages(body: Mapping[str, Any]) -> list[dict[str, Any]]:
    msgs: list[dict[str, Any]] = []
    if body.get("instructions"):
        msgs.append({"role": "system", "content": str(body["instructions"])})
    items = body.get("input")
    if isinstance(items, str):
        return [*msgs, {"role": "user", "content": items}]
    for it in items or []:
        if not isinstance(it, Mapping):
            continue
        t = it.get("type", "message")
        if t == "message":
            content = it.get("content")
            if isinstance(content, list):
                content = "\n".join(
                    str(p.get("text", "")) for p in content if isinstance(p, Mapping)
                )
            msgs.append({"role": str(it.get("role", "user")), "content": content or ""})
        elif t == "function_call":
            msgs.append(
                {"role": "assistant", "content": f"{it.get('name', '')} {it.get('arguments', '')}"}
            )
        elif t == "function_call_output":
            out = it.get("output")
            msgs.append(
                {
                    "role": "tool",
                    "content": out if isinstance(out, str) else json.dumps(out, default=str),
                }
            )
        else:
            msgs.append({"role": "assistant", "content": json.dumps(it, default=str)})
    return msgs


# --------------------------------------------------------------------------- replies


def _norm_calls(reply: Mapping[str, Any], ids: Callable[[], str]) -> list[dict[str, Any]]:
    out = []
    for tc in reply.get("tool_calls") or []:
        args = tc.get("arguments", tc.get("input", {}))
        out.append(
            {
                "id": str(tc.get("id") or ids()),
                "name": str(tc["name"]),
                "arguments": args if isinstance(args, str) else json.dumps(args),
                "input": json.loads(args) if isinstance(args, str) else dict(args),
            }
        )
    return out


def _chat_reply(
    reply: Mapping[str, Any], model: str, prompt_tokens: int, ids: Callable[[], str]
) -> dict[str, Any]:
    calls = _norm_calls(reply, ids)
    msg: dict[str, Any] = {"role": "assistant", "content": reply.get("content")}
    if calls:
        msg["tool_calls"] = [
            {
                "id": c["id"],
                "type": "function",
                "function": {"name": c["name"], "arguments": c["arguments"]},
            }
            for c in calls
        ]
    completion = int(reply.get("completion_tokens", 10))
    return {
        "id": f"chatcmpl-{ids()}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": [
            {
                "index": 0,
                "message": msg,
                "logprobs": None,
                "finish_reason": "tool_calls" if calls else "stop",
            }
        ],
        "usage": {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": completion,
            "total_tokens": prompt_tokens + completion,
        },
    }


def _anthropic_reply(
    reply: Mapping[str, Any], model: str, prompt_tokens: int, ids: Callable[[], str]
) -> dict[str, Any]:
    calls = _norm_calls(reply, ids)
    content: list[dict[str, Any]] = []
    if reply.get("content"):
        content.append({"type": "text", "text": str(reply["content"])})
    for c in calls:
        cid = c["id"] if c["id"].startswith("toolu_") else f"toolu_{c['id']}"
        content.append({"type": "tool_use", "id": cid, "name": c["name"], "input": c["input"]})
    return {
        "id": f"msg_{ids()}",
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": content,
        "stop_reason": "tool_use" if calls else "end_turn",
        "stop_sequence": None,
        "usage": {
            "input_tokens": prompt_tokens,
            "output_tokens": int(reply.get("completion_tokens", 10)),
            "cache_creation_input_tokens": 0,
            "cache_read_input_tokens": 0,
        },
    }


def _sse(data: Mapping[str, Any], event: str | None = None) -> bytes:
    head = f"event: {event}\n" if event else ""
    return (head + "data: " + json.dumps(data, separators=(",", ":")) + "\n\n").encode()


def sse_events(api: str, reply: Mapping[str, Any], body: Mapping[str, Any]) -> list[bytes]:
    """A complete (non-streaming) reply as the server-sent events a provider streams."""
    if api == "anthropic":
        return _anthropic_events(reply)
    return _chat_events(reply, bool((body.get("stream_options") or {}).get("include_usage")))


def _chat_events(reply: Mapping[str, Any], include_usage: bool) -> list[bytes]:
    base = {k: reply.get(k) for k in ("id", "created", "model")}
    base["object"] = "chat.completion.chunk"
    choice = (reply.get("choices") or [{}])[0]
    msg = choice.get("message") or {}

    def chunk(delta: dict[str, Any], finish: str | None = None) -> bytes:
        c = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}
        return _sse({**base, "choices": [c]})

    out = [chunk({"role": "assistant", "content": ""})]
    text = msg.get("content") or ""
    for i in range(0, len(text), 16):
        out.append(chunk({"content": text[i : i + 16]}))
    for n, call in enumerate(msg.get("tool_calls") or []):
        fn = call.get("function") or {}
        head = {"index": n, "id": call.get("id"), "type": "function"}
        out.append(
            chunk({"tool_calls": [{**head, "function": {"name": fn.get("name"), "arguments": ""}}]})
        )
        out.append(
            chunk(
                {"tool_calls": [{"index": n, "function": {"arguments": fn.get("arguments", "")}}]}
            )
        )
    out.append(chunk({}, choice.get("finish_reason") or "stop"))
    if include_usage:
        out.append(_sse({**base, "choices": [], "usage": reply.get("usage")}))
    out.append(b"data: [DONE]\n\n")
    return out


def _anthropic_events(reply: Mapping[str, Any]) -> list[bytes]:
    usage = dict(reply.get("usage") or {})
    start = {k: v for k, v in reply.items() if k not in ("content", "stop_reason", "usage")}
    start.update(content=[], stop_reason=None, usage={**usage, "output_tokens": 1})
    out = [_sse({"type": "message_start", "message": start}, "message_start")]
    for i, block in enumerate(reply.get("content") or []):
        if block.get("type") == "tool_use":
            first = {**block, "input": {}}
            delta = {"type": "input_json_delta", "partial_json": json.dumps(block.get("input"))}
        else:
            first = {"type": "text", "text": ""}
            delta = {"type": "text_delta", "text": str(block.get("text", ""))}
        ev = {"type": "content_block_start", "index": i, "content_block": first}
        out.append(_sse(ev, "content_block_start"))
        out.append(
            _sse({"type": "content_block_delta", "index": i, "delta": delta}, "content_block_delta")
        )
        out.append(_sse({"type": "content_block_stop", "index": i}, "content_block_stop"))
    end: dict[str, Any] = {"stop_reason": reply.get("stop_reason"), "stop_sequence": None}
    ev = {
        "type": "message_delta",
        "delta": end,
        "usage": {"output_tokens": usage.get("output_tokens", 1)},
    }
    out.append(_sse(ev, "message_delta"))
    out.append(_sse({"type": "message_stop"}, "message_stop"))
    return out


def _responses_reply(
    reply: Mapping[str, Any], model: str, prompt_tokens: int, ids: Callable[[], str]
) -> dict[str, Any]:
    calls = _norm_calls(reply, ids)
    output: list[dict[str, Any]] = []
    if reply.get("content"):
        output.append(
            {
                "type": "message",
                "id": f"msg_{ids()}",
                "role": "assistant",
                "status": "completed",
                "content": [
                    {"type": "output_text", "text": str(reply["content"]), "annotations": []}
                ],
            }
        )
    for c in calls:
        output.append(
            {
                "type": "function_call",
                "id": f"fc_{ids()}",
                "call_id": c["id"],
                "name": c["name"],
                "arguments": c["arguments"],
                "status": "completed",
            }
        )
    completion = int(reply.get("completion_tokens", 10))
    return {
        "id": f"resp_{ids()}",
        "object": "response",
        "created_at": int(time.time()),
        "status": "completed",
        "model": model,
        "output": output,
        "parallel_tool_calls": True,
        "tool_choice": "auto",
        "tools": [],
        "usage": {
            "input_tokens": prompt_tokens,
            "input_tokens_details": {"cached_tokens": 0},
            "output_tokens": completion,
            "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": prompt_tokens + completion,
        },
    }


def _overflow_body(api: Api, tokens: int, window: int) -> dict[str, Any]:
    if api == "anthropic":
        return {
            "type": "error",
            "error": {
                "type": "invalid_request_error",
                "message": f"prompt is too long: {tokens} tokens > {window} maximum",
            },
        }
    return {
        "error": {
            "message": (
                f"This model's maximum context length is {window} tokens. However, your messages "
                f"resulted in {tokens} tokens. Please reduce the length of the messages."
            ),
            "type": "invalid_request_error",
            "param": "messages" if api == "chat" else "input",
            "code": "context_length_exceeded",
        }
    }


def _error_body(api: Api, status: int, message: str) -> dict[str, Any]:
    if api == "anthropic":
        return {
            "type": "error",
            "error": {
                "type": "invalid_request_error" if status < 500 else "api_error",
                "message": message,
            },
        }
    return {
        "error": {
            "message": message,
            "type": "invalid_request_error" if status < 500 else "server_error",
            "param": None,
            "code": None,
        }
    }


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
        if body.get("stream") and api == "responses":
            self._record(api, path, body, -1, 400)
            return 400, _error_body(api, 400, "ScriptedLLMServer does not stream Responses")
        try:
            if api == "chat":
                tokens = count_openai_tokens(body.get("messages") or [], body.get("tools"))
            elif api == "responses":
                tokens = count_openai_tokens(_responses_messages(body), body.get("tools"))
            else:
                tokens = count_anthropic_tokens(body)
        except Exception as exc:
            self._record(api, path, body, -1, 400)
            return 400, _error_body(api, 400, f"could not read the request: {exc}")
        window = self.window
        if tokens > window:
            with self._lock:
                self.rejections += 1
            self._record(api, path, body, tokens, 400)
            return 400, _overflow_body(api, tokens, window)
        reply = self._next_reply(body, api)
        if reply.get("overflow"):
            with self._lock:
                self.rejections += 1
            self._record(api, path, body, tokens, 400)
            return 400, _overflow_body(api, max(tokens, window + 1), window)
        if "status" in reply and int(reply["status"]) != 200:
            status = int(reply["status"])
            self._record(api, path, body, tokens, status)
            return status, dict(reply.get("body") or _error_body(api, status, "scripted error"))
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

        if api == "chat":
            return 200, _chat_reply(reply, model, prompt_tokens, ids)
        if api == "responses":
            return 200, _responses_reply(reply, model, prompt_tokens, ids)
        return 200, _anthropic_reply(reply, model, prompt_tokens, ids)


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

    def _send(self, status: int, payload: Mapping[str, Any]) -> None:
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        if status != 200:
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
            self._send(400, _error_body(api, 400, f"invalid JSON: {exc}"))
            return
        try:
            status, payload = self.owner.handle(api, path, body)
        except Exception as exc:  # a broken script must answer, not hang the client
            status, payload = 500, _error_body(api, 500, _script_failure(exc))
        if status == 200 and body.get("stream") is True:
            self._send_events(sse_events(api, payload, body))
            return
        self._send(status, payload)

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
