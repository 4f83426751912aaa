"""The scripted server's streams: a complete reply as the server-sent events each API
streams (chat chunks with a usage chunk when ``stream_options.include_usage`` is set,
then ``[DONE]``; Anthropic ``message_start`` ... ``message_stop``; Responses
``response.created`` ... ``response.completed``, as the Codex CLI reads them).
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Callable, Mapping
from typing import Any

from ctxpolicy.conversation.messages import call_arguments, call_name, tool_calls

__all__ = ["sse_events"]


def _sse(data: Mapping[str, Any], event: str | None = None) -> bytes:
    head = f"event: {event}\n" if event else ""
    return (head + "data: " + json.dumps(data, separators=(",", ":")) + "\n\n").encode()


def sse_events(api: str, reply: Mapping[str, Any], body: Mapping[str, Any]) -> list[bytes]:
    """A complete (non-streaming) reply as the server-sent events a provider streams."""
    return _EVENTS[api](reply, body)


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
    for n, call in enumerate(tool_calls(msg)):
        head = {"index": n, "id": call.get("id"), "type": "function"}
        out.append(
            chunk(
                {"tool_calls": [{**head, "function": {"name": call_name(call), "arguments": ""}}]}
            )
        )
        out.append(
            chunk(
                {"tool_calls": [{"index": n, "function": {"arguments": call_arguments(call, "")}}]}
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
        if block.get("type") == "thinking":
            ev = {
                "type": "content_block_start",
                "index": i,
                "content_block": {"type": "thinking", "thinking": "", "signature": ""},
            }
            out.append(_sse(ev, "content_block_start"))
            for delta in (
                {"type": "thinking_delta", "thinking": str(block.get("thinking", ""))},
                {"type": "signature_delta", "signature": str(block.get("signature", ""))},
            ):
                ev = {"type": "content_block_delta", "index": i, "delta": delta}
                out.append(_sse(ev, "content_block_delta"))
            out.append(_sse({"type": "content_block_stop", "index": i}, "content_block_stop"))
            continue
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


def _responses_events(reply: Mapping[str, Any]) -> list[bytes]:
    seq = itertools.count()
    out: list[bytes] = []

    def ev(kind: str, **fields: Any) -> None:
        out.append(_sse({"type": kind, "sequence_number": next(seq), **fields}, kind))

    head = {**reply, "status": "in_progress", "output": [], "usage": None}
    ev("response.created", response=head)
    ev("response.in_progress", response=head)
    for i, item in enumerate(reply.get("output") or []):
        if item.get("type") == "message":
            ev("response.output_item.added", output_index=i, item={**item, "content": []})
            for j, part in enumerate(item.get("content") or []):
                text = str(part.get("text", ""))
                empty = {**part, "text": ""}
                ev(
                    "response.content_part.added",
                    item_id=item["id"],
                    output_index=i,
                    content_index=j,
                    part=empty,
                )
                ev(
                    "response.output_text.delta",
                    item_id=item["id"],
                    output_index=i,
                    content_index=j,
                    delta=text,
                )
                ev(
                    "response.output_text.done",
                    item_id=item["id"],
                    output_index=i,
                    content_index=j,
                    text=text,
                )
                ev(
                    "response.content_part.done",
                    item_id=item["id"],
                    output_index=i,
                    content_index=j,
                    part=part,
                )
        elif item.get("type") == "function_call":
            ev("response.output_item.added", output_index=i, item={**item, "arguments": ""})
            ev(
                "response.function_call_arguments.delta",
                item_id=item["id"],
                output_index=i,
                delta=item.get("arguments", ""),
            )
            ev(
                "response.function_call_arguments.done",
                item_id=item["id"],
                output_index=i,
                arguments=item.get("arguments", ""),
            )
        else:
            ev("response.output_item.added", output_index=i, item=item)
        ev("response.output_item.done", output_index=i, item=item)
    ev("response.completed", response=dict(reply))
    return out


#: A reply's events by API (``body`` is the request: chat streams usage when asked).
_EVENTS: dict[str, Callable[[Mapping[str, Any], Mapping[str, Any]], list[bytes]]] = {
    "chat": lambda reply, body: _chat_events(
        reply, bool((body.get("stream_options") or {}).get("include_usage"))
    ),
    "responses": lambda reply, body: _responses_events(reply),
    "anthropic": lambda reply, body: _anthropic_events(reply),
}
