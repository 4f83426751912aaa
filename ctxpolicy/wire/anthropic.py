"""Anthropic Messages on the wire: blocks to the engine's messages and back.

Messages API content is converted to the engine's OpenAI-style messages and back
(:class:`AnthropicConversation`):

* ``system`` (string or text blocks) ↔ the system message;
* ``text`` / ``image`` / ``document`` blocks ↔ user or assistant content;
* ``tool_use`` blocks ↔ assistant ``tool_calls`` (``input`` ↔ JSON ``arguments``);
* ``tool_result`` blocks of a user message ↔ ``tool`` messages directly after the
  assistant message, so a ``tool_use`` and its ``tool_result`` are one unit and are
  kept or dropped together; the user's other blocks follow as a user message;
* ``thinking`` / ``redacted_thinking`` blocks stay with their assistant message
  (their text is counted, their signature is sent back untouched).

Messages the policy keeps unchanged are sent back as their original blocks
(``cache_control``, ``citations``, signatures intact); rewritten ones (a truncated
tool result, a summary, the ledger) become new blocks, a truncated ``tool_result``
keeping its ``is_error`` and ``cache_control``.

:class:`AnthropicRequest` places prompt-cache breakpoints (``cache_control``) on request;
:class:`AnthropicWire` is the wire class the gateway uses for ``POST /v1/messages``.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ctxpolicy.conversation import Message, content_text, message_fingerprint
from ctxpolicy.wire._stream import StreamCalls
from ctxpolicy.wire.base import (
    Extracted,
    ToolCall,
    WireError,
    dumps,
    is_given,
    json_args,
    parse_args,
    to_plain,
)

__all__ = [
    "EPHEMERAL",
    "MAX_BREAKPOINTS",
    "OMITTED_PREFIX",
    "AnthropicConversation",
    "AnthropicRequest",
    "AnthropicStreamTurn",
    "AnthropicWire",
    "CacheBreakpoints",
    "from_openai",
    "to_openai",
    "tool_results_turn",
    "tools_for_count",
]

#: The Messages API accepts at most this many ``cache_control`` breakpoints.
MAX_BREAKPOINTS = 4
EPHEMERAL: dict[str, str] = {"type": "ephemeral"}
OMITTED_PREFIX = "[earlier conversation omitted to fit the context window]"


def _block_to_part(block: Mapping[str, Any]) -> dict[str, Any] | None:
    """A content block as an OpenAI content part (for counting and summaries)."""
    btype = block.get("type")
    if btype == "text":
        return {"type": "text", "text": str(block.get("text", ""))}
    if btype == "image":
        src = block.get("source") or {}
        if src.get("type") == "base64":
            url = f"data:{src.get('media_type', 'image/png')};base64,{src.get('data', '')}"
        else:
            url = str(src.get("url", ""))
        return {"type": "image_url", "image_url": {"url": url}}
    if btype == "document":
        title = block.get("title") or (block.get("source") or {}).get("type", "")
        return {"type": "text", "text": f"[document {title}]"}
    if btype == "thinking":
        return {"type": "text", "text": str(block.get("thinking", ""))}
    if btype == "redacted_thinking":
        return {"type": "text", "text": "[redacted thinking]"}
    if btype in ("tool_use", "tool_result"):
        return None
    return {"type": "text", "text": content_text([block]) or str(block.get("type", ""))}


def _tool_result_text(block: Mapping[str, Any]) -> str:
    content = block.get("content")
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = []
        for b in content:
            if isinstance(b, Mapping):
                if b.get("type") == "text":
                    parts.append(str(b.get("text", "")))
                else:
                    parts.append(f"[{b.get('type', 'block')}]")
        return "\n".join(parts)
    return str(content)


def _simple_content(parts: list[dict[str, Any]]) -> Any:
    if all(p.get("type") == "text" for p in parts):
        return "\n".join(str(p["text"]) for p in parts)
    return parts


@dataclass
class _Origin:
    role: str  # "system" | "user" | "assistant"
    blocks: list[Any]  # original blocks (or a one-element [str] for string content)


class AnthropicConversation:
    """A Messages API request (``system`` + ``messages``) as OpenAI-style messages, and back."""

    def __init__(self, messages: Sequence[Any], system: Any = None) -> None:
        self.messages: list[Message] = []
        origins: list[_Origin] = []
        self._tool_results: dict[str, dict[str, Any]] = {}
        self._tool_uses: dict[str, dict[str, Any]] = {}
        self._assistants: list[tuple[list[str], list[dict[str, Any]]]] = []
        self.system_blocks: list[dict[str, Any]] | None = None
        self.system_was_string = isinstance(system, str)
        if is_given(system) and system:
            if isinstance(system, str):
                self.system_blocks = [{"type": "text", "text": system}]
            else:
                self.system_blocks = [to_plain(b) for b in system]
            text = "\n".join(str(b.get("text", "")) for b in self.system_blocks)
            self.messages.append({"role": "system", "content": text})
            origins.append(_Origin("system", list(self.system_blocks)))
        for raw in messages:
            m = to_plain(raw)
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
                parts = [p for p in (_block_to_part(b) for b in blocks) if p is not None]
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
                    "content": _simple_content(parts) if parts else None,
                }
                if calls:
                    msg["tool_calls"] = calls
                    self._assistants.append(([c["id"] for c in calls], blocks))
                self.messages.append(msg)
                origins.append(_Origin("assistant", blocks))
                continue
            results = [b for b in blocks if b.get("type") == "tool_result"]
            others = [b for b in blocks if b.get("type") != "tool_result"]
            for b in results:
                tid = str(b.get("tool_use_id", ""))
                self._tool_results[tid] = b
                self.messages.append(
                    {"role": "tool", "tool_call_id": tid, "content": _tool_result_text(b)}
                )
                origins.append(_Origin("user", [b]))
            if others or not results:
                parts = [p for p in (_block_to_part(b) for b in others) if p is not None]
                self.messages.append({"role": role, "content": _simple_content(parts)})
                origins.append(_Origin(role, others))
        self._origins: dict[str, list[_Origin]] = {}
        for msg, origin in zip(self.messages, origins, strict=True):
            self._origins.setdefault(message_fingerprint(msg), []).append(origin)

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
        """
        system: list[dict[str, Any]] = []
        out: list[dict[str, Any]] = []
        # (index in prepared) -> (message index in out or -1 for system, last block index)
        where: dict[int, tuple[int, int]] = {}
        used: dict[str, int] = {}
        for i, m in enumerate(prepared):
            fp = message_fingerprint(m)
            cands = self._origins.get(fp)
            origin: _Origin | None = None
            if cands:
                n = used.get(fp, 0)
                used[fp] = n + 1
                origin = cands[min(n, len(cands) - 1)]
            if origin is not None:
                role, blocks = origin.role, copy.deepcopy(origin.blocks)
            else:
                role, blocks = self._rebuild(m)
            if role == "system":
                system.extend(
                    b if isinstance(b, dict) else {"type": "text", "text": str(b)} for b in blocks
                )
                if system:
                    where[i] = (-1, len(system) - 1)
                continue
            if not blocks:
                continue
            if out and out[-1]["role"] == role:
                prev = out[-1]
                if isinstance(prev["content"], str):
                    prev["content"] = (
                        [{"type": "text", "text": prev["content"]}] if prev["content"] else []
                    )
                new_blocks = [
                    {"type": "text", "text": b} if isinstance(b, str) else b for b in blocks
                ]
                new_blocks = [
                    b for b in new_blocks if not (b.get("type") == "text" and not b.get("text"))
                ]
                if role == "user":  # tool_result blocks must come first in a user turn
                    tr = [b for b in new_blocks if b.get("type") == "tool_result"]
                    if tr and any(b.get("type") != "tool_result" for b in prev["content"]):
                        firsts = [b for b in prev["content"] if b.get("type") == "tool_result"]
                        rest = [b for b in prev["content"] if b.get("type") != "tool_result"]
                        prev["content"] = [*firsts, *tr, *rest]
                        new_blocks = [b for b in new_blocks if b.get("type") != "tool_result"]
                        prev["content"].extend(new_blocks)
                    else:
                        prev["content"].extend(new_blocks)
                else:
                    prev["content"].extend(new_blocks)
                where[i] = (len(out) - 1, len(prev["content"]) - 1)
                continue
            if len(blocks) == 1 and isinstance(blocks[0], str):
                out.append({"role": role, "content": blocks[0]})
                where[i] = (len(out) - 1, 0)
            else:
                out.append({"role": role, "content": list(blocks)})
                where[i] = (len(out) - 1, len(blocks) - 1)
        if out and out[0]["role"] != "user":
            out.insert(0, {"role": "user", "content": OMITTED_PREFIX})
            where = {k: (mi + 1 if mi >= 0 else mi, bi) for k, (mi, bi) in where.items()}
        req = AnthropicRequest(
            system=system, messages=out, system_was_string=self.system_was_string
        )
        if breakpoints:
            req.place_breakpoints(where, breakpoint_after, cache_tail=cache_tail)
        return req

    def _rebuild(self, m: Mapping[str, Any]) -> tuple[str, list[Any]]:
        role = str(m.get("role", "user"))
        if role in ("system", "developer"):
            return "system", [{"type": "text", "text": content_text(m.get("content"))}]
        if role == "tool":
            tid = str(m.get("tool_call_id", ""))
            base = self._tool_results.get(tid, {})
            block: dict[str, Any] = {
                "type": "tool_result",
                "tool_use_id": tid,
                "content": content_text(m.get("content")),
            }
            for key in ("is_error", "cache_control"):
                if key in base:
                    block[key] = base[key]
            return "user", [block]
        if role == "assistant":
            ids = [str(tc.get("id", "")) for tc in m.get("tool_calls") or []]
            blocks: list[Any] = []
            # thinking blocks of the original turn must precede its tool_use blocks
            for orig_ids, orig_blocks in self._assistants:
                if ids and orig_ids == ids:
                    blocks.extend(
                        b for b in orig_blocks if b.get("type") in ("thinking", "redacted_thinking")
                    )
                    break
            text = content_text(m.get("content"))
            if text:
                blocks.append({"type": "text", "text": text})
            for tc in m.get("tool_calls") or []:
                tid = str(tc.get("id", ""))
                orig = self._tool_uses.get(tid)
                if orig is not None:
                    blocks.append(copy.deepcopy(orig))
                else:
                    fn = tc.get("function") or {}
                    blocks.append(
                        {
                            "type": "tool_use",
                            "id": tid,
                            "name": fn.get("name", ""),
                            "input": parse_args(fn.get("arguments")),
                        }
                    )
            return "assistant", blocks
        content = m.get("content")
        if isinstance(content, list):
            blocks = []
            for p in content:
                if isinstance(p, Mapping) and p.get("type") == "image_url":
                    url = str((p.get("image_url") or {}).get("url", ""))
                    if url.startswith("data:") and ";base64," in url:
                        media, data = url[5:].split(";base64,", 1)
                        blocks.append(
                            {
                                "type": "image",
                                "source": {"type": "base64", "media_type": media, "data": data},
                            }
                        )
                    else:
                        blocks.append({"type": "image", "source": {"type": "url", "url": url}})
                else:
                    text = content_text([p])
                    if text:
                        blocks.append({"type": "text", "text": text})
            return "user", blocks
        return "user", [str(content or "")]


