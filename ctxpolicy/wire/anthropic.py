"""Anthropic Messages on the wire: blocks to the engine's messages and back.

Messages API content is converted to the engine's OpenAI-style messages and back
(:class:`AnthropicConversation`):

* ``system`` (string or text blocks) ↔ the system message;
* ``text`` / ``image`` / ``document`` blocks ↔ user or assistant content;
* ``tool_use`` blocks ↔ assistant ``tool_calls`` (``input`` ↔ JSON ``arguments``);
* ``tool_result`` blocks of a user message ↔ ``tool`` messages directly after the
  assistant message, so a ``tool_use`` and its ``tool_result`` are one unit and are
  kept or dropped together; the user's other blocks follow as a user message;
* ``thinking`` / ``redacted_thinking`` blocks are parts of their assistant message,
  whole (counted, never text): dropped with their turn or sent back byte-identical,
  first in it, also when the turn's text or tool inputs were shortened;
* ``image`` / ``document`` blocks (in user turns and inside tool results) carry their
  token count by the provider's rules (:func:`media_tokens`);
* system messages after the first other message (reminders, the progress ledger) stay
  in their place as text blocks of a user turn.

Messages the policy keeps unchanged are sent back as their original blocks
(``cache_control``, ``citations``, signatures intact); rewritten ones (a truncated
tool result, a summary, the ledger) become new blocks, a truncated ``tool_result``
keeping its ``is_error``, ``cache_control`` and its images and documents, a shortened
``tool_use`` its shortened ``input`` (still an object).

:class:`AnthropicRequest` places prompt-cache breakpoints (``cache_control``) on request;
:class:`AnthropicWire` is the wire class the gateway uses for ``POST /v1/messages``.

The content blocks and their token counts are in :mod:`.anthropic_blocks`, the request
being assembled (turns, cache breakpoints) in :mod:`.anthropic_request`, the streamed
answer in :mod:`.anthropic_stream`.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ctxpolicy.conversation import Message, content_text
from ctxpolicy.conversation.messages import nth_original
from ctxpolicy.conversation.samejson import content_key
from ctxpolicy.wire.anthropic_blocks import (
    DOCUMENT_UNKNOWN_TOKENS,
    IMAGE_MAX_TOKENS,
    PDF_PAGE_TOKENS,
    THINKING,
    block_to_part,
    image_tokens,
    input_object,
    is_media_part,
    media_tokens,
    result_blocks,
    simple_content,
    tool_result_content,
    user_blocks,
)
from ctxpolicy.wire.anthropic_request import (
    EPHEMERAL,
    MAX_BREAKPOINTS,
    OMITTED_PREFIX,
    AnthropicRequest,
    CacheBreakpoints,
    Turn,
)
from ctxpolicy.wire.anthropic_stream import AnthropicStreamTurn
from ctxpolicy.wire.base import (
    Extracted,
    ToolCall,
    WireError,
    converted_tools,
    dumps_request,
    is_given,
    json_args,
    request_state,
    to_plain,
)

__all__ = [
    "DOCUMENT_UNKNOWN_TOKENS",
    "EPHEMERAL",
    "IMAGE_MAX_TOKENS",
    "MAX_BREAKPOINTS",
    "OMITTED_PREFIX",
    "PDF_PAGE_TOKENS",
    "AnthropicConversation",
    "AnthropicRequest",
    "AnthropicStreamTurn",
    "AnthropicWire",
    "CacheBreakpoints",
    "from_openai",
    "image_tokens",
    "media_tokens",
    "to_openai",
    "tool_results_turn",
    "tools_for_count",
]


@dataclass
class _Origin:
    role: str  # "system" | "user" | "assistant"
    blocks: list[Any]  # original blocks (or a one-element [str] for string content)


class AnthropicConversation:
    """A Messages API request (``system`` + ``messages``) as OpenAI-style messages, and back."""

    def __init__(self, messages: Sequence[Any], system: Any = None, plain: bool = False) -> None:
        """``plain``: ``messages`` and ``system`` are parsed JSON (a gateway's request body),
        read as they are; else SDK objects are turned into plain values first."""
        self.messages: list[Message] = []
        origins: list[_Origin] = []
        self._tool_results: dict[str, dict[str, Any]] = {}
        self._tool_uses: dict[str, dict[str, Any]] = {}
        self.system_blocks: list[dict[str, Any]] | None = None
        self.system_was_string = isinstance(system, str)
        if is_given(system) and system:
            if isinstance(system, str):
                self.system_blocks = [{"type": "text", "text": system}]
            else:
                self.system_blocks = list(system) if plain else [to_plain(b) for b in system]
            text = "\n".join(str(b.get("text", "")) for b in self.system_blocks)
            self.messages.append({"role": "system", "content": text})
            origins.append(_Origin("system", list(self.system_blocks)))
        for raw in messages:
            m = raw if plain else to_plain(raw)
            if not isinstance(m, Mapping):
                continue
            role = str(m.get("role", "user"))
            content = m.get("content")
            if isinstance(content, str) or content is None:
                self.messages.append({"role": role, "content": content or ""})
                origins.append(_Origin(role, [content or ""]))
                continue
            blocks = [
                b if isinstance(b, dict) else {"type": "text", "text": str(b)} for b in content
            ]
            if role == "assistant":
                parts = [p for p in (block_to_part(b) for b in blocks) if p is not None]
                calls: list[dict[str, Any]] = []
                for b in blocks:
                    if b.get("type") == "tool_use":
                        cid = str(b.get("id", ""))
                        self._tool_uses[cid] = b
                        calls.append(
                            {
                                "id": cid,
                                "type": "function",
                                "function": {
                                    "name": str(b.get("name", "")),
                                    "arguments": json_args(b.get("input")),
                                },
                            }
                        )
                msg: Message = {
                    "role": "assistant",
                    "content": simple_content(parts) if parts else None,
                }
                if calls:
                    msg["tool_calls"] = calls
                self.messages.append(msg)
                origins.append(_Origin("assistant", blocks))
                continue
            results = [b for b in blocks if b.get("type") == "tool_result"]
            others = [b for b in blocks if b.get("type") != "tool_result"]
            for b in results:
                tid = str(b.get("tool_use_id", ""))
                self._tool_results[tid] = b
                self.messages.append(
                    {"role": "tool", "tool_call_id": tid, "content": tool_result_content(b)}
                )
                origins.append(_Origin("user", [b]))
            if others or not results:
                parts = [p for p in (block_to_part(b) for b in others) if p is not None]
                self.messages.append({"role": role, "content": simple_content(parts)})
                origins.append(_Origin(role, others))
        # by content key: equal exactly when the messages' fingerprints are
        self._origins: dict[Any, list[_Origin]] = {}
        for msg, origin in zip(self.messages, origins, strict=True):
            self._origins.setdefault(content_key(msg), []).append(origin)

    # -- back --------------------------------------------------------------------------
    def to_request(
        self,
        prepared: Sequence[Mapping[str, Any]],
        *,
        breakpoints: bool = False,
        breakpoint_after: int | None = None,
        cache_tail: bool = False,
    ) -> AnthropicRequest:
        """``system`` and ``messages`` for ``prepared``; optionally with cache breakpoints.

        ``breakpoint_after`` is the index (in ``prepared``) of the last message of the
        stable prefix; ``None`` means only the system prompt is stable. Markers are
        placed only with ``breakpoints=True``.

        System messages before the first other message make the top-level ``system``;
        a later one (a reminder, the progress ledger) stays in its place as a text block
        of a user turn, since the Messages API has no system role inside ``messages``.
        Consecutive messages of one role become one turn, a user turn's ``tool_result``
        blocks first; time and memory are linear in the number of blocks.
        """
        system: list[dict[str, Any]] = []
        turns: list[Turn] = []
        # (index in prepared) -> (turn index or -1 for system, where in the turn)
        where: dict[int, tuple[int, tuple[bool, int]]] = {}
        used: dict[Any, int] = {}
        for i, m in enumerate(prepared):
            origin = nth_original(self._origins, used, content_key(m))
            if origin is not None:
                # a copy of each block: breakpoints add ``cache_control`` to blocks, never
                # below them (a deep copy would cost more than the whole conversion)
                role = origin.role
                blocks = [dict(b) if isinstance(b, dict) else b for b in origin.blocks]
            else:
                role, blocks = self._rebuild(m)
            if role == "system":
                blocks = [
                    b if isinstance(b, dict) else {"type": "text", "text": str(b)} for b in blocks
                ]
                if not turns:
                    system.extend(blocks)
                    if system:
                        where[i] = (-1, (False, len(system) - 1))
                    continue
                role = "user"  # in its place, as text blocks of a user turn
                blocks = [
                    {"type": "text", "text": str(b.get("text", ""))}
                    for b in blocks
                    if b.get("type") == "text" and b.get("text")
                ]
            if not blocks:
                continue
            if turns and turns[-1].role == role:
                at = turns[-1].add(blocks)
                where[i] = (len(turns) - 1, at)
                continue
            turns.append(Turn(role, blocks))
            where[i] = (len(turns) - 1, turns[-1].last())
        out = [t.message() for t in turns]
        positions = {
            k: (ti, t[1] if ti == -1 else turns[ti].index(t)) for k, (ti, t) in where.items()
        }
        if out and out[0]["role"] != "user":
            out.insert(0, {"role": "user", "content": OMITTED_PREFIX})
            positions = {k: (mi + 1 if mi >= 0 else mi, bi) for k, (mi, bi) in positions.items()}
        req = AnthropicRequest(
            system=system, messages=out, system_was_string=self.system_was_string
        )
        if breakpoints:
            req.place_breakpoints(positions, breakpoint_after, cache_tail=cache_tail)
        return req

    def _rebuild(self, m: Mapping[str, Any]) -> tuple[str, list[Any]]:
        role = str(m.get("role", "user"))
        content = m.get("content")
        if role in ("system", "developer"):
            return "system", [{"type": "text", "text": content_text(content)}]
        if role == "tool":
            tid = str(m.get("tool_call_id", ""))
            base = self._tool_results.get(tid, {})
            block: dict[str, Any] = {
                "type": "tool_result",
                "tool_use_id": tid,
                "content": result_blocks(content)
                if isinstance(content, list) and any(is_media_part(p) for p in content)
                else content_text(content),
            }
            for key in ("is_error", "cache_control"):
                if key in base:
                    block[key] = base[key]
            return "user", [block]
        if role == "assistant":
            # signed thinking first, as it was received (it is never text); then the text
            blocks: list[Any] = [
                dict(p)
                for p in (content if isinstance(content, list) else [])
                if isinstance(p, Mapping) and p.get("type") in THINKING
            ]
            text = content_text(content)
            if text:
                blocks.append({"type": "text", "text": text})
            for tc in m.get("tool_calls") or []:
                tid = str(tc.get("id", ""))
                fn = tc.get("function") or {}
                args = fn.get("arguments")
                orig = self._tool_uses.get(tid)
                if orig is not None and args == json_args(orig.get("input")):
                    blocks.append(copy.deepcopy(orig))
                    continue
                # a squeezed (or new) call: its input as prepared, still an object
                use = {k: copy.deepcopy(v) for k, v in (orig or {}).items() if k != "input"}
                use.update({"type": "tool_use", "id": tid, "name": fn.get("name", "")})
                use["input"] = input_object(args)
                blocks.append(use)
            return "assistant", blocks
        if isinstance(content, list):
            return "user", user_blocks(content)
        return "user", [str(content or "")]


def to_openai(messages: Sequence[Any], system: Any = None) -> list[Message]:
    """Messages API ``messages`` (+ ``system``) as OpenAI-style messages."""
    return AnthropicConversation(messages, system).messages


def from_openai(
    prepared: Sequence[Mapping[str, Any]], conversation: AnthropicConversation
) -> dict[str, Any]:
    """``{"messages": ..., "system": ...}`` for a prepared list of ``conversation``."""
    return conversation.to_request(prepared).kwargs()


def tools_for_count(tools: Any) -> list[dict[str, Any]] | None:
    """Anthropic tool definitions as the OpenAI function shapes the counter expects (the
    same list for the same definitions: the counter's memo then finds it at once)."""
    return _tools_and_key(tools)[0]


def _tools_and_key(tools: Any) -> tuple[list[dict[str, Any]] | None, bytes | None]:
    if not is_given(tools) or not tools or not isinstance(tools, list | tuple):
        return None, None
    return converted_tools(tools, "anthropic", _convert_tools)


def _convert_tools(tools: Any) -> list[dict[str, Any]]:
    return [
        {
            "type": "function",
            "function": {
                "name": t.get("name", ""),
                "description": t.get("description", ""),
                "parameters": t.get("input_schema") or {},
            },
        }
        for t in to_plain(list(tools))
        if isinstance(t, Mapping)
    ]


def tool_results_turn(results: Sequence[tuple[str, str]]) -> dict[str, Any]:
    """The user turn answering tool calls with ``(tool_use_id, text)`` results."""
    return {
        "role": "user",
        "content": [
            {"type": "tool_result", "tool_use_id": cid, "content": text} for cid, text in results
        ],
    }


class AnthropicWire:
    """``POST /v1/messages``."""

    name = "anthropic"
    provider = "anthropic"
    paths: tuple[str, ...] = ("/v1/messages",)

    def extract(self, body: Mapping[str, Any]) -> Extracted:
        messages = body.get("messages")
        if not isinstance(messages, list) or not all(isinstance(m, dict) for m in messages):
            raise WireError("'messages' must be a list of objects")
        system = body.get("system")
        if system is not None and not isinstance(system, str | list):
            raise WireError("'system' must be a string or a list of blocks")
        conv = AnthropicConversation(messages, system, plain=True)
        tools, key = _tools_and_key(body.get("tools"))
        return Extracted(dict(body), conv.messages, tools, conv, key)

    def conversation(self, req: Extracted) -> AnthropicConversation:
        return request_state(req, AnthropicConversation)

    def build(
        self, req: Extracted, prepared: Sequence[Mapping[str, Any]], tools: Any = None
    ) -> bytes:
        out = {k: v for k, v in req.body.items() if k not in ("messages", "system")}
        out.update(self.conversation(req).to_request(prepared).kwargs())
        return dumps_request(out, req, tools)

    def with_round(
        self, req: Extracted, assistant: Mapping[str, Any], results: Sequence[tuple[str, str]]
    ) -> Extracted:
        raw = [*req.body["messages"], dict(assistant), tool_results_turn(results)]
        return self.extract({**req.body, "messages": raw})

    def usage(self, resp: Any) -> int | None:
        if not isinstance(resp, Mapping) or not isinstance(resp.get("usage"), Mapping):
            return None
        u = resp["usage"]
        total = 0
        for k in ("input_tokens", "cache_read_input_tokens", "cache_creation_input_tokens"):
            v = u.get(k)
            if isinstance(v, int) and not isinstance(v, bool):
                total += v
        return total or None

    def stream_usage(self, event: Mapping[str, Any]) -> int | None:
        kind = event.get("type")
        return self.usage(event.get("message") if kind == "message_start" else event)

    def is_usage_only_event(self, event: Mapping[str, Any]) -> bool:
        return False

    def with_stream_usage(self, body: Mapping[str, Any]) -> dict[str, Any] | None:
        return None  # message_start and message_delta always carry usage

    def assistant_and_calls(self, resp: Any) -> tuple[dict[str, Any] | None, list[ToolCall]]:
        if not isinstance(resp, Mapping) or not isinstance(resp.get("content"), list):
            return None, []
        calls = [
            ToolCall(str(b.get("id", "")), str(b.get("name", "")), b.get("input"))
            for b in resp["content"]
            if isinstance(b, Mapping) and b.get("type") == "tool_use"
        ]
        return {"role": "assistant", "content": resp["content"]}, calls

    def stream_turn(self) -> AnthropicStreamTurn:
        return AnthropicStreamTurn()

    def error_body(self, status: int, message: str) -> dict[str, Any]:
        kind = {
            400: "invalid_request_error",
            404: "not_found_error",
            413: "request_too_large",
        }.get(status, "api_error")
        return {"type": "error", "error": {"type": kind, "message": message}}

    def tools(self, functions: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
        out = []
        for t in functions:
            fn = t.get("function", {})
            out.append(
                {
                    "name": fn.get("name", ""),
                    "description": fn.get("description", ""),
                    "input_schema": copy.deepcopy(fn.get("parameters") or {"type": "object"}),
                }
            )
        return out

    def tool_name(self, tool: Mapping[str, Any]) -> str:
        return str(tool.get("name", ""))

    def auth_headers(self, api_key: str) -> dict[str, str]:
        return {"x-api-key": api_key}
