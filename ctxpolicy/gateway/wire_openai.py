"""OpenAI Chat Completions on the wire: request messages in and out, usage, tool calls."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

__all__ = ["assistant_and_calls", "build", "extract", "tool_message", "usage"]


class WireError(ValueError):
    """A request body the gateway cannot interpret (answered with HTTP 400)."""


def extract(body: Mapping[str, Any]) -> tuple[list[dict[str, Any]], list[dict[str, Any]] | None]:
    """The request's messages (engine form: OpenAI chat already) and its tools."""
    messages = body.get("messages")
    if not isinstance(messages, list) or not all(isinstance(m, dict) for m in messages):
        raise WireError("'messages' must be a list of objects")
    tools = body.get("tools")
    plain_tools = [t for t in tools if isinstance(t, dict)] if isinstance(tools, list) else None
    return list(messages), plain_tools or None


def build(body: Mapping[str, Any], prepared: list[dict[str, Any]], tools: Any = None) -> bytes:
    """The upstream body: the client's request with the prepared messages."""
    out = dict(body)
    out["messages"] = prepared
    if tools is not None:
        out["tools"] = tools
    return json.dumps(out, ensure_ascii=False, separators=(",", ":")).encode()


def usage(resp: Any) -> int | None:
    """The provider's prompt tokens of a response (None when absent)."""
    if not isinstance(resp, Mapping):
        return None
    u = resp.get("usage")
    if isinstance(u, Mapping):
        v = u.get("prompt_tokens")
        if isinstance(v, int) and not isinstance(v, bool) and v > 0:
            return v
    return None


def assistant_and_calls(resp: Any) -> tuple[dict[str, Any] | None, list[tuple[str, str, Any]]]:
    """The first choice's assistant message and its tool calls ``(id, name, arguments)``."""
    if not isinstance(resp, Mapping):
        return None, []
    choices = resp.get("choices")
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], Mapping):
        return None, []
    msg = choices[0].get("message")
    if not isinstance(msg, Mapping):
        return None, []
    calls: list[tuple[str, str, Any]] = []
    for c in msg.get("tool_calls") or []:
        if isinstance(c, Mapping) and isinstance(c.get("function"), Mapping):
            fn = c["function"]
            calls.append((str(c.get("id", "")), str(fn.get("name", "")), fn.get("arguments")))
    return dict(msg), calls


def tool_message(call_id: str, text: str) -> dict[str, Any]:
    return {"role": "tool", "tool_call_id": call_id, "content": text}
