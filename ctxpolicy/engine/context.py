"""What the engine modules get instead of a :class:`~ctxpolicy.engine.Session`.

A session is a thin public facade over one :class:`EngineContext`: the policy and
the components it resolved (registry, token counter, snapshot store), the event
function, the persisted :class:`~ctxpolicy.engine.state.SessionState` (``state``,
replaced as a whole on a resume) and the rebuildable
:class:`~ctxpolicy.engine.derived.Derived` (``derived``, emptied by one ``reset``).
Engine modules (pipeline, squeeze, archiving, refs, window, persistence, handover)
read and change only these public fields — never a session's privates.

Fields only: what is done with them lives with its owner — the budget in force in
:mod:`~ctxpolicy.engine.window`, a new or restored state in
:mod:`~ctxpolicy.engine.persistence`, the component instances in
:class:`~ctxpolicy.engine.derived.Components`, the ledger and the pinned messages of
ours in :mod:`~ctxpolicy.engine.specials`. So this module imports no engine module
that takes a context (``tests/test_import_cycles.py``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ctxpolicy.components import SnapshotStore
from ctxpolicy.engine.derived import Derived
from ctxpolicy.engine.state import SessionState
from ctxpolicy.plugins import Registry
from ctxpolicy.policy.models import Policy
from ctxpolicy.tokens import TokenCounter

__all__ = ["Emit", "EngineContext"]

#: ``emit(event)`` (an :class:`ctxpolicy.events.types.Event`) or ``emit(type, **fields)``
#: → the event as sent (``conv_id`` and ``ts`` added).
Emit = Callable[..., dict[str, Any]]


@dataclass(eq=False)
class EngineContext:
    """One conversation's engine: configuration, persisted state, derived caches."""

    policy: Policy
    conv_id: str
    registry: Registry
    counter: TokenCounter
    emit: Emit
    #: what the conversation decided (persisted; replaced as a whole on a resume)
    state: SessionState
    #: what it rebuilds from its messages (one ``reset``)
    derived: Derived
    #: the snapshot store (None: snapshots disabled or unavailable)
    snapshots: SnapshotStore | None = None
