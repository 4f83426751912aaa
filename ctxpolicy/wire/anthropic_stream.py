"""A streamed Anthropic Messages answer: its tool calls, text and thinking blocks."""

from __future__ import annotations

import copy
from collections.abc import Callable, Mapping
from typing import Any

from ctxpolicy.wire._stream import StreamCalls
from ctxpolicy.wire.base import ToolCall

__all__ = ["AnthropicStreamTurn"]


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
            return self._block_event(obj, "content_block", self._block_start)
        elif kind == "content_block_delta":
            return self._block_event(obj, "delta", self._block_delta)
        return None

    def _block_event(
        self,
        obj: Mapping[str, Any],
        key: str,
        read: Callable[[Any, dict[str, Any]], str | None],
    ) -> str | None:
        """``read(index, part)`` of a block event whose ``key`` holds an object (the
        block or the delta); "other" when it does not."""
        part = obj.get(key)
        if not isinstance(part, dict):
            return "other"
        return read(obj.get("index"), part)

    def _block_start(self, index: Any, block: dict[str, Any]) -> str | None:
        btype = block.get("type")
        if btype == "tool_use":
            return self._seen.start(index, block.get("id"), block.get("name"))
        if btype == "text":
            return self._seen.text_seen(block.get("text"))
        if btype in ("thinking", "redacted_thinking") and isinstance(index, int):
            if len(self._thinking) < 64:
                self._thinking[index] = copy.deepcopy(block)
            return "thinking"
        return "other"  # another block (a server tool): not a plain tool call

    def _block_delta(self, index: Any, delta: dict[str, Any]) -> str | None:
        dtype = delta.get("type")
        if dtype == "text_delta":
            return self._seen.text_seen(delta.get("text"))
        if dtype == "input_json_delta":
            self._seen.args(index, delta.get("partial_json"))
        elif dtype in ("thinking_delta", "signature_delta"):
            block = self._thinking.get(index)
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
