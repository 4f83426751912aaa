"""Event builders and sinks.

Every event is a JSON-serialisable dict with a ``type``. The engine sends them to the
pluggy ``ctxpolicy_event`` observers and to an optional callback; :class:`JsonlEventSink`
is such a callback that appends them to a file, one JSON object per line.

``context.status`` (one per ``prepare``) has exactly design A's fields
``{type, used, budget, ratio, state, compact_layer}`` plus ``window``, ``trigger``,
``target``, ``tokenizer`` and ``approximate``. ``budget`` is design A's
``effective_budget``, which is our ``trigger``.
"""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path
from types import TracebackType
from typing import IO, Any

from ctxpolicy.budget import BudgetState
from ctxpolicy.policy.models import State

__all__ = [
    "STATUS_FIELDS",
    "JsonlEventSink",
    "fallback_event",
    "status_event",
]

#: Keys of a ``context.status`` event, in order (design A's first).
STATUS_FIELDS: tuple[str, ...] = (
    "type",
    "used",
    "budget",
    "ratio",
    "state",
    "compact_layer",
    "window",
    "trigger",
    "target",
    "tokenizer",
    "approximate",
)


def status_event(
    *,
    used: int,
    budget: BudgetState,
    tokenizer: str,
    approximate: bool,
    compact_layer: str | None = None,
    state: State | str | None = None,
    **extra: Any,
) -> dict[str, Any]:
    """A ``context.status`` event for a context of ``used`` tokens.

    ``compact_layer`` is the last layer that ran in this ``prepare`` (None if none);
    ``state`` defaults to ``budget.state_for(used)``. ``extra`` keys (e.g. ``conv_id``)
    are appended after the standard ones and may not overwrite them.
    """
    st = State(state) if state is not None else budget.state_for(used)
    event: dict[str, Any] = {
        "type": "context.status",
        "used": int(used),
        "budget": budget.trigger,
        "ratio": budget.ratio(used),
        "state": st.value,
        "compact_layer": compact_layer,
        "window": budget.window,
        "trigger": budget.trigger,
        "target": budget.target,
        "tokenizer": tokenizer,
        "approximate": bool(approximate),
    }
    clash = set(extra) & set(event)
    if clash:
        raise ValueError(f"extra fields may not replace standard ones: {sorted(clash)}")
    event.update(extra)
    return event


def fallback_event(wanted: str, using: str, reason: str, **extra: Any) -> dict[str, Any]:
    """A ``tokenizer.fallback`` event (see :mod:`ctxpolicy.tokens`)."""
    return {
        "type": "tokenizer.fallback",
        "wanted": wanted,
        "using": using,
        "reason": reason,
        **extra,
    }


class JsonlEventSink:
    """Callable that appends each event as one JSON line to ``path``; thread-safe.

    The file (and its parent directories) is created on the first event, opened in
    append mode, and flushed after every line (``fsync=True`` also syncs to disk).
    Values JSON cannot encode are written with ``str()``. Use as a context manager or
    call :meth:`close`.
    """

    def __init__(self, path: str | os.PathLike[str], *, fsync: bool = False) -> None:
        self.path = Path(path)
        self.fsync = fsync
        self._lock = threading.Lock()
        self._fh: IO[str] | None = None
        self.count = 0

    def __call__(self, event: dict[str, Any]) -> None:
        line = json.dumps(event, ensure_ascii=False, default=str, separators=(",", ":"))
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
