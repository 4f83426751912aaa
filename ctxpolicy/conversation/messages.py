"""Accessors of one OpenAI Chat message: its content as text and its fingerprint."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from typing import Any

from ctxpolicy.conversation.jsontext import to_json

__all__ = ["Message", "content_text", "message_fingerprint"]

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
