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
"""

from __future__ import annotations

import base64
import binascii
import copy
import math
import re
import struct
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ctxpolicy.conversation import Message, content_text
from ctxpolicy.conversation.samejson import content_key
from ctxpolicy.wire._stream import StreamCalls
from ctxpolicy.wire.base import (
    Extracted,
    ToolCall,
    WireError,
    converted_tools,
    dumps,
    is_given,
    json_args,
    parse_args,
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

#: The Messages API accepts at most this many ``cache_control`` breakpoints.
MAX_BREAKPOINTS = 4
EPHEMERAL: dict[str, str] = {"type": "ephemeral"}
OMITTED_PREFIX = "[earlier conversation omitted to fit the context window]"


#: Tokens of an image whose size is unknown, and the most one image costs: the provider
#: scales larger images down (long edge 1,568 px, about 1.15 megapixels, ~1,600 tokens).
IMAGE_MAX_TOKENS = 1600
#: Tokens counted per PDF page: its text and its page image (the provider counts
#: 1,500-3,000 tokens per page).
PDF_PAGE_TOKENS = 3000
#: A PDF whose pages cannot be counted here is estimated at one page per this many bytes.
PDF_BYTES_PER_PAGE = 50_000
#: A document or image given by URL or file id (its content is not in the request):
#: counted as one PDF page; the provider's overflow error corrects a longer one.
DOCUMENT_UNKNOWN_TOKENS = PDF_PAGE_TOKENS
#: Most bytes of an image read to find its size (JPEG size markers are near the start).
_IMAGE_HEAD_BYTES = 64 * 1024
_THINKING = ("thinking", "redacted_thinking")
_MEDIA = ("image", "document")
_PAGE = re.compile(rb"/Type\s*/Page(?![A-Za-z])")


def image_tokens(width: int | None, height: int | None) -> int:
    """Anthropic's image rule: ``width * height / 750`` tokens, at most
    :data:`IMAGE_MAX_TOKENS` (larger images are scaled down); unknown size: the maximum."""
    if not width or not height or width <= 0 or height <= 0:
        return IMAGE_MAX_TOKENS
    return max(1, min(IMAGE_MAX_TOKENS, math.ceil(width * height / 750)))


def _b64(data: Any, limit: int | None = None) -> bytes:
    if not isinstance(data, str):
        return b""
    text = data if limit is None else data[: (limit // 3 + 1) * 4]
    try:
        return base64.b64decode(text + "=" * (-len(text) % 4), validate=False)
    except (ValueError, binascii.Error):
        return b""


def _jpeg_size(head: bytes) -> tuple[int, int] | None:
    i = 2
    while i + 9 < len(head):
        if head[i] != 0xFF:
            return None
        marker = head[i + 1]
        if 0xC0 <= marker <= 0xCF and marker not in (0xC4, 0xC8, 0xCC):
            h, w = struct.unpack(">HH", head[i + 5 : i + 9])
            return w, h
        i += 2 + struct.unpack(">H", head[i + 2 : i + 4])[0]
    return None


def _image_size(head: bytes) -> tuple[int, int] | None:
    """Width and height from the first bytes of a PNG, GIF, JPEG or WebP image."""
    if head[:8] == b"\x89PNG\r\n\x1a\n" and len(head) >= 24:
        w, h = struct.unpack(">II", head[16:24])
        return int(w), int(h)
    if head[:6] in (b"GIF87a", b"GIF89a") and len(head) >= 10:
        w, h = struct.unpack("<HH", head[6:10])
        return int(w), int(h)
    if head[:2] == b"\xff\xd8":
        return _jpeg_size(head)
    if head[:4] == b"RIFF" and head[8:12] == b"WEBP" and len(head) >= 30:
        kind = head[12:16]
        if kind == b"VP8 ":
            w, h = struct.unpack("<HH", head[26:30])
            return w & 0x3FFF, h & 0x3FFF
        if kind == b"VP8L":
            bits = int.from_bytes(head[21:25], "little")
            return (bits & 0x3FFF) + 1, ((bits >> 14) & 0x3FFF) + 1
        if kind == b"VP8X":
            return int.from_bytes(head[24:27], "little") + 1, int.from_bytes(
                head[27:30], "little"
            ) + 1
    return None


def _text_tokens(text: str) -> int:
    """An upper estimate of a text's tokens without a tokenizer: one per 3 UTF-8 bytes."""
    return math.ceil(len(text.encode("utf-8", "surrogatepass")) / 3)


