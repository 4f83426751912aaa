"""Event sinks and the export form of events.

Every event is a JSON-serialisable dict with a ``type``. The engine sends them to the
pluggy ``ctxpolicy_event`` observers and to an optional callback; :class:`JsonlEventSink`
is such a callback that appends them to a file, one JSON object per line. What each
event type carries is defined once, in :mod:`ctxpolicy.events.types` (re-exported
here as :data:`EVENTS`); docs/engine.md's table is generated from it.
"""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Mapping
from pathlib import Path
from types import TracebackType
from typing import IO, Any

from ctxpolicy.events.types import EVENTS, Event, status_fields

__all__ = [
    "CONTENT_FIELDS",
    "EVENTS",
    "STATUS_FIELDS",
    "TEXT_FIELDS",
    "Event",
    "JsonlEventSink",
    "export_event",
    "redact_text",
]

#: Keys every ``context.status`` event has, in order (design A's
#: ``{type, used, budget, ratio, state, compact_layer}`` first; ``budget`` is design A's
#: effective budget, our trigger): :class:`ctxpolicy.events.types.ContextStatus`.
STATUS_FIELDS: tuple[str, ...] = status_fields()


#: Fields that carry text of the conversation (facts of compacted messages). An
#: exported event has only their count (``<field>_count``) unless the sink was asked
#: for content, and then they are redacted (issue 29 item 1).
CONTENT_FIELDS: frozenset[str] = frozenset({"lost_facts"})
#: Free text written by code (an exception's message, a reason): exported redacted
#: and cut to :data:`MAX_TEXT` characters.
TEXT_FIELDS: frozenset[str] = frozenset(
    {"error", "reason", "detail", "problems", "violations", "hint"}
)
MAX_TEXT = 300
#: Any other string (names: layer, tool, state, ...) is exported up to this length.
MAX_NAME = 200
#: ``NAME=value`` / ``"name": "value"`` where the name says secret.
_SECRET_ASSIGN = (
    r"(?i)\b[\w.-]{0,40}(?:pass(?:word|wd)?|pwd|secret|token|api[_-]?key|credential|auth)"
    r"[\w.-]{0,40}[\"']?\s{0,3}[=:]\s{0,3}[\"']?[^\s\"',;&]{1,500}"
)
_redactor: Any = None


def redact_text(text: str) -> str:
    """``text`` with every built-in secret pattern of the ``redact`` preprocessor and
    ``NAME=value`` settings of secret-looking names replaced by ``[REDACTED:…]``."""
    global _redactor
    if _redactor is None:
        from ctxpolicy.conversation.redact import BUILTIN_PATTERNS, Redactor

        _redactor = Redactor({**BUILTIN_PATTERNS, "secret_setting": _SECRET_ASSIGN})
    return str(_redactor.redact(text)[0])


def _export_value(value: Any, limit: int) -> Any:
    if value is None or isinstance(value, bool | int | float):
        return value
    if isinstance(value, list | tuple):
        return [_export_value(v, limit) for v in value[:100]]
    if isinstance(value, dict):
        return {
            str(k): v for k, v in value.items() if v is None or isinstance(v, bool | int | float)
        }
    text = value if isinstance(value, str) else str(value)
    return redact_text(text[: limit * 4])[:limit]


def export_event(event: Mapping[str, Any], *, content: bool = False) -> dict[str, Any]:
    """The form of ``event`` that leaves the process (the JSONL and OTel sinks).

    Numbers and names by default: a :data:`CONTENT_FIELDS` field becomes its count
    (``lost_facts_count``), ``report`` keeps its numbers, free text
    (:data:`TEXT_FIELDS`) and names are redacted (:func:`redact_text`) and bounded.
    ``content=True`` adds the content fields and the report's texts, redacted.
    """
    out: dict[str, Any] = {}
    for key, value in event.items():
        if key in CONTENT_FIELDS:
            items = value if isinstance(value, list | tuple) else [value]
            out[f"{key}_count"] = len(items)
            if content:
                out[key] = [redact_text(str(v))[:MAX_TEXT] for v in items[:100]]
        elif key == "report" and isinstance(value, Mapping):
            if content:
                out[key] = {str(k): _export_value(v, MAX_TEXT) for k, v in value.items()}
            else:
                out[key] = {
                    str(k): v
                    for k, v in value.items()
                    if v is None or isinstance(v, bool | int | float)
                }
        else:
            out[key] = _export_value(value, MAX_TEXT if key in TEXT_FIELDS else MAX_NAME)
    return out


class JsonlEventSink:
    """Callable that appends each event as one JSON line to ``path``; thread-safe.

    The file (and its parent directories) is created on the first event, opened in
    append mode, and flushed after every line (``fsync=True`` also syncs to disk).
    Values JSON cannot encode are written with ``str()``; a lone surrogate as its
    ``\\udXXX`` escape, so every event reaches the file. What is written is
    :func:`export_event` of the event: numbers and names only unless
    ``content=True`` (then redacted). Use as a context manager or call :meth:`close`.
    """

    def __init__(
        self, path: str | os.PathLike[str], *, fsync: bool = False, content: bool = False
    ) -> None:
        self.path = Path(path)
        self.fsync = fsync
        self.content = content
        self._lock = threading.Lock()
        self._fh: IO[str] | None = None
        self.count = 0

    def __call__(self, event: dict[str, Any]) -> None:
        line = json.dumps(
            export_event(event, content=self.content),
            ensure_ascii=False,
            default=str,
            separators=(",", ":"),
        )
        if not line.isascii():
            # a lone surrogate cannot be written as UTF-8: escape it (issue 29 item 7)
            try:
                line.encode("utf-8")
            except UnicodeEncodeError:
                line = line.encode("utf-8", "backslashreplace").decode("utf-8")
        with self._lock:
            if self._fh is None:
                self.path.parent.mkdir(parents=True, exist_ok=True)
                self._fh = open(self.path, "a", encoding="utf-8")  # noqa: SIM115
            self._fh.write(line + "\n")
            self._fh.flush()
            if self.fsync:
                os.fsync(self._fh.fileno())
            self.count += 1

    def close(self) -> None:
        with self._lock:
            if self._fh is not None:
                self._fh.close()
                self._fh = None

    def __enter__(self) -> JsonlEventSink:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"JsonlEventSink({str(self.path)!r})"
