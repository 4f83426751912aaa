"""Server-sent events framing, written once: complete events out of a byte stream, the
``data:`` of an event, and an event written back.

:class:`EventSplitter` searches only the bytes that arrived since the last call (and 3
before them: a separator cut in two), so a long event arriving in small chunks costs
linear time; the caller bounds how much it lets it hold (:attr:`EventSplitter.pending`).
"""

from __future__ import annotations

import json
import re
from typing import Any

__all__ = ["EventSplitter", "event_data", "format_event", "parse_event"]

_END = re.compile(rb"\r\n\r\n|\n\n|\r\r")
_LINE = re.compile(rb"\r\n|\n|\r")


class EventSplitter:
    """Feed it chunks; it returns the events they complete (each with its separator)."""

    def __init__(self) -> None:
        self._buf = bytearray()
        self._scanned = 0

    @property
    def pending(self) -> int:
        """Bytes held: the start of an event not complete yet."""
        return len(self._buf)

    def feed(self, chunk: bytes) -> list[bytes]:
        self._buf += chunk
        events: list[bytes] = []
        pos = 0
        for m in _END.finditer(self._buf, max(0, self._scanned - 3)):
            events.append(bytes(self._buf[pos : m.end()]))
            pos = m.end()
        del self._buf[:pos]
        self._scanned = len(self._buf)
        return events

    def take(self) -> bytes:
        """What is held (an unterminated event), emptying the splitter."""
        rest = bytes(self._buf)
        self._buf = bytearray()
        self._scanned = 0
        return rest


def event_data(event: bytes) -> bytes:
    """The ``data:`` lines of one event joined by newlines (the SSE rule)."""
    return b"\n".join(
        line[5:].lstrip(b" ") for line in _LINE.split(event) if line.startswith(b"data:")
    )


def parse_event(event: bytes) -> Any:
    """The JSON value of one event's data; None for no data or ``[DONE]``; raises
    :class:`ValueError` for data that is not JSON."""
    data = event_data(event)
    if not data or data.strip() == b"[DONE]":
        return None
    return json.loads(data)


def format_event(obj: Any, event: str | None = None) -> bytes:
    """One event carrying ``obj`` as compact JSON (``event:`` line when named)."""
    head = f"event: {event}\n".encode() if event else b""
    data = json.dumps(obj, ensure_ascii=False, separators=(",", ":")).encode()
    return head + b"data: " + data + b"\n\n"
