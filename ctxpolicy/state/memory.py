"""The ``memory`` state store: nothing outlives the process (tests, one-shot scripts).

Same contract as the durable stores (compare-and-set, canonical JSON values that
read back as fresh copies), so code tested against it behaves the same on
``sqlite`` or ``postgres``. Thread-safe; one instance is one private store.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Mapping
from typing import Any

from ctxpolicy.components import StateConflict, StateStore, StoredState
from ctxpolicy.plugins import hookimpl
from ctxpolicy.policy.models import ComponentOptions
from ctxpolicy.state._codec import check_expected, decode, encode_changes, valid_conv_id

__all__ = ["MemoryOptions", "MemoryStateStore"]


class MemoryOptions(ComponentOptions):
    """The ``memory`` state store has no options."""


class MemoryStateStore(StateStore):
    """State in a dict of this process: an explicit opt-out of durable state."""

    name = "memory"
    description = "In-process only: state is lost when the process ends (tests, scripts)."
    Options = MemoryOptions

    def __init__(
        self,
        options: ComponentOptions | None = None,
        *,
        home: str = "",
        env: Mapping[str, str] | None = None,
    ) -> None:
        super().__init__(options, home=home, env=env)
        self._lock = threading.Lock()
        self._data: dict[str, tuple[int, dict[str, str]]] = {}

    def load(self, conv_id: str) -> StoredState:
        valid_conv_id(conv_id)
        with self._lock:
            version, entries = self._data.get(conv_id, (0, {}))
            return StoredState(version, {k: decode(v) for k, v in entries.items()})

    def commit(
        self,
        conv_id: str,
        *,
        expected_version: int,
        put: Mapping[str, Any],
        delete: Iterable[str] = (),
    ) -> int:
        valid_conv_id(conv_id)
        expected = check_expected(expected_version)
        rows, dropped = encode_changes(put, delete)
        with self._lock:
            version, entries = self._data.get(conv_id, (0, {}))
            if version != expected:
                raise StateConflict(conv_id, expected, version)
            entries = dict(entries)
            entries.update(rows)
            for key in dropped:
                entries.pop(key, None)
            self._data[conv_id] = (version + 1, entries)
            return version + 1


@hookimpl
def ctxpolicy_register_state_stores(register):  # type: ignore[no-untyped-def]
    register(MemoryStateStore)