@dataclass
class CacheBreakpoints:
    """Where the adapter put ``cache_control`` markers (for tests and events)."""

    stable_index: int | None  # index in the prepared list of the last stable message
    positions: list[tuple[int, int]]  # (message index or -1 for system, block index)


@dataclass
class AnthropicRequest:
    """``system`` + ``messages`` ready for ``messages.create``."""

    system: list[dict[str, Any]]
    messages: list[dict[str, Any]]
    system_was_string: bool = False
    breakpoints: CacheBreakpoints | None = None

    def kwargs(self) -> dict[str, Any]:
        out: dict[str, Any] = {"messages": self.messages}
        if self.system:
            plain = (
                self.system_was_string
                and len(self.system) == 1
                and set(self.system[0]) == {"type", "text"}
            )
            out["system"] = self.system[0]["text"] if plain else self.system
        return out

    def _count_markers(self) -> int:
        n = sum(1 for b in self.system if isinstance(b, dict) and "cache_control" in b)
        for m in self.messages:
            if isinstance(m["content"], list):
                n += sum(1 for b in m["content"] if isinstance(b, dict) and "cache_control" in b)
        return n

    def _mark(self, pos: tuple[int, int]) -> bool:
        mi, bi = pos
        if mi == -1:
            if not (0 <= bi < len(self.system)):
                return False
            block = self.system[bi]
        else:
            if not (0 <= mi < len(self.messages)):
                return False
            msg = self.messages[mi]
            if isinstance(msg["content"], str):
                if not msg["content"]:
                    return False
                msg["content"] = [{"type": "text", "text": msg["content"]}]
                bi = 0
            if not (0 <= bi < len(msg["content"])):
                return False
            block = msg["content"][bi]
        if not isinstance(block, dict) or block.get("type") in ("thinking", "redacted_thinking"):
            return False
        if block.get("type") == "text" and not block.get("text"):
            return False
        if "cache_control" not in block:
            block["cache_control"] = dict(EPHEMERAL)
        return True

    def place_breakpoints(
        self,
        where: Mapping[int, tuple[int, int]],
        stable_index: int | None,
        *,
        cache_tail: bool,
    ) -> None:
        wanted: list[tuple[int, int]] = []
        if stable_index is not None:
            # the last block of the stable prefix; walk back over messages that map nowhere
            for i in range(stable_index, -1, -1):
                if i in where:
                    wanted.append(where[i])
                    break
        elif 0 in where and where[0][0] == -1:
            wanted.append(where[0])  # the caller's system prompt (not the ledger after it)
        elif self.system:
            wanted.append((-1, len(self.system) - 1))
        if cache_tail and self.messages:
            last = self.messages[-1]
            bi = 0 if isinstance(last["content"], str) else len(last["content"]) - 1
            tail = (len(self.messages) - 1, bi)
            if tail not in wanted:
                wanted.append(tail)
        placed: list[tuple[int, int]] = []
        for pos in wanted:
            if self._count_markers() >= MAX_BREAKPOINTS:
                break
            if self._mark(pos):
                placed.append(pos)
        self.breakpoints = CacheBreakpoints(stable_index=stable_index, positions=placed)


