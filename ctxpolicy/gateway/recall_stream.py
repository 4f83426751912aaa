"""``--recall`` with streaming: is the answer arriving a recall-only call?

The gateway holds the upstream's events (not the client's stream) until the answer shows
it is not a recall-only call: the first non-blank text, or a tool call whose name is not
``ctx_recall``/``ctx_search``. Then the held bytes and the rest go to the client as they
arrive. When the stream ends and every tool call was a recall tool, the probe gives back
the assistant turn as a complete (non-streaming) answer of the same wire, so the call
loop answers the calls itself exactly as it does without streaming.

Bounded: at most :data:`MAX_HELD_BYTES` are held (past that the answer is passed on as it
is), tool-call arguments are concatenated only up to the same bound, and only complete
events are parsed.
"""

from __future__ import annotations

import json
import re
from typing import Any

from ctxpolicy.gateway.recall import RECALL_NAMES

__all__ = ["MAX_HELD_BYTES", "RecallProbe"]

#: Most bytes of one upstream answer held while deciding (past it: passed on unchanged).
MAX_HELD_BYTES = 4 * 1024 * 1024
_END = re.compile(rb"\r\n\r\n|\n\n|\r\r")
_LINE = re.compile(rb"\r\n|\n|\r")


class RecallProbe:
    """Feed it the upstream's chunks; ``decided`` turns True once the answer is not
    recall-only (then :attr:`held` is what to send first)."""

    def __init__(self, api: str) -> None:
        self.api = api
        self.decided = False
        self.held = bytearray()
        self._pending = bytearray()
        self._scanned = 0
        self._calls: dict[int, dict[str, Any]] = {}  # index -> {id, name, args}
        self._head: dict[str, Any] = {}  # chat: id/model; anthropic: message_start.message
        self._text: list[str] = []

    def feed(self, chunk: bytes) -> bool:
        """Hold ``chunk``; True once the answer is known not to be a recall-only call."""
        if self.decided:
            return True
        self.held += chunk
        if len(self.held) > MAX_HELD_BYTES:
            self.decided = True
            return True
        self._pending += chunk
        pos = 0
        # search only the new bytes (and 3 before them: a separator cut in two), so a
        # long event arriving in small chunks costs linear time
        for m in _END.finditer(self._pending, max(0, self._scanned - 3)):
            event = bytes(self._pending[pos : m.end()])
            pos = m.end()
            if self._event(event):
                self.decided = True
                return True
        del self._pending[:pos]
        self._scanned = len(self._pending)
        return False

    def answer(self) -> dict[str, Any] | None:
        """At the end of an undecided stream: the answer as a non-streaming response body
        when it is a recall-only call, else None (then :attr:`held` goes to the client)."""
        if self.decided or not self._calls:
            return None
        calls = [self._calls[i] for i in sorted(self._calls)]
        if not all(c["name"] in RECALL_NAMES for c in calls):
            return None
        text = "".join(self._text)
        if self.api == "anthropic":
            content: list[dict[str, Any]] = [{"type": "text", "text": text}] if text else []
            for c in calls:
                try:
                    args = json.loads("".join(c["args"]) or "{}")
                except ValueError:
                    args = {}
                content.append(
                    {"type": "tool_use", "id": c["id"], "name": c["name"], "input": args}
                )
            return {**self._head, "role": "assistant", "content": content}
        tool_calls = [
            {
                "id": c["id"],
                "type": "function",
                "function": {"name": c["name"], "arguments": "".join(c["args"])},
            }
            for c in calls
        ]
        msg = {"role": "assistant", "content": text or None, "tool_calls": tool_calls}
        return {**self._head, "choices": [{"index": 0, "message": msg}]}

    # -- events -----------------------------------------------------------------------
    def _event(self, event: bytes) -> bool:
        """Read one complete event; True when it shows the answer is not recall-only."""
        data = b"\n".join(
            line[5:].lstrip(b" ") for line in _LINE.split(event) if line.startswith(b"data:")
        )
        if not data or data.strip() == b"[DONE]":
            return False
        try:
            obj: Any = json.loads(data)
        except ValueError:
            return True  # not an event the probe understands: pass the answer on
        if not isinstance(obj, dict):
            return True
        return self._anthropic(obj) if self.api == "anthropic" else self._chat(obj)

    def _text_seen(self, text: Any) -> bool:
        if not isinstance(text, str):
            return False
        self._text.append(text)
        return bool(text.strip())

    def _call(self, index: Any, cid: Any, name: Any) -> bool:
        """A tool call starts; True when it is not a recall tool."""
        if not isinstance(index, int) or isinstance(index, bool) or len(self._calls) >= 64:
            return True
        name = name if isinstance(name, str) else ""
        self._calls.setdefault(index, {"id": "", "name": "", "args": []})
        entry = self._calls[index]
        if isinstance(cid, str) and cid:
            entry["id"] = cid
        if name:
            entry["name"] = name
        return bool(entry["name"]) and entry["name"] not in RECALL_NAMES

    def _args(self, index: Any, part: Any) -> None:
        entry = self._calls.get(index) if isinstance(index, int) else None
        if entry is not None and isinstance(part, str):
            entry["args"].append(part)

    def _chat(self, obj: dict[str, Any]) -> bool:
        if "error" in obj:
            return True
        if not self._head:
            self._head = {k: obj[k] for k in ("id", "created", "model") if k in obj}
            self._head["object"] = "chat.completion"
        choices = obj.get("choices")
        if not isinstance(choices, list):
            return False
        for ch in choices:
            delta = ch.get("delta") if isinstance(ch, dict) else None
            if not isinstance(delta, dict):
                continue
            if self._text_seen(delta.get("content")):
                return True
            for tc in delta.get("tool_calls") or []:
                if not isinstance(tc, dict):
                    return True
                fn = tc.get("function")
                if not isinstance(fn, dict):
                    fn = {}
                if self._call(tc.get("index"), tc.get("id"), fn.get("name")):
                    return True
                self._args(tc.get("index"), fn.get("arguments"))
        return False

    def _anthropic(self, obj: dict[str, Any]) -> bool:
        kind = obj.get("type")
        if kind == "error":
            return True
        if kind == "message_start" and isinstance(obj.get("message"), dict):
            msg = obj["message"]
            self._head = {k: v for k, v in msg.items() if k not in ("content", "stop_reason")}
        elif kind == "content_block_start":
            block = obj.get("content_block")
            if not isinstance(block, dict):
                return True
            if block.get("type") == "tool_use":
                return self._call(obj.get("index"), block.get("id"), block.get("name"))
            if block.get("type") == "text":
                return self._text_seen(block.get("text"))
            return True  # thinking or another block: not a plain recall call
        elif kind == "content_block_delta":
            delta = obj.get("delta")
            if not isinstance(delta, dict):
                return True
            if delta.get("type") == "text_delta":
                return self._text_seen(delta.get("text"))
            if delta.get("type") == "input_json_delta":
                self._args(obj.get("index"), delta.get("partial_json"))
        return False
