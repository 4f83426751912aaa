"""Server-sent events passing through the gateway: the provider's prompt tokens read from
the stream, and (when the gateway asked for them) the usage-only chunk kept from a client
that did not.

Bytes go back to the client as they arrive: in pass-through mode every chunk is yielded
unchanged at once and only a copy is scanned; in filter mode (the gateway added
``stream_options.include_usage``) a chunk is held only until its event is complete. Only
events that mention ``"usage"`` are parsed (by the request's wire,
:mod:`ctxpolicy.wire`), and an event longer than :data:`MAX_EVENT_BYTES` stops the
scanning (its bytes are flushed unchanged), so memory stays bounded whatever the
upstream sends.
"""

from __future__ import annotations

from typing import Any

from ctxpolicy.wire import WIRES
from ctxpolicy.wire.sse import EventSplitter, parse_event

__all__ = ["MAX_EVENT_BYTES", "StreamScanner"]

#: Longest event the scanner holds (bytes); past it the rest passes through unscanned.
MAX_EVENT_BYTES = 1024 * 1024


class StreamScanner:
    """Feed it the upstream's chunks; it returns what to send on and keeps ``usage``."""

    def __init__(self, api: str, *, drop_usage_chunk: bool = False) -> None:
        self.api = api
        self.wire = WIRES.get(api, WIRES["chat"])
        self.drop = drop_usage_chunk
        self.usage: int | None = None
        self._events = EventSplitter()
        self._scanning = True

    def feed(self, chunk: bytes) -> bytes:
        """The bytes to send to the client now (possibly empty)."""
        if not self._scanning:
            return chunk
        out: list[bytes] = [] if self.drop else [chunk]
        for event in self._events.feed(chunk):
            if self._event(event) and self.drop:
                out.append(event)
        if self._events.pending > MAX_EVENT_BYTES:  # hostile or broken stream: stop scanning
            self._scanning = False
            rest = self._events.take()
            if self.drop:
                out.append(rest)
        return b"".join(out)

    def flush(self) -> bytes:
        """What is left at the end of the stream (an unterminated last event)."""
        rest = self._events.take()
        if rest and self._scanning:
            self._event(rest)
        return rest if self.drop else b""

    def _event(self, event: bytes) -> bool:
        """Read one complete event; False when it is the usage chunk to drop."""
        if b'"usage"' not in event:
            return True
        try:
            obj: Any = parse_event(event)
        except ValueError:
            return True
        if not isinstance(obj, dict):
            return True
        found = self.wire.stream_usage(obj)
        if found:
            self.usage = found
        return not (self.drop and self.wire.is_usage_only_event(obj))