def to_openai(messages: Sequence[Any], system: Any = None) -> list[Message]:
    """Messages API ``messages`` (+ ``system``) as OpenAI-style messages."""
    return AnthropicConversation(messages, system).messages


def from_openai(
    prepared: Sequence[Mapping[str, Any]], conversation: AnthropicConversation
) -> dict[str, Any]:
    """``{"messages": ..., "system": ...}`` for a prepared list of ``conversation``."""
    return conversation.to_request(prepared).kwargs()


def tools_for_count(tools: Any) -> list[dict[str, Any]] | None:
    """Anthropic tool definitions as the OpenAI function shapes the counter expects."""
    if not is_given(tools) or not tools or not isinstance(tools, list | tuple):
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
        for t in to_plain(list(tools))
        if isinstance(t, Mapping)
    ]
    return out or None


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
        conv = AnthropicConversation(messages, system)
        return Extracted(dict(body), conv.messages, tools_for_count(body.get("tools")), conv)

    def conversation(self, req: Extracted) -> AnthropicConversation:
        conv = req.state
        assert isinstance(conv, AnthropicConversation)
        return conv

    def build(
        self, req: Extracted, prepared: Sequence[Mapping[str, Any]], tools: Any = None
    ) -> bytes:
        out = {k: v for k, v in req.body.items() if k not in ("messages", "system")}
        out.update(self.conversation(req).to_request(prepared).kwargs())
        if tools is not None:
            out["tools"] = tools
        return dumps(out)

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


