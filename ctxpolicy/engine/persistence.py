"""Durable state of a :class:`~ctxpolicy.engine.Session`: a new state, load when it opens,
save after each call, restore.

The session calls this module at two points: :func:`open_persistence` at the end
of ``__init__`` (load the stored state of ``conv_id``, if any), and
:meth:`Persistence.run` around each state-changing call (``prepare``, ``on_error``,
``record_usage``, ``add_tool_result``): the call runs, then only the entries its
:class:`~ctxpolicy.engine.state.SessionState` marked changed are committed with a
compare-and-set (:class:`ctxpolicy.state.sync.StateSync`). When another worker
committed first, the conversation is reset to the stored state (:func:`restore`)
and the call is redone (``state.conflict``, bounded by ``state.max_conflict_retries``).
A new conversation starts from :func:`new_state`.

What is persisted is :class:`~ctxpolicy.engine.state.SessionState` (its entries, and
:mod:`~ctxpolicy.engine.stored`'s checks of what is loaded); how an entry is encoded
is the public :mod:`ctxpolicy.state.codec`; the compare-and-set loop is
:class:`ctxpolicy.state.sync.StateSync`.

A store that cannot be opened or read is a ``state.unavailable`` event; the session
then works in memory only (like ``snapshot.unavailable``). See docs/state.md.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, TypeVar

from ctxpolicy.budget import ToolGrowthEstimator
from ctxpolicy.components import StateStore, StateStoreError
from ctxpolicy.engine.specials import new_ledger
from ctxpolicy.engine.state import SessionState
from ctxpolicy.engine.stored import bounded_problems
from ctxpolicy.engine.window import window_bounds
from ctxpolicy.events.types import (
    StateEntryRefused,
    StateInvalid,
    StateResumed,
    StateUnavailable,
)
from ctxpolicy.policy.models import Policy
from ctxpolicy.state.sync import Changes, StateSync
from ctxpolicy.tokens import TokenCounter

if TYPE_CHECKING:  # pragma: no cover
    from ctxpolicy.engine.context import EngineContext

__all__ = ["Persistence", "new_state", "open_persistence", "refuser", "restore"]

T = TypeVar("T")


def new_state(policy: Policy, counter: TokenCounter) -> SessionState:
    """The state of a new conversation (fresh ledger and growth samples)."""
    return SessionState(ledger=new_ledger(policy, counter), growth=ToolGrowthEstimator(policy))


def restore(ctx: EngineContext, entries: Mapping[str, Any]) -> None:
    """Put the conversation exactly into a stored state; every derived cache is
    dropped (the next ``prepare`` rebuilds them from the messages)."""
    ctx.state = SessionState.from_entries(
        entries,
        ledger=new_ledger(ctx.policy, ctx.counter),
        growth=ToolGrowthEstimator(ctx.policy),
        count_text=ctx.counter.count_text,
        bounds=window_bounds(ctx.policy),
    )
    ctx.derived.reset(ctx.state.ledger)
    for problem in bounded_problems(ctx.state.problems):
        ctx.emit(StateInvalid(key=problem.key, reason=problem.reason))


class Persistence:
    """One conversation's link to its state store."""

    def __init__(self, ctx: EngineContext, store: StateStore, *, owns_store: bool) -> None:
        self.ctx = ctx
        self.store = store
        self.owns_store = owns_store
        self.sync = StateSync(
            store,
            ctx.conv_id,
            max_retries=ctx.policy.state.max_conflict_retries,
            emit=ctx.emit,
        )

    @property
    def version(self) -> int:
        """The stored version the conversation's state corresponds to."""
        return self.sync.version

    def load(self) -> bool:
        """Load the stored state; False for a new conversation."""
        entries = self.sync.load()
        if not entries:
            return False
        restore(self.ctx, entries)
        return True

    def changes(self) -> Changes:
        """What the last call changed; the ledger and the growth samples are
        serialised only when they changed, values are encoded once (as text for the
        built-in stores, see :attr:`StateSync.encoded`)."""
        st = self.ctx.state
        refuse = refuser(self.ctx.emit)
        return st.take_encoded_changes(refuse) if self.sync.encoded else st.take_changes(refuse)

    def run(self, what: str, call: Callable[[], T]) -> T:
        """Run one state-changing call and save what it changed (CAS; redo on conflict)."""
        ctx = self.ctx
        return self.sync.run(
            call,
            self.changes,
            lambda entries: restore(ctx, entries),
            what=what,
            encoded=self.sync.encoded,
        )

    def close(self) -> None:
        if self.owns_store:
            self.store.close()


def refuser(emit: Callable[..., Any]) -> Callable[[str, str], None]:
    """What a save does with a changed entry no store can hold (a layer's NaN in its
    ``memory``, say): it is left out with a ``state.entry_refused`` event, and the
    call and the other changes go on."""

    def refuse(key: str, reason: str) -> None:
        StateEntryRefused(key=repr(key)[:120], reason=reason).send(emit)

    return refuse


def open_persistence(
    ctx: EngineContext, store: StateStore | None, env: Mapping[str, str] | None
) -> Persistence | None:
    """Open the policy's state store (or use ``store``) and load ``conv_id``'s state."""
    from ctxpolicy.state import open_state_store
    from ctxpolicy.state.retention import maybe_prune

    owns = store is None
    try:
        if store is None:
            store = open_state_store(ctx.policy, ctx.registry, env=env)
        persistence = Persistence(ctx, store, owns_store=owns)
        maybe_prune(store, ctx.policy.state.max_age_days, ctx.emit)
        resumed = persistence.load()
    except (StateStoreError, ValueError) as exc:
        ctx.emit(StateUnavailable(store=ctx.policy.state.store, error=str(exc)))
        if owns and store is not None:
            store.close()
        return None
    if resumed:
        ctx.emit(StateResumed(version=persistence.version))
    return persistence
