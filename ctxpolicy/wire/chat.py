"""OpenAI Chat Completions on the wire: the engine's vocabulary already, so the messages
pass through as they are; usage, tool calls and stream events of its answers."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ctxpolicy.wire._stream import StreamCalls
from ctxpolicy.wire.base import Extracted, ToolCall, WireError, dumps_request, positive_int

__all__ = ["ChatStreamTurn", "ChatWire", "tool_message"]


def tool_message(call_id: str, text: str) -> dict[str, Any]:
    """The ``tool`` message answering call ``call_id`` with ``text``."""
    return {"role": "tool", "tool_call_id": call_id, "content": text}


def function_name(tool: Mapping[str, Any]) -> str:
    """The name of a chat function tool (or of a bare ``{"name": ...}`` definition)."""
    fn = tool.get("function")
    if isinstance(fn, Mapping):
        return str(fn.get("name", ""))
    return str(tool.get("name", ""))


def openai_error(message: str) -> dict[str, Any]:
    """The OpenAI error body shape (Chat Completions and Responses)."""
    return {"error": {"message": message, "type": "invalid_request_error", "code": None}}


class ChatWire:
    """``POST /v1/chat/completions``."""

    name = "chat"
    provider = "openai"
    paths: tuple[str, ...] = ("/v1/chat/completions",)

    def extract(self, body: Mapping[str, Any]) -> Extracted:
        messages = body.get("messages")
        if not isinstance(messages, list) or not all(isinstance(m, dict) for m in messages):
            raise WireError("'messages' must be a list of objects")
        tools = body.get("tools")
        plain = [t for t in tools if isinstance(t, dict)] if isinstance(tools, list) else None
        return Extracted(dict(body), list(messages), plain or None)

    def build(
        self, req: Extracted, prepared: Sequence[Mapping[str, Any]], tools: Any = None
    ) -> bytes:
        out = dict(req.body)
        out["messages"] = prepared
        return dumps_request(out, req, tools)

    def with_round(
        self, req: Extracted, assistant: Mapping[str, Any], results: Sequence[tuple[str, str]]
    ) -> Extracted:
        messages = [*req.messages, dict(assistant), *(tool_message(c, t) for c, t in results)]
        return Extracted(req.body, messages, req.tools)

    def usage(self, resp: Any) -> int | None:
        if not isinstance(resp, Mapping):
            return None
        u = resp.get("usage")
        return positive_int(u.get("prompt_tokens")) if isinstance(u, Mapping) else None

    def stream_usage(self, event: Mapping[str, Any]) -> int | None:
        return self.usage(event)

    def is_usage_only_event(self, event: Mapping[str, Any]) -> bool:
        return "usage" in event and event.get("choices") == []

    def with_stream_usage(self, body: Mapping[str, Any]) -> dict[str, Any] | None:
        opts = body.get("stream_options")
        if isinstance(opts, dict) and opts.get("include_usage"):
            return None
        return {
            **body,
            "stream_options": {**(opts if isinstance(opts, dict) else {}), "include_usage": True},
        }

    def assistant_and_calls(self, resp: Any) -> tuple[dict[str, Any] | None, list[ToolCall]]:
        if not isinstance(resp, Mapping):
            return None, []
        choices = resp.get("choices")
        if not isinstance(choices, list) or not choices or not isinstance(choices[0], Mapping):
            return None, []
        msg = choices[0].get("message")
        if not isinstance(msg, Mapping):
            return None, []
        calls: list[ToolCall] = []
        for c in msg.get("tool_calls") or []:
            if isinstance(c, Mapping) and isinstance(c.get("function"), Mapping):
                fn = c["function"]
                calls.append(
                    ToolCall(str(c.get("id", "")), str(fn.get("name", "")), fn.get("arguments"))
                )
        return dict(msg), calls

    def stream_turn(self) -> ChatStreamTurn:
        return ChatStreamTurn()

    def error_body(self, status: int, message: str) -> dict[str, Any]:
        return openai_error(message)

    def tools(self, functions: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
        return [dict(t) for t in functions]

    def tool_name(self, tool: Mapping[str, Any]) -> str:
        return function_name(tool)

    def auth_headers(self, api_key: str) -> dict[str, str]:
        return {"authorization": f"Bearer {api_key}"}


class ChatStreamTurn:
    """A streamed chat completion (``chat.completion.chunk`` events)."""

    def __init__(self) -> None:
        self._seen = StreamCalls()
        self._head: dict[str, Any] = {}

    @property
    def names(self) -> list[str]:
        return self._seen.names

    def event(self, obj: Mapping[str, Any]) -> str | None:
        if "error" in obj:
            return "other"
        if not self._head:
            self._head = {k: obj[k] for k in ("id", "created", "model") if k in obj}
            self._head["object"] = "chat.completion"
        choices = obj.get("choices")
        if not isinstance(choices, list):
            return None
        seen: str | None = None
        for ch in choices:
            delta = ch.get("delta") if isinstance(ch, dict) else None
            if not isinstance(delta, dict):
                continue
            if self._seen.text_seen(delta.get("content")):
                return "text"
            for tc in delta.get("tool_calls") or []:
                if not isinstance(tc, dict):
                    return "other"
                fn = tc.get("function")
                if not isinstance(fn, dict):
                    fn = {}
                kind = self._seen.start(tc.get("index"), tc.get("id"), fn.get("name"))
                if kind == "other":
                    return kind
                seen = kind or seen
                self._seen.args(tc.get("index"), fn.get("arguments"))
        return seen

    def calls(self) -> list[ToolCall]:
        return self._seen.tool_calls(parse=False)

    def answer(self) -> dict[str, Any]:
        tool_calls = [
            {"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}}
            for c in self.calls()
        ]
        text = "".join(self._seen.text)
        msg = {"role": "assistant", "content": text or None, "tool_calls": tool_calls}
        return {**self._head, "choices": [{"index": 0, "message": msg}]}
