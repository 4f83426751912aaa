"""Durable state of a :class:`~ctxpolicy.engine.Session`: load when it opens, save after each call.

The session calls this module at three points: :func:`open_persistence` at the end
of ``__init__`` (load the stored state of ``conv_id``, if any), and
:meth:`Persistence.run` around each state-changing call (``prepare``, ``on_error``,
``record_usage``, ``add_tool_result``): the call runs, then only the entries its
:class:`~ctxpolicy.engine.state.SessionState` marked changed are committed with a
compare-and-set (:class:`ctxpolicy.state.sync.StateSync`). When another worker
committed first, the session is reset to the stored state and the call is redone
(``state.conflict``, bounded by ``state.max_conflict_retries``).

A store that cannot be opened or read is a ``state.unavailable`` event; the session
then works in memory only (like ``snapshot.unavailable``). See docs/state.md.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, TypeVar

from ctxpolicy.components import StateStore, StateStoreError
from ctxpolicy.engine.derived import Caches
from ctxpolicy.engine.state import SessionState
from ctxpolicy.state.sync import Changes, StateSync

if TYPE_CHECKING:  # pragma: no cover
    from ctxpolicy.engine.session import Session

__all__ = ["Persistence", "open_persistence"]

T = TypeVar("T")


class Persistence:
    """One session's link to its state store."""

    def __init__(self, session: Session, store: StateStore, *, owns_store: bool) -> None:
        self.session = session
        self.store = store
        self.owns_store = owns_store
        self.sync = StateSync(
            store,
            session.conv_id,
            max_retries=session.policy.state.max_conflict_retries,
            emit=session._emit,
        )

    @property
    def version(self) -> int:
        """The stored version the session's state corresponds to."""
        return self.sync.version

    def load(self) -> bool:
        """Load the stored state into the session; False for a new conversation."""
        entries = self.sync.load()
        if not entries:
            return False
        self.restore(entries)
        return True

    def restore(self, entries: Mapping[str, Any]) -> None:
        """Put the session exactly into a stored state; every derived cache is dropped."""
        from ctxpolicy.engine.ledger import Ledger

        s = self.session
        s.state = SessionState.from_entries(entries)
        ledger = entries.get("ledger")
        if s.ledger is not None and isinstance(ledger, Mapping):
            s.ledger = Ledger.from_dict(ledger, count_text=s.counter.count_text)
            s._ledger_text = s.ledger.render()
        growth = entries.get("growth")
        if isinstance(growth, Mapping):
            s._growth.load_dict(growth)
        s._caches = Caches(s)
        s._budgets.clear()
        s._last_units = []
        s._history = None

    def changes(self) -> Changes:
        """What the last call changed; the ledger and the growth samples are
        serialised only when they changed, values are encoded once (as text for the
        built-in stores, see :attr:`StateSync.encoded`)."""
        s = self.session
        take = s.state.take_encoded_changes if self.sync.encoded else s.state.take_changes
        return take(
            ledger=s.ledger.to_dict if s.ledger is not None else None,
            growth=s._growth.to_dict,
        )

    def run(self, what: str, call: Callable[[], T]) -> T:
        """Run one state-changing call and save what it changed (CAS; redo on conflict)."""
        return self.sync.run(call, self.changes, self.restore, what=what, encoded=self.sync.encoded)

    def close(self) -> None:
        if self.owns_store:
            self.store.close()


def open_persistence(
    session: Session, store: StateStore | None, env: Mapping[str, str] | None
) -> Persistence | None:
    """Open the policy's state store (or use ``store``) and load ``conv_id``'s state."""
    from ctxpolicy.state import open_state_store
    from ctxpolicy.state.retention import maybe_prune

    owns = store is None
    try:
        if store is None:
            store = open_state_store(session.policy, session.registry, env=env)
        persistence = Persistence(session, store, owns_store=owns)
        maybe_prune(store, session.policy.state.max_age_days, session._emit)
        resumed = persistence.load()
    except (StateStoreError, ValueError) as exc:
        session._emit("state.unavailable", store=session.policy.state.store, error=str(exc))
        if owns and store is not None:
            store.close()
        return None
    if resumed:
        session._emit("state.resumed", version=persistence.version)
    return persistence