def media_tokens(block: Mapping[str, Any]) -> int:
    """Tokens of an ``image`` or ``document`` block by the provider's rules (docs/wire.md):
    images by their size, PDFs by their pages, text documents by their text, content
    documents by their blocks; content given by URL or file id by an upper estimate."""
    src = block.get("source")
    src = src if isinstance(src, Mapping) else {}
    stype = src.get("type")
    if block.get("type") == "image":
        if stype == "base64":
            return image_tokens(*(_image_size(_b64(src.get("data"), _IMAGE_HEAD_BYTES)) or (0, 0)))
        return IMAGE_MAX_TOKENS
    if stype == "text":
        return _text_tokens(str(src.get("data", "")))
    if stype == "content":
        inner = src.get("content")
        if isinstance(inner, str):
            return _text_tokens(inner)
        return sum(
            media_tokens(b) if b.get("type") == "image" else _text_tokens(str(b.get("text", "")))
            for b in inner or []
            if isinstance(b, Mapping)
        )
    if stype == "base64":
        raw = _b64(src.get("data"))
        pages = len(_PAGE.findall(raw)) or max(1, math.ceil(len(raw) / PDF_BYTES_PER_PAGE))
        return pages * PDF_PAGE_TOKENS
    return DOCUMENT_UNKNOWN_TOKENS


def _media_part(block: Mapping[str, Any]) -> dict[str, Any]:
    """An image or document block as an engine content part: the block itself and its
    ``tokens`` (counted as such by the engine; removed when the block is sent back)."""
    return {**block, "tokens": media_tokens(block)}