class AnthropicStreamTurn:
    """A streamed Messages answer (``message_start``, ``content_block_*`` events).

    ``thinking`` / ``redacted_thinking`` blocks are reported as ``"thinking"`` and kept
    whole (text and signature) for :meth:`answer`, in their place before the text and
    the tool calls.
    """

    def __init__(self) -> None:
        self._seen = StreamCalls()
        self._head: dict[str, Any] = {}
        self._thinking: dict[int, dict[str, Any]] = {}

    @property
    def names(self) -> list[str]:
        return self._seen.names

    def event(self, obj: Mapping[str, Any]) -> str | None:
        kind = obj.get("type")
        if kind == "error":
            return "other"
        if kind == "message_start" and isinstance(obj.get("message"), dict):
            msg = obj["message"]
            self._head = {k: v for k, v in msg.items() if k not in ("content", "stop_reason")}
        elif kind == "content_block_start":
            block = obj.get("content_block")
            if not isinstance(block, dict):
                return "other"
            btype = block.get("type")
            if btype == "tool_use":
                return self._seen.start(obj.get("index"), block.get("id"), block.get("name"))
            if btype == "text":
                return self._seen.text_seen(block.get("text"))
            index = obj.get("index")
            if btype in ("thinking", "redacted_thinking") and isinstance(index, int):
                if len(self._thinking) < 64:
                    self._thinking[index] = copy.deepcopy(block)
                return "thinking"
            return "other"  # another block (a server tool): not a plain tool call
        elif kind == "content_block_delta":
            delta = obj.get("delta")
            if not isinstance(delta, dict):
                return "other"
            dtype = delta.get("type")
            if dtype == "text_delta":
                return self._seen.text_seen(delta.get("text"))
            if dtype == "input_json_delta":
                self._seen.args(obj.get("index"), delta.get("partial_json"))
            elif dtype in ("thinking_delta", "signature_delta"):
                block = self._thinking.get(obj.get("index"))  # type: ignore[arg-type]
                key = "thinking" if dtype == "thinking_delta" else "signature"
                part = delta.get(key)
                if block is not None and isinstance(part, str):
                    block[key] = str(block.get(key) or "") + part
        return None

    def calls(self) -> list[ToolCall]:
        return self._seen.tool_calls(parse=True)

    def answer(self) -> dict[str, Any]:
        content: list[dict[str, Any]] = [self._thinking[i] for i in sorted(self._thinking)]
        text = "".join(self._seen.text)
        if text:
            content.append({"type": "text", "text": text})
        for c in self.calls():
            content.append({"type": "tool_use", "id": c.id, "name": c.name, "input": c.arguments})
        return {**self._head, "role": "assistant", "content": content}
