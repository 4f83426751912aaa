"""The chat framing of a request: per-message overhead, tool calls, content parts,
images and tool schemas (the rules of docs/tokenizers.md, "Chat overhead")."""

from __future__ import annotations

import base64
import json
import math
from collections.abc import Mapping, Sequence
from typing import Any, Literal

from ctxpolicy.conversation.images import png_gif_size
from ctxpolicy.conversation.samejson import MISS, JsonMemo, KeyedList, memo_key

__all__ = ["TOOL_CALL_TOKENS", "ChatFraming", "Overhead", "image_tokens"]

Overhead = Literal["openai", "design_b"]

# --------------------------------------------------------------------------- images

IMAGE_LOW_TOKENS = 85
IMAGE_TILE_TOKENS = 170
IMAGE_DEFAULT_SIZE = (1024, 1024)


def image_tokens(width: int | None, height: int | None, detail: str | None = "auto") -> int:
    """OpenAI's image rule: ``low`` = 85; else fit in 2048², shortest side to 768,
    then 170 per 512-px tile + 85. Unknown size: 1024×1024 (765 tokens)."""
    if detail == "low":
        return IMAGE_LOW_TOKENS
    w0, h0 = (width, height) if width and height else IMAGE_DEFAULT_SIZE
    scale = min(1.0, 2048 / max(w0, h0))
    w, h = w0 * scale, h0 * scale
    scale = min(1.0, 768 / min(w, h))
    w, h = w * scale, h * scale
    tiles = math.ceil(w / 512) * math.ceil(h / 512)
    return IMAGE_LOW_TOKENS + IMAGE_TILE_TOKENS * tiles


def _image_size(url: str) -> tuple[int, int] | None:
    """Width and height of a PNG or GIF ``data:`` URL, read from its header only."""
    if not url.startswith("data:"):
        return None
    _, _, b64 = url.partition(",")
    try:
        head = base64.b64decode(b64[:64] + "=" * (-len(b64[:64]) % 4))
    except Exception:
        return None
    return png_gif_size(head)


def _part_image_tokens(part: Mapping[str, Any]) -> int:
    img = part.get("image_url")
    if isinstance(img, str):
        img = {"url": img}
    if not isinstance(img, Mapping):
        img = {}
    detail = img.get("detail", "auto")
    w, h = part.get("width") or img.get("width"), part.get("height") or img.get("height")
    if not (w and h):
        size = _image_size(str(img.get("url", "")))
        if size:
            w, h = size
    return image_tokens(w, h, detail)


# --------------------------------------------------------------------------- framing

#: Tokens added per tool call on top of its name and arguments (call framing).
TOOL_CALL_TOKENS = 3

#: (tokens_per_message, tokens_per_name, reply_priming, count role & other fields)
_OVERHEADS: dict[str, tuple[int, int, int, bool]] = {
    "openai": (3, 1, 3, True),
    "design_b": (4, 0, 0, False),
}

#: Tool-schema constants of OpenAI's cookbook (func_init differs by model family).
_TOOLS_GPT4O = {
    "func_init": 7,
    "prop_init": 3,
    "prop_key": 3,
    "enum_init": -3,
    "enum_item": 3,
    "func_end": 12,
}
_TOOLS_GPT4 = {**_TOOLS_GPT4O, "func_init": 10}