def _media_block(part: Mapping[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in part.items() if k != "tokens"}


def _is_media_part(part: Any) -> bool:
    return isinstance(part, Mapping) and part.get("type") in _MEDIA and "tokens" in part


def _block_to_part(block: Mapping[str, Any]) -> dict[str, Any] | None:
    """A content block as an engine content part (for counting and summaries).

    Thinking blocks stay whole (never text: summaries and squeezing do not see them, the
    engine counts them and sends them back byte-identical with their turn); images and
    documents keep their block with their token count.
    """
    btype = block.get("type")
    if btype == "text":
        return {"type": "text", "text": str(block.get("text", ""))}
    if btype in _MEDIA:
        return _media_part(block)
    if btype in _THINKING:
        return dict(block)
    if btype in ("tool_use", "tool_result"):
        return None
    return {"type": "text", "text": content_text([block]) or str(block.get("type", ""))}


def _tool_result_content(block: Mapping[str, Any]) -> Any:
    """A ``tool_result``'s content as the tool message's: its text, or text and media
    parts when it holds images or documents."""
    content = block.get("content")
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        blocks = [b for b in content if isinstance(b, Mapping)]
        if any(b.get("type") in _MEDIA for b in blocks):
            return [
                _media_part(b)
                if b.get("type") in _MEDIA
                else {
                    "type": "text",
                    "text": str(b.get("text", ""))
                    if b.get("type") == "text"
                    else f"[{b.get('type', 'block')}]",
                }
                for b in blocks
            ]
        parts = []
        for b in blocks:
            if b.get("type") == "text":
                parts.append(str(b.get("text", "")))
            else:
                parts.append(f"[{b.get('type', 'block')}]")
        return "\n".join(parts)
    return str(content)


def _input_object(arguments: Any) -> dict[str, Any]:
    """Tool-call arguments (JSON text, possibly squeezed) as the object ``input`` must be."""
    value = parse_args(arguments)
    if isinstance(value, dict):
        return value
    return {"_raw": arguments if isinstance(arguments, str) else json_args(value)}


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
                self.messages.append(msg)
                origins.append(_Origin("assistant", blocks))
                continue
            results = [b for b in blocks if b.get("type") == "tool_result"]
            others = [b for b in blocks if b.get("type") != "tool_result"]
            for b in results:
                tid = str(b.get("tool_use_id", ""))
                self._tool_results[tid] = b
                self.messages.append(
                    {"role": "tool", "tool_call_id": tid, "content": _tool_result_content(b)}
                )
                origins.append(_Origin("user", [b]))
            if others or not results:
                parts = [p for p in (_block_to_part(b) for b in others) if p is not None]
                self.messages.append({"role": role, "content": _simple_content(parts)})
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
        turns: list[_Turn] = []
        # (index in prepared) -> (turn index or -1 for system, where in the turn)
        where: dict[int, tuple[int, tuple[bool, int]]] = {}
        used: dict[Any, int] = {}
        for i, m in enumerate(prepared):
            fp = content_key(m)
            cands = self._origins.get(fp)
            origin: _Origin | None = None
            if cands:
                n = used.get(fp, 0)
                used[fp] = n + 1
                origin = cands[min(n, len(cands) - 1)]
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
            turns.append(_Turn(role, blocks))
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
                "content": _result_blocks(content)
                if isinstance(content, list) and any(_is_media_part(p) for p in content)
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
                if isinstance(p, Mapping) and p.get("type") in _THINKING
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
                use["input"] = _input_object(args)
                blocks.append(use)
            return "assistant", blocks
        if isinstance(content, list):
            return "user", _user_blocks(content)
        return "user", [str(content or "")]


def _user_blocks(content: Sequence[Any]) -> list[dict[str, Any]]:
    blocks: list[dict[str, Any]] = []
    for p in content:
        if _is_media_part(p):
            blocks.append(_media_block(p))
        elif isinstance(p, Mapping) and p.get("type") == "image_url":
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
    return blocks


def _result_blocks(content: Sequence[Any]) -> list[dict[str, Any]]:
    """A rewritten tool message's parts as ``tool_result`` content (media kept)."""
    return [
        _media_block(p) if _is_media_part(p) else {"type": "text", "text": content_text([p])}
        for p in content
        if _is_media_part(p) or content_text([p])
    ]


class _Turn:
    """One turn being assembled: a user turn keeps its ``tool_result`` blocks apart from
    its other blocks (they go first), so merging costs the blocks added, not the turn."""

    def __init__(self, role: str, blocks: list[Any]) -> None:
        self.role = role
        self.plain: str | None = None
        self.results: list[dict[str, Any]] = []
        self.others: list[dict[str, Any]] = []
        if len(blocks) == 1 and isinstance(blocks[0], str):
            self.plain = blocks[0]
            return
        for b in blocks:
            b = {"type": "text", "text": b} if isinstance(b, str) else b
            self._put(b)

    def _put(self, b: dict[str, Any]) -> tuple[bool, int]:
        if self.role == "user" and b.get("type") == "tool_result":
            self.results.append(b)  # before the turn's other blocks, whenever it comes
            return True, len(self.results) - 1
        self.others.append(b)
        return False, len(self.others) - 1

    def last(self) -> tuple[bool, int]:
        if self.plain is not None:
            return False, 0
        if self.others:
            return False, len(self.others) - 1
        return True, len(self.results) - 1

    def add(self, blocks: list[Any]) -> tuple[bool, int]:
        if self.plain is not None:
            if self.plain:
                self.others.append({"type": "text", "text": self.plain})
            self.plain = None
        at: tuple[bool, int] | None = None
        for b in blocks:
            b = {"type": "text", "text": b} if isinstance(b, str) else b
            if b.get("type") == "text" and not b.get("text"):
                continue
            at = self._put(b)
        return at if at is not None else self.last()

    def index(self, at: tuple[bool, int]) -> int:
        """The position in the final content of a block placed at ``at``."""
        is_result, k = at
        return k if is_result or self.plain is not None else len(self.results) + k

    def message(self) -> dict[str, Any]:
        if self.plain is not None:
            return {"role": self.role, "content": self.plain}
        return {"role": self.role, "content": [*self.results, *self.others]}


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
        return dumps(out, req.tools_key if tools is None else None)

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
