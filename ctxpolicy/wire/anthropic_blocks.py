"""Anthropic content blocks as the engine's content parts, and their token counts.

``text`` blocks become text parts; ``image`` / ``document`` blocks stay whole with their
token count by the provider's rules (:func:`media_tokens`); ``thinking`` /
``redacted_thinking`` blocks stay whole (counted, never text); a ``tool_result``'s
content becomes its tool message's content. The way back (a rewritten message's parts
as blocks) is here too.
"""

from __future__ import annotations

import base64
import binascii
import math
import re
from collections.abc import Mapping, Sequence
from typing import Any

from ctxpolicy.conversation import content_text
from ctxpolicy.conversation.images import image_size
from ctxpolicy.wire.base import json_args, parse_args

__all__ = [
    "DOCUMENT_UNKNOWN_TOKENS",
    "IMAGE_MAX_TOKENS",
    "PDF_BYTES_PER_PAGE",
    "PDF_PAGE_TOKENS",
    "THINKING",
    "block_to_part",
    "image_tokens",
    "input_object",
    "is_media_part",
    "media_block",
    "media_part",
    "media_tokens",
    "result_blocks",
    "simple_content",
    "tool_result_content",
    "user_blocks",
]

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
THINKING = ("thinking", "redacted_thinking")
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
            return image_tokens(*(image_size(_b64(src.get("data"), _IMAGE_HEAD_BYTES)) or (0, 0)))
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


def media_part(block: Mapping[str, Any]) -> dict[str, Any]:
    """An image or document block as an engine content part: the block itself and its
    ``tokens`` (counted as such by the engine; removed when the block is sent back)."""
    return {**block, "tokens": media_tokens(block)}


def media_block(part: Mapping[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in part.items() if k != "tokens"}


def is_media_part(part: Any) -> bool:
    return isinstance(part, Mapping) and part.get("type") in _MEDIA and "tokens" in part


def block_to_part(block: Mapping[str, Any]) -> dict[str, Any] | None:
    """A content block as an engine content part (for counting and summaries).

    Thinking blocks stay whole (never text: summaries and squeezing do not see them, the
    engine counts them and sends them back byte-identical with their turn); images and
    documents keep their block with their token count.
    """
    btype = block.get("type")
    if btype == "text":
        return {"type": "text", "text": str(block.get("text", ""))}
    if btype in _MEDIA:
        return media_part(block)
    if btype in THINKING:
        return dict(block)
    if btype in ("tool_use", "tool_result"):
        return None
    return {"type": "text", "text": content_text([block]) or str(block.get("type", ""))}


def tool_result_content(block: Mapping[str, Any]) -> Any:
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
                media_part(b)
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


def input_object(arguments: Any) -> dict[str, Any]:
    """Tool-call arguments (JSON text, possibly squeezed) as the object ``input`` must be."""
    value = parse_args(arguments)
    if isinstance(value, dict):
        return value
    return {"_raw": arguments if isinstance(arguments, str) else json_args(value)}


def simple_content(parts: list[dict[str, Any]]) -> Any:
    if all(p.get("type") == "text" for p in parts):
        return "\n".join(str(p["text"]) for p in parts)
    return parts


def user_blocks(content: Sequence[Any]) -> list[dict[str, Any]]:
    blocks: list[dict[str, Any]] = []
    for p in content:
        if is_media_part(p):
            blocks.append(media_block(p))
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


def result_blocks(content: Sequence[Any]) -> list[dict[str, Any]]:
    """A rewritten tool message's parts as ``tool_result`` content (media kept)."""
    return [
        media_block(p) if is_media_part(p) else {"type": "text", "text": content_text([p])}
        for p in content
        if is_media_part(p) or content_text([p])
    ]
