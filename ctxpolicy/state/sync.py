"""Keep one conversation's state in step with its store: incremental saves, CAS, redo.

:class:`StateSync` is what a :class:`ctxpolicy.Session` uses (the engine calls it at
a few points and knows nothing of SQL). It remembers the canonical JSON of every
entry as last loaded or saved, so :meth:`StateSync.save` sends only the entries that
changed and deletes the ones that disappeared — a call writes what it changed, never
the whole history. Every save is a compare-and-set on the version it last saw.

:meth:`StateSync.run` wraps one state-changing call (``prepare``, ``add_tool_result``,
``on_error``, ``record_usage``): it runs the call, saves, and when another worker
committed first (:class:`StateConflict`) it emits ``state.conflict``, reloads the
fresh state into the session and runs the call again — at most
``state.max_conflict_retries`` times, then the conflict is raised. A store that
fails (server down) is a ``state.save_failed`` event, not a failed call: the
changes stay pending and go out with the next successful save.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, TypeVar

from ctxpolicy.components import StateConflict, StateStore, StateStoreError
from ctxpolicy.state._codec import encode

__all__ = ["StateSync"]

T = TypeVar("T")
Emit = Callable[..., Any]


def _noop(type_: str, **fields: Any) -> None:
    return None


class StateSync:
    """The link between one conversation's in-memory state and its :class:`StateStore`."""

    def __init__(
        self,
        store: StateStore,
        conv_id: str,
        *,
        max_retries: int = 3,
        emit: Emit = _noop,
    ) -> None:
        self.store = store
        self.conv_id = conv_id
        self.max_retries = max_retries
        self.emit = emit
        self.version = 0
        self.saves = 0
        self.conflicts = 0
        self._saved: dict[str, str] = {}

    def load(self) -> dict[str, Any]:
        """The stored entries (``{}`` for a new conversation); remembers their version."""
        stored = self.store.load(self.conv_id)
        self.version = stored.version
        self._saved = {k: encode(k, v) for k, v in stored.entries.items()}
        return stored.entries

    def changes(self, entries: Mapping[str, Any]) -> tuple[dict[str, Any], list[str]]:
        """What :meth:`save` would write: ``(put, delete)`` relative to the stored entries."""
        put = {}
        for key, value in entries.items():
            if self._saved.get(key) != encode(key, value):
                put[key] = value
        delete = [k for k in self._saved if k not in entries]
        return put, delete

    def save(self, entries: Mapping[str, Any]) -> bool:
        """Commit the changes of ``entries``; False when nothing changed (nothing written).

        Raises :class:`StateConflict` when another writer committed since the last
        load or save, and :class:`StateStoreError` when the store fails.
        """
        put, delete = self.changes(entries)
        if not put and not delete:
            return False
        self.version = self.store.commit(
            self.conv_id, expected_version=self.version, put=put, delete=delete
        )
        self.saves += 1
        for key, value in put.items():
            self._saved[key] = encode(key, value)
        for key in delete:
            self._saved.pop(key, None)
        return True

    def run(
        self,
        call: Callable[[], T],
        entries: Callable[[], Mapping[str, Any]],
        restore: Callable[[Mapping[str, Any]], None],
        *,
        what: str = "call",
    ) -> T:
        """Run ``call``, then save ``entries()``; on a lost race reload, ``restore`` and redo.

        ``restore(entries)`` must put the session exactly into the stored state (so
        that running ``call`` again gives what one sequential run would have).
        """
        for attempt in range(self.max_retries + 1):
            result = call()
            try:
                self.save(entries())
                return result
            except StateConflict as exc:
                self.conflicts += 1
                last = attempt == self.max_retries
                self.emit(
                    "state.conflict",
                    call=what,
                    attempt=attempt + 1,
                    expected_version=exc.expected,
                    gave_up=last,
                )
                if last:
                    raise
                restore(self.load())
            except StateStoreError as exc:
                self.emit("state.save_failed", call=what, error=str(exc))
                return result
        raise AssertionError("unreachable")  # pragma: no cover
