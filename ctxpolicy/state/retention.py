"""Bounded state by default: conversations idle longer than ``state.max_age_days``
are deleted from the state store.

Applied without the user having to remember it, like the snapshot store's
retention: when a session opens a store, :func:`maybe_prune` deletes the
conversations whose last commit is older than the limit — at most once per
:data:`PRUNE_INTERVAL_S` per store location and process, so a busy server pays one
``DELETE`` an hour, not one per session. A conversation saved meanwhile is kept
(each store prunes atomically against its commits); one that was deleted simply
starts again from its messages.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

from ctxpolicy.components import StateStore
from ctxpolicy.events.types import StatePruned, StatePruneFailed

__all__ = ["PRUNE_INTERVAL_S", "maybe_prune"]

#: How often one process prunes one store location at most.
PRUNE_INTERVAL_S = 3600.0

_last: dict[tuple[str, str], float] = {}
_clock: Callable[[], float] = time.time
_lock = threading.Lock()


def _location(store: StateStore) -> tuple[str, str]:
    where = getattr(store, "where", "") or f"id:{id(store)}"
    return type(store).__qualname__, str(where)


def maybe_prune(
    store: StateStore,
    max_age_days: float | None,
    emit: Callable[..., Any],
    *,
    now: float | None = None,
) -> int | None:
    """Prune ``store`` if due; the number of conversations deleted (None: not due,
    disabled, or the store cannot prune). A failure is a ``state.prune_failed``
    event, never an error of the session."""
    prune = getattr(store, "prune", None)  # duck-typed stores may not have it
    if max_age_days is None or prune is None:
        return None
    now = _clock() if now is None else now
    key = _location(store)
    with _lock:
        if now - _last.get(key, float("-inf")) < PRUNE_INTERVAL_S:
            return None
        _last[key] = now
    before = now - max_age_days * 86400
    try:
        deleted = prune(before=before)
    except Exception as exc:  # a store's failure never fails the session
        StatePruneFailed(store=getattr(store, "name", "?"), error=str(exc)[:300]).send(emit)
        return None
    if deleted:
        StatePruned(
            store=getattr(store, "name", "?"), conversations=deleted, max_age_days=max_age_days
        ).send(emit)
    return deleted
