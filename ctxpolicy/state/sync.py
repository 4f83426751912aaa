"""Keep one conversation's state in step with its store: incremental saves, CAS, redo.

:class:`StateSync` is what a :class:`ctxpolicy.Session` uses (the engine calls it at
a few points and knows nothing of SQL). The session says what changed since the last
save (``put`` and ``delete``: its state tracks dirty entries), and every save is one
compare-and-set commit of exactly those entries on the version last seen — a call
writes what it changed, never the whole history.

:meth:`StateSync.run` wraps one state-changing call (``prepare``, ``add_tool_result``,
``on_error``, ``record_usage``): it runs the call and saves its changes; when another
worker committed first (:class:`StateConflict`) it emits ``state.conflict``, waits a
few random milliseconds (growing with each attempt, so racing workers spread out),
reloads the stored state into the session and runs the call again — at most
``max_retries`` times, then the conflict is raised. A store that fails (server
down) is a ``state.save_failed`` event, not a failed call: the changes stay pending
and go out with the next successful save.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any, TypeVar

from ctxpolicy.components import StateConflict, StateStore, StateStoreError
from ctxpolicy.events.types import (
    StateConflictEvent,
    StateEntryRefused,
    StateReloadFailed,
    StateSaveFailed,
)
from ctxpolicy.state.codec import check_key, encode

__all__ = ["Changes", "StateSync"]

T = TypeVar("T")
#: What changed since the last save: entries to write, keys to delete.
Changes = tuple[Mapping[str, Any], Iterable[str]]


def _storable(key: object) -> bool:
    try:
        check_key(key)
    except ValueError:
        return False
    return True


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
        emit: Callable[..., Any] = _noop,
    ) -> None:
        self.store = store
        self.conv_id = conv_id
        self.max_retries = max_retries
        self.emit = emit
        #: the stored version this session's state corresponds to
        self.version = 0
        self.saves = 0
        self.conflicts = 0
        self._put: dict[str, Any] = {}
        self._delete: set[str] = set()
        self._rng = random.Random()
        #: the last call gave up on a lost race: reload before the next one
        self._stale = False
        #: the store takes values already encoded as canonical JSON text
        #: (``commit_encoded`` of the built-in stores): changes are then given as text
        self.encoded = callable(getattr(store, "commit_encoded", None))

    @property
    def pending(self) -> bool:
        """Changes that a failed save could not write yet."""
        return bool(self._put or self._delete)

    def load(self) -> dict[str, Any]:
        """The stored entries (``{}`` for a new conversation); remembers their version.

        Pending changes are dropped: the loaded state replaces them.
        """
        stored = self.store.load(self.conv_id)
        self.version = stored.version
        self._put.clear()
        self._delete.clear()
        return stored.entries

    def save(
        self, put: Mapping[str, Any], delete: Iterable[str] = (), *, encoded: bool = False
    ) -> bool:
        """Commit these changes (and any pending ones); False when there is nothing to write.

        ``encoded``: the values of ``put`` are already their canonical JSON text
        (:func:`ctxpolicy.state.codec.entry_text`); only for a store that takes
        them (:attr:`encoded`). Plain values given to such a store are encoded here:
        one that would not read back equal is a :class:`StateStoreError` before any
        of ``put`` is kept.

        Raises :class:`StateConflict` when another writer committed since the last
        load or save (reload and redo), and :class:`StateStoreError` when the store
        fails (the changes stay pending for the next save).
        """
        put, delete = self._valid_keys(put, delete)
        if self.encoded and not encoded:
            put = {key: encode(key, value) for key, value in put.items()}
        elif encoded and not self.encoded:
            raise ValueError("this state store takes values, not encoded text")
        for key in delete:
            self._put.pop(key, None)
            self._delete.add(key)
        for key, value in put.items():
            self._delete.discard(key)
            self._put[key] = value
        if not self.pending:
            return False
        commit = self.store.commit_encoded if self.encoded else self.store.commit  # type: ignore[attr-defined]
        self.version = commit(
            self.conv_id, expected_version=self.version, put=self._put, delete=self._delete
        )
        self.saves += 1
        self._put.clear()
        self._delete.clear()
        return True

    def _valid_keys(
        self, put: Mapping[str, Any], delete: Iterable[str]
    ) -> tuple[Mapping[str, Any], list[str]]:
        """``put`` and ``delete`` without keys no store could hold (``state.entry_refused``):
        such a key never becomes a pending change that every later save would fail on."""
        bad = [k for k in [*put, *delete] if not _storable(k)]
        delete = [k for k in delete if _storable(k)]
        if bad:
            for key in bad[:10]:
                StateEntryRefused(key=repr(key)[:120], reason="not a valid key").send(self.emit)
            put = {k: v for k, v in put.items() if _storable(k)}
        return put, delete

    def run(
        self,
        call: Callable[[], T],
        changes: Callable[[], Changes],
        restore: Callable[[Mapping[str, Any]], None],
        *,
        what: str = "call",
        encoded: bool = False,
    ) -> T:
        """Run ``call`` and save ``changes()``; on a lost race reload, ``restore``, redo.

        ``restore(entries)`` must put the session exactly into the stored state, so
        that running ``call`` again gives what one sequential run would have.
        """
        if self._stale and not self._reload(restore, what):
            return call()  # in memory only until the store can be read again
        for attempt in range(self.max_retries + 1):
            result = call()
            put, delete = changes()
            try:
                self.save(put, delete, encoded=encoded)
                return result
            except StateConflict as exc:
                self.conflicts += 1
                last = attempt == self.max_retries
                StateConflictEvent(
                    call=what, attempt=attempt + 1, expected_version=exc.expected, gave_up=last
                ).send(self.emit)
                if last:
                    # the agent's call succeeds as computed here; its state changes are
                    # not written (the store keeps a state some sequential run had) and
                    # the next call starts from the stored state
                    self._stale = True
                    return result
                # a short random pause so racing workers do not collide again at once
                time.sleep(self._rng.uniform(0, min(0.05, 0.002 * 2**attempt)))
                if not self._reload(restore, what):
                    return result
            except StateStoreError as exc:
                StateSaveFailed(call=what, error=str(exc)).send(self.emit)
                return result
        raise AssertionError("unreachable")  # pragma: no cover

    def _reload(self, restore: Callable[[Mapping[str, Any]], None], what: str) -> bool:
        """Put the session into the stored state; False (``state.reload_failed``, and
        the next call tries again first) when the store cannot be read. A store outage
        during the reload after a lost race is an event, never an error of the call."""
        self._stale = False
        try:
            restore(self.load())
        except (StateStoreError, ValueError) as exc:
            self._stale = True
            StateReloadFailed(call=what, error=str(exc)[:500]).send(self.emit)
            return False
        return True
