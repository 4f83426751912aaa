"""Anthropic Messages on the wire, through :mod:`ctxpolicy.integrations.anthropic`'s
conversion (the same one the SDK adapter uses): blocks to OpenAI-style messages and back."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from ctxpolicy.gateway.wire_openai import WireError
from ctxpolicy.integrations.anthropic import AnthropicConversation

__all__ = ["assistant_and_calls", "build", "extract", "tools_for_count", "usage"]


def extract(body: Mapping[str, Any]) -> AnthropicConversation:
    messages = body.get("messages")
    if not isinstance(messages, list) or not all(isinstance(m, dict) for m in messages):
        raise WireError("'messages' must be a list of objects")
    system = body.get("system")
    if system is not None and not isinstance(system, str | list):
        raise WireError("'system' must be a string or a list of blocks")
    return AnthropicConversation(messages, system)


def tools_for_count(tools: Any) -> list[dict[str, Any]] | None:
    """Anthropic tool definitions as the OpenAI function shapes the counter expects."""
    if not isinstance(tools, list):
        return None
    out = [
        {
            "type": "function",
            "function": {
                "name": t.get("name", ""),
                "description": t.get("description", ""),
                "parameters": t.get("input_schema") or {},
            },
        }
        for t in tools
        if isinstance(t, Mapping)
    ]
    return out or None


def build(
    body: Mapping[str, Any],
    conv: AnthropicConversation,
    prepared: list[dict[str, Any]],
    tools: Any = None,
) -> bytes:
    out = {k: v for k, v in body.items() if k not in ("messages", "system")}
    out.update(conv.to_request(prepared).kwargs())
    if tools is not None:
        out["tools"] = tools
    return json.dumps(out, ensure_ascii=False, separators=(",", ":")).encode()


def usage(resp: Any) -> int | None:
    if not isinstance(resp, Mapping) or not isinstance(resp.get("usage"), Mapping):
        return None
    u = resp["usage"]
    total = 0
    for k in ("input_tokens", "cache_read_input_tokens", "cache_creation_input_tokens"):
        v = u.get(k)
        if isinstance(v, int) and not isinstance(v, bool):
            total += v
    return total or None


def assistant_and_calls(resp: Any) -> tuple[dict[str, Any] | None, list[tuple[str, str, Any]]]:
    """The assistant turn (Messages form) and its ``tool_use`` blocks ``(id, name, input)``."""
    if not isinstance(resp, Mapping) or not isinstance(resp.get("content"), list):
        return None, []
    calls = [
        (str(b.get("id", "")), str(b.get("name", "")), b.get("input"))
        for b in resp["content"]
        if isinstance(b, Mapping) and b.get("type") == "tool_use"
    ]
    return {"role": "assistant", "content": resp["content"]}, calls


def tool_results_turn(results: list[tuple[str, str]]) -> dict[str, Any]:
    return {
        "role": "user",
        "content": [
            {"type": "tool_result", "tool_use_id": cid, "content": text} for cid, text in results
        ],
    }
