"""Reading an event log: streaming, bounded, bad lines counted."""

from __future__ import annotations

import json
from pathlib import Path

from ctxpolicy.observe.eventlog import EventLog


def test_bad_lines_are_skipped_and_counted(tmp_path: Path) -> None:
    path = tmp_path / "events.jsonl"
    good = {"type": "context.status", "conv_id": "c", "used": 1}
    lines = [
        json.dumps(good),
        "not json",
        "[1, 2]",
        json.dumps({"no": "type"}),
        "",
        "[" * 100_000 + "]" * 100_000,  # nested deeper than the decoder allows
        "x" * 400_000,  # longer than the limit below
        json.dumps(good),
    ]
    path.write_text("\n".join(lines) + "\n")
    log = EventLog(path, max_line_bytes=300_000)
    events = list(log)
    assert events == [good, good]
    assert log.lines == 8 and log.skipped == 5
    assert log.first_bad == [2, 3, 4, 6, 7]


def test_a_last_line_without_newline(tmp_path: Path) -> None:
    path = tmp_path / "e.jsonl"
    path.write_bytes(b'{"type": "a"}\n{"type": "b"}')
    assert [e["type"] for e in EventLog(path)] == ["a", "b"]
