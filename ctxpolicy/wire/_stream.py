"""The tool calls and text of one streamed answer, as the wires' stream readers collect them.

Bounded: at most :data:`MAX_CALLS` calls are followed (past that the answer is "other"),
and the caller bounds the bytes it feeds.
"""

from __future__ import annotations

import json
from typing import Any

from ctxpolicy.wire.base import ToolCall

__all__ = ["MAX_CALLS", "StreamCalls"]

#: Most tool calls of one streamed answer that a reader follows.
MAX_CALLS = 64


class StreamCalls:
    """Tool calls by stream index (id, name, argument pieces) and the visible text."""

    def __init__(self) -> None:
        self.calls: dict[int, dict[str, Any]] = {}
        self.text: list[str] = []

    @property
    def names(self) -> list[str]:
        return [c["name"] for c in self.calls.values() if c["name"]]

    def start(self, index: Any, cid: Any, name: Any) -> str | None:
        """A tool call (or a delta of one) at ``index``: ``"call"`` once it has a name,
        ``"other"`` for a malformed index or once :data:`MAX_CALLS` are followed, else
        None."""
        if not isinstance(index, int) or isinstance(index, bool) or len(self.calls) >= MAX_CALLS:
            return "other"
        entry = self.calls.setdefault(index, {"id": "", "name": "", "args": []})
        if isinstance(cid, str) and cid:
            entry["id"] = cid
        if isinstance(name, str) and name:
            entry["name"] = name
        return "call" if entry["name"] else None

    def args(self, index: Any, part: Any) -> None:
        entry = self.calls.get(index) if isinstance(index, int) else None
        if entry is not None and isinstance(part, str):
            entry["args"].append(part)

    def text_seen(self, text: Any) -> str | None:
        """``"text"`` when ``text`` is visible (not blank), else None."""
        if not isinstance(text, str):
            return None
        self.text.append(text)
        return "text" if text.strip() else None

    def ordered(self) -> list[dict[str, Any]]:
        return [self.calls[i] for i in sorted(self.calls)]

    def tool_calls(self, *, parse: bool) -> list[ToolCall]:
        """The calls in stream order; arguments parsed as an object when ``parse``."""
        out = []
        for c in self.ordered():
            raw = "".join(c["args"])
            if parse:
                try:
                    args: Any = json.loads(raw or "{}")
                except ValueError:
                    args = {}
                out.append(ToolCall(c["id"], c["name"], args))
            else:
                out.append(ToolCall(c["id"], c["name"], raw))
        return out
