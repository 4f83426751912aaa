"""Accessors of one OpenAI Chat message: its content as text, its fingerprint, and a copy
with another text (:func:`with_text`)."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from typing import Any

from ctxpolicy.conversation.jsontext import to_json

__all__ = ["Message", "content_text", "message_fingerprint", "with_text"]

Message = dict[str, Any]


def message_fingerprint(msg: Mapping[str, Any]) -> str:
    """Stable content hash of one message (all fields, key order independent)."""
    data = json.dumps(msg, sort_keys=True, ensure_ascii=False, default=str)
    return hashlib.blake2b(data.encode("utf-8", "surrogatepass"), digest_size=12).hexdigest()


def content_text(content: Any) -> str:
    """Text of a message ``content`` (string, list of parts, or None)."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        out = []
        for part in content:
            if isinstance(part, Mapping):
                if isinstance(part.get("text"), str):
                    out.append(part["text"])
            elif isinstance(part, str):
                out.append(part)
        return "\n".join(out)
    return to_json(content)[0]  # a malformed content (an object): its exact JSON text


def with_text(msg: Message, text: str) -> Message:
    """A copy of ``msg`` whose text is ``text``.

    A list content keeps every non-text part (images, audio, files) in place: the
    text parts are replaced by one text part where the first of them was.
    """
    new = dict(msg)
    content = msg.get("content")
    if not isinstance(content, list):
        new["content"] = text
        return new
    parts: list[Any] = []
    placed = False
    for part in content:
        is_text = isinstance(part, str) or (
            isinstance(part, Mapping) and isinstance(part.get("text"), str)
        )
        if not is_text:
            parts.append(part)
        elif not placed:
            parts.append({"type": "text", "text": text})
            placed = True
    if not placed:
        parts.insert(0, {"type": "text", "text": text})
    new["content"] = parts
    return new
