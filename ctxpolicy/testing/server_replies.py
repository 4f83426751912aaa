"""The scripted server's answers: reply bodies per API and the providers' error bodies.

A scripted reply (``{"content": ...}``, ``{"tool_calls": [...]}``, ``"thinking"``) becomes
the body the API returns (:func:`reply_body`); an overflow and any other error take the
body shape of the provider that serves the API, as the wire layer
(:mod:`ctxpolicy.wire`) says which provider that is.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Mapping
from typing import Any

from ctxpolicy.conversation.messages import new_call
from ctxpolicy.wire import for_api

__all__ = ["error_body", "overflow_body", "reply_body"]

Ids = Callable[[], str]


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
        msg["tool_calls"] = [new_call(c["id"], c["name"], c["arguments"]) for c in calls]
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


def _anthropic_message(
    reply: Mapping[str, Any], model: str, prompt_tokens: int, ids: Ids
) -> dict[str, Any]:
    """:func:`_anthropic_reply` with the scripted ``thinking`` as a signed block first."""
    out = _anthropic_reply(reply, model, prompt_tokens, ids)
    if reply.get("thinking"):
        text = str(reply["thinking"])
        sig = str(reply.get("signature") or f"sig-{len(text)}-{ids()}")
        out["content"].insert(0, {"type": "thinking", "thinking": text, "signature": sig})
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


#: The body of a scripted reply, by API.
_REPLIES: dict[str, Callable[[Mapping[str, Any], str, int, Ids], dict[str, Any]]] = {
    "chat": _chat_reply,
    "responses": _responses_reply,
    "anthropic": _anthropic_message,
}


def reply_body(
    api: str, reply: Mapping[str, Any], model: str, prompt_tokens: int, ids: Ids
) -> dict[str, Any]:
    """The response body of ``api`` for a scripted reply (``ids`` numbers its ids)."""
    return _REPLIES[api](reply, model, prompt_tokens, ids)


# --------------------------------------------------------------------------- errors


def _anthropic_overflow(api: str, tokens: int, window: int) -> dict[str, Any]:
    return {
        "type": "error",
        "error": {
            "type": "invalid_request_error",
            "message": f"prompt is too long: {tokens} tokens > {window} maximum",
        },
    }


def _openai_overflow(api: str, tokens: int, window: int) -> dict[str, Any]:
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


def _anthropic_error(status: int, message: str) -> dict[str, Any]:
    return {
        "type": "error",
        "error": {
            "type": "invalid_request_error" if status < 500 else "api_error",
            "message": message,
        },
    }


def _openai_error(status: int, message: str) -> dict[str, Any]:
    return {
        "error": {
            "message": message,
            "type": "invalid_request_error" if status < 500 else "server_error",
            "param": None,
            "code": None,
        }
    }


#: A context overflow, by the provider that serves the API (``Wire.provider``).
_OVERFLOWS: dict[str, Callable[[str, int, int], dict[str, Any]]] = {
    "openai": _openai_overflow,
    "anthropic": _anthropic_overflow,
}
#: Any other error, by provider.
_ERRORS: dict[str, Callable[[int, str], dict[str, Any]]] = {
    "openai": _openai_error,
    "anthropic": _anthropic_error,
}


def overflow_body(api: str, tokens: int, window: int) -> dict[str, Any]:
    """The error body the provider of ``api`` sends for a prompt over ``window``."""
    return _OVERFLOWS[for_api(api).provider](api, tokens, window)


def error_body(api: str, status: int, message: str) -> dict[str, Any]:
    """The body of an HTTP error ``status`` in the shape of the provider of ``api``."""
    return _ERRORS[for_api(api).provider](status, message)
