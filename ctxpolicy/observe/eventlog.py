"""Read an event log: one JSON object per line, as :class:`ctxpolicy.events.sinks.JsonlEventSink`
writes it (from a library session, an adapter, the gateway's ``--events`` or
``ctxpolicy simulate --events``).

Reading is streaming and bounded: a line longer than ``max_line_bytes`` is skipped
without being held whole, a line that is not a JSON object (or nests deeper than JSON
decoding allows) is skipped and counted. Linear in the file's size.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

__all__ = ["MAX_LINE_BYTES", "EventLog"]

MAX_LINE_BYTES = 1_000_000


@dataclass
class EventLog:
    """The events of one file; ``skipped`` counts the lines that were not events."""

    path: Path
    max_line_bytes: int = MAX_LINE_BYTES
    lines: int = 0
    skipped: int = 0
    first_bad: list[int] = field(default_factory=list)  # line numbers, at most 5

    def __iter__(self) -> Iterator[dict[str, Any]]:
        with open(self.path, "rb") as fh:
            yield from self.read(fh)

    def read(self, fh: IO[bytes]) -> Iterator[dict[str, Any]]:
        """The events of ``fh`` (binary, read line by line)."""
        while True:
            line = fh.readline(self.max_line_bytes + 1)
            if not line:
                return
            self.lines += 1
            if len(line) > self.max_line_bytes and not line.endswith(b"\n"):
                while line and not line.endswith(b"\n"):  # the rest of the long line
                    line = fh.readline(self.max_line_bytes + 1)
                self._bad()
                continue
            if not line.strip():
                continue
            try:
                event = json.loads(line)
            except (ValueError, RecursionError):
                self._bad()
                continue
            if not isinstance(event, dict) or not isinstance(event.get("type"), str):
                self._bad()
                continue
            yield event

    def _bad(self) -> None:
        self.skipped += 1
        if len(self.first_bad) < 5:
            self.first_bad.append(self.lines)
