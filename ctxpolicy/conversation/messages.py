"""Accessors of one OpenAI Chat message: its content as text, its fingerprint, a copy
with another text (:func:`with_text`), its tool calls (:func:`tool_calls`, :func:`call_id`,
:func:`call_name`, :func:`call_arguments`) and the call a tool result answers
(:func:`result_id`); :func:`nth_original` maps prepared messages back to the objects
they were made from."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from typing import Any, TypeVar

from ctxpolicy.conversation.jsontext import to_json
from ctxpolicy.conversation.repair import call_key

__all__ = [
    "Message",
    "arguments_text",
    "call_arguments",
    "call_id",
    "call_name",
    "calls_arguments_text",
    "content_text",
    "function_tool",
    "message_fingerprint",
    "new_call",
    "nth_original",
    "result_id",
    "tool_calls",
    "with_text",
]

Message = dict[str, Any]
K = TypeVar("K")
T = TypeVar("T")


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


def tool_calls(msg: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    """The tool calls of an assistant message: the objects of its ``tool_calls`` list
    (none for another message or a field that is not a list; entries that are not
    objects are left out)."""
    calls = msg.get("tool_calls")
    if not isinstance(calls, list | tuple):
        return []
    return [tc for tc in calls if isinstance(tc, Mapping)]


def new_call(call_id: str, name: str, arguments: str) -> dict[str, Any]:
    """A new tool call (``arguments``: JSON text)."""
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}


def function_tool(name: str, description: str, parameters: Any) -> dict[str, Any]:
    """A tool definition in the OpenAI function shape the counter reads."""
    return {
        "type": "function",
        "function": {"name": name, "description": description, "parameters": parameters},
    }


def call_id(call: Mapping[str, Any]) -> str:
    """A tool call's id ("" when it has none)."""
    return str(call.get("id", ""))


def call_name(call: Mapping[str, Any]) -> str:
    """The name of a tool call's function ("" when it has none)."""
    fn = call.get("function")
    return str(fn.get("name") or "") if isinstance(fn, Mapping) else ""


def call_arguments(call: Mapping[str, Any], default: Any = None) -> Any:
    """A tool call's arguments as written (JSON text once the engine repaired the
    message; ``default`` when there are none)."""
    fn = call.get("function")
    return fn.get("arguments", default) if isinstance(fn, Mapping) else default


def arguments_text(call: Mapping[str, Any]) -> str:
    """A tool call's arguments as text: as written when a string, else as JSON
    (non-ASCII kept); "" when there are none."""
    args = call_arguments(call, "")
    return args if isinstance(args, str) else json.dumps(args, ensure_ascii=False)


def calls_arguments_text(msg: Mapping[str, Any]) -> str:
    """The arguments of every tool call of ``msg`` (:func:`arguments_text`), one call a
    line; "" when it makes none."""
    return "\n".join(map(arguments_text, tool_calls(msg)))


def result_id(msg: Mapping[str, Any]) -> str:
    """The id of the call a ``tool`` message answers (its ``tool_call_id`` as the key
    results are matched by: "" when it has none)."""
    return call_key(msg.get("tool_call_id"))


def nth_original(originals: Mapping[K, Sequence[T]], used: dict[K, int], key: K) -> T | None:
    """The original a prepared message with ``key`` stands for, or None when no original
    has that key: the n-th message with a key gets the n-th original with it (the last
    when there are fewer). ``used`` counts the keys taken in one conversion."""
    found = originals.get(key)
    if not found:
        return None
    n = used.get(key, 0)
    used[key] = n + 1
    return found[min(n, len(found) - 1)]
