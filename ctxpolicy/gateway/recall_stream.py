"""``--recall`` with streaming: is the answer arriving a recall-only call?

The gateway holds the upstream's events (not the client's stream) until the answer shows
it is not a recall-only call: the first non-blank text, or a tool call whose name is not
``ctx_recall``/``ctx_search`` (thinking blocks before the calls are held with them). Then the held bytes and the rest go to the client as they
arrive. When the stream ends and every tool call was a recall tool, the probe gives back
the assistant turn as a complete (non-streaming) answer of the same wire, so the call
loop answers the calls itself exactly as it does without streaming.

Bounded: at most :data:`MAX_HELD_BYTES` are held (past that the answer is passed on as it
is), tool-call arguments are concatenated only up to the same bound, and only complete
events are parsed.
"""

from __future__ import annotations

from typing import Any

from ctxpolicy.calls.driver import RECALL_NAMES
from ctxpolicy.wire import WIRES
from ctxpolicy.wire.sse import EventSplitter, parse_event

__all__ = ["MAX_HELD_BYTES", "RecallProbe"]

#: Most bytes of one upstream answer held while deciding (past it: passed on unchanged).
MAX_HELD_BYTES = 4 * 1024 * 1024


class RecallProbe:
    """Feed it the upstream's chunks; ``decided`` turns True once the answer is not
    recall-only (then :attr:`held` is what to send first)."""

    def __init__(self, api: str) -> None:
        self.api = api
        self.decided = False
        self.held = bytearray()
        self._events = EventSplitter()
        self._turn = WIRES.get(api, WIRES["chat"]).stream_turn()

    def feed(self, chunk: bytes) -> bool:
        """Hold ``chunk``; True once the answer is known not to be a recall-only call."""
        if self.decided:
            return True
        self.held += chunk
        if len(self.held) > MAX_HELD_BYTES:
            self.decided = True
            return True
        for event in self._events.feed(chunk):
            if self._event(event):
                self.decided = True
                return True
        return False

    def answer(self) -> dict[str, Any] | None:
        """At the end of an undecided stream: the answer as a non-streaming response body
        when it is a recall-only call, else None (then :attr:`held` goes to the client)."""
        if self.decided or not self._turn.calls():
            return None
        if not all(c.name in RECALL_NAMES for c in self._turn.calls()):
            return None
        return self._turn.answer()

    def _event(self, event: bytes) -> bool:
        """Read one complete event; True when it shows the answer is not recall-only."""
        try:
            obj: Any = parse_event(event)
        except ValueError:
            return True  # not an event the probe understands: pass the answer on
        if obj is None:
            return False
        if not isinstance(obj, dict):
            return True
        seen = self._turn.event(obj)
        if seen == "call":
            return any(n not in RECALL_NAMES for n in self._turn.names)
        # thinking (a reasoning item) comes before the calls of a recall-only answer: held,
        # kept whole in the answer; text or another block: not a plain recall call
        return seen is not None and seen != "thinking"
