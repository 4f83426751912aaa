"""The ``memory`` state store: nothing outlives the process (tests, one-shot scripts).

Same contract as the durable stores (compare-and-set, canonical JSON values that
read back as fresh copies), so code tested against it behaves the same on
``sqlite`` or ``postgres``. Thread-safe; one instance is one private store. Its size is
bounded by whoever shares it: :meth:`MemoryStateStore.forget` drops a conversation (a
session pool forgets those it evicted longest ago).
"""

from __future__ import annotations

import threading
import time

from ctxpolicy.components import StateConflict
from ctxpolicy.plugins import hookimpl
from ctxpolicy.policy.models import ComponentOptions
from ctxpolicy.state._base import JsonStateStore, Rows

__all__ = ["MemoryOptions", "MemoryStateStore"]


class MemoryOptions(ComponentOptions):
    """The ``memory`` state store has no options."""


class MemoryStateStore(JsonStateStore):
    """State in a dict of this process: an explicit opt-out of durable state."""

    name = "memory"
    description = "In-process only: state is lost when the process ends (tests, scripts)."
    Options = MemoryOptions

    def _open_store(self) -> None:
        self._lock = threading.Lock()
        self._data: dict[str, tuple[int, dict[str, str]]] = {}
        self._saved: dict[str, float] = {}  # conv_id -> time of its last commit
        self._floor = 0  # the highest version of a pruned conversation

    def _read(self, conv_id: str) -> tuple[int, Rows]:
        with self._lock:
            version, entries = self._data.get(conv_id, (0, {}))
            return version, list(entries.items())

    def _write(self, conv_id: str, expected: int, rows: Rows, dropped: list[str]) -> int:
        with self._lock:
            version, entries = self._data.get(conv_id, (0, {}))
            if version != expected:
                raise StateConflict(conv_id, expected, version)
            entries.update(rows)  # readers get copies (_read), so in place is safe
            for key in dropped:
                entries.pop(key, None)
            new = version + 1 if version else self._floor + 1
            self._data[conv_id] = (new, entries)
            self._saved[conv_id] = time.time()
            return new

    def forget(self, conv_id: str) -> bool:
        """Drop one conversation's state (False: nothing was stored for it). Versions
        never repeat: the conversation, started again, gets versions above the old ones.
        ``ctxpolicy.calls.SessionPool`` calls it for the conversations it evicted longest
        ago, so a pool's memory store holds its open conversations and its
        ``max_sessions`` most recently evicted ones."""
        with self._lock:
            found = self._data.pop(conv_id, None)
            self._saved.pop(conv_id, None)
            if found is None:
                return False
            self._floor = max(self._floor, found[0])
            return True

    def __len__(self) -> int:
        """How many conversations have state here."""
        with self._lock:
            return len(self._data)

    def prune(self, *, before: float) -> int:
        with self._lock:
            old = [c for c, t in self._saved.items() if t < before]
            for c in old:
                self._floor = max(self._floor, self._data[c][0])
                del self._data[c], self._saved[c]
            return len(old)


@hookimpl
def ctxpolicy_register_state_stores(register):  # type: ignore[no-untyped-def]
    register(MemoryStateStore)
