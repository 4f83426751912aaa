"""Server-sent events passing through the gateway: the provider's prompt tokens read from
the stream, and (when the gateway asked for them) the usage-only chunk kept from a client
that did not.

Bytes go back to the client as they arrive: in pass-through mode every chunk is yielded
unchanged at once and only a copy is scanned; in filter mode (the gateway added
``stream_options.include_usage``) a chunk is held only until its event is complete. Only
events that mention ``"usage"`` are parsed, and an event longer than :data:`MAX_EVENT_BYTES`
stops the scanning (its bytes are flushed unchanged), so memory stays bounded whatever the
upstream sends.
"""

from __future__ import annotations

import json
import re
from typing import Any

from ctxpolicy.gateway import wire_anthropic, wire_openai

__all__ = ["MAX_EVENT_BYTES", "StreamScanner"]

#: Longest event the scanner holds (bytes); past it the rest passes through unscanned.
MAX_EVENT_BYTES = 1024 * 1024
_END = re.compile(rb"\r\n\r\n|\n\n|\r\r")
_LINE = re.compile(rb"\r\n|\n|\r")


class StreamScanner:
    """Feed it the upstream's chunks; it returns what to send on and keeps ``usage``."""

    def __init__(self, api: str, *, drop_usage_chunk: bool = False) -> None:
        self.api = api
        self.drop = drop_usage_chunk and api == "chat"
        self.usage: int | None = None
        self._buf = bytearray()
        self._scanned = 0
        self._scanning = True

    def feed(self, chunk: bytes) -> bytes:
        """The bytes to send to the client now (possibly empty)."""
        if not self._scanning:
            return chunk
        self._buf += chunk
        out: list[bytes] = [] if self.drop else [chunk]
        pos = 0
        # only the new bytes (and 3 before them: a separator cut in two) are searched,
        # so a long event arriving in small chunks costs linear time
        for m in _END.finditer(self._buf, max(0, self._scanned - 3)):
            event = bytes(self._buf[pos : m.end()])
            pos = m.end()
            if self._event(event) and self.drop:
                out.append(event)
        del self._buf[:pos]
        self._scanned = len(self._buf)
        if len(self._buf) > MAX_EVENT_BYTES:  # hostile or broken stream: stop scanning
            self._scanning = False
            if self.drop:
                out.append(bytes(self._buf))
            self._buf = bytearray()
        return b"".join(out)

    def flush(self) -> bytes:
        """What is left at the end of the stream (an unterminated last event)."""
        rest = bytes(self._buf)
        self._buf = bytearray()
        self._scanned = 0
        if rest and self._scanning:
            self._event(rest)
        return rest if self.drop else b""

    def _event(self, event: bytes) -> bool:
        """Read one complete event; False when it is the usage chunk to drop."""
        if b'"usage"' not in event:
            return True
        data = b"\n".join(
            line[5:].lstrip(b" ") for line in _LINE.split(event) if line.startswith(b"data:")
        )
        try:
            obj: Any = json.loads(data)
        except ValueError:
            return True
        if not isinstance(obj, dict):
            return True
        if self.api == "anthropic":
            kind = obj.get("type")
            found = wire_anthropic.usage(obj.get("message") if kind == "message_start" else obj)
        else:
            found = wire_openai.usage(obj)
        if found:
            self.usage = found
        return not (self.drop and "usage" in obj and obj.get("choices") == [])