class ChatFraming:
    """Tokens of messages and tool schemas as sent, given ``count_text`` (tokens of one
    text). Mixed into :class:`ctxpolicy.tokens.TokenCounter`."""

    _per_msg: int
    _per_name: int
    _priming: int
    _all_fields: bool
    _tool_consts: dict[str, int]

    def __init__(self, overhead: Overhead, model_name: str | None) -> None:
        if overhead not in _OVERHEADS:
            raise ValueError(f"overhead must be one of {sorted(_OVERHEADS)}, not {overhead!r}")
        self.overhead: Overhead = overhead
        self._per_msg, self._per_name, self._priming, self._all_fields = _OVERHEADS[overhead]
        family = (model_name or "").lower()
        self._tool_consts = (
            _TOOLS_GPT4
            if family.startswith(("gpt-4-", "gpt-3.5")) or family == "gpt-4"
            else _TOOLS_GPT4O
        )
        #: counts of the last tool lists (a client sends the same tools on every call)
        self._tools_memo = JsonMemo()

    def count_text(self, text: str) -> int:  # pragma: no cover - provided by the counter
        raise NotImplementedError

    def _compute_message(self, msg: Mapping[str, Any]) -> int:
        ct = self.count_text
        n = self._per_msg
        for key, value in msg.items():
            if key == "content":
                n += self._content_tokens(value)
            elif key == "tool_calls":
                # malformed shapes (a dict, a number) are counted, never raised on: the
                # engine repairs them after counting its input
                calls = value if isinstance(value, (list, tuple)) else [value] if value else []
                for tc in calls:
                    n += self._tool_call_tokens(tc)
            elif key == "function_call":  # legacy single call
                if isinstance(value, Mapping):
                    n += self._tool_call_tokens({"function": value})
            elif key == "name":
                if isinstance(value, str):
                    n += ct(value) + self._per_name
            elif key == "role":
                if self._all_fields and isinstance(value, str):
                    n += ct(value)
            elif key == "tool_call_id":
                if isinstance(value, str):
                    n += ct(value)
            elif self._all_fields and isinstance(value, str):
                n += ct(value)
        return n

    def _content_tokens(self, content: Any) -> int:
        if content is None:
            return 0
        if isinstance(content, str):
            return self.count_text(content)
        if isinstance(content, list):
            n = 0
            for part in content:
                if isinstance(part, str):
                    n += self.count_text(part)
                elif isinstance(part, Mapping):
                    ptype = part.get("type")
                    if isinstance(part.get("text"), str):
                        n += self.count_text(part["text"])
                    elif type(part.get("tokens")) is int:  # counted by the provider's rule
                        n += max(0, part["tokens"])
                    elif ptype in ("image_url", "image", "input_image"):
                        n += _part_image_tokens(part)
                    else:
                        n += self.count_text(json.dumps(part, ensure_ascii=False, default=str))
            return n
        return self.count_text(json.dumps(content, ensure_ascii=False, default=str))

    def _tool_call_tokens(self, tc: Any) -> int:
        # ``type(...) is dict`` first: an ABC ``isinstance`` is a Python-level call
        if type(tc) is not dict and not isinstance(tc, Mapping):
            return 0
        fn = tc.get("function")
        if type(fn) is not dict and not isinstance(fn, Mapping):
            fn = tc
        name = fn.get("name") or ""
        args = fn.get("arguments")
        if args is None:
            args = fn.get("input", "")
        if not isinstance(args, str):
            args = json.dumps(args, ensure_ascii=False, default=str)
        return TOOL_CALL_TOKENS + self.count_text(str(name)) + self.count_text(args)

    def count_tools(self, tools: Sequence[Mapping[str, Any]] | None) -> int:
        """Tokens of the tool/function schemas sent with a request (cookbook rule).

        Per function: ``func_init`` + tokens of ``"name:description"`` (trailing period
        dropped); if it has properties, ``prop_init`` + per property ``prop_key`` + tokens
        of ``"key:type:description"`` (+ ``enum_init`` + per item ``enum_item`` + tokens of
        the item when it has an ``enum``; + tokens of the remaining keywords as compact
        JSON, e.g. nested ``properties``/``items``). Once for the list: ``func_end``.
        """
        if not tools:
            return 0
        # a wire's converted tools carry their key (the same list on every call)
        key = tools.memo_key if type(tools) is KeyedList else memo_key(tools)
        n = self._tools_memo.get(key, "tokens")
        if n is MISS:
            n = self._count_tools(tools)
            self._tools_memo.put(key, "tokens", n)
        return int(n)

    def _count_tools(self, tools: Sequence[Mapping[str, Any]]) -> int:
        c = self._tool_consts
        ct = self.count_text
        n = 0
        for tool in tools:
            raw_fn = tool.get("function")
            fn: Mapping[str, Any] = raw_fn if isinstance(raw_fn, Mapping) else tool
            name = str(fn.get("name", ""))
            desc = str(fn.get("description") or "")
            desc = desc.removesuffix(".")
            n += c["func_init"] + ct(f"{name}:{desc}")
            params = fn.get("parameters") or fn.get("input_schema") or {}
            props = params.get("properties") if isinstance(params, Mapping) else None
            if props:
                n += c["prop_init"]
                for key, prop in props.items():
                    prop = prop if isinstance(prop, Mapping) else {}
                    n += c["prop_key"]
                    ptype = prop.get("type", "")
                    if isinstance(ptype, list):
                        ptype = "|".join(map(str, ptype))
                    pdesc = str(prop.get("description") or "").removesuffix(".")
                    if "enum" in prop and isinstance(prop["enum"], list):
                        n += c["enum_init"]
                        for item in prop["enum"]:
                            n += c["enum_item"] + ct(str(item))
                    n += ct(f"{key}:{ptype}:{pdesc}")
                    rest = {
                        k: v for k, v in prop.items() if k not in ("type", "description", "enum")
                    }
                    if rest:
                        n += ct(
                            json.dumps(rest, ensure_ascii=False, separators=(",", ":"), default=str)
                        )
        return n + c["func_end"]
