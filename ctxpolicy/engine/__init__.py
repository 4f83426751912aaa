"""The engine: a :class:`Session` prepares every model call of one conversation.

The package shows what is persisted and what is derived:

* :mod:`~ctxpolicy.engine.session` — the public :class:`Session` (its calls);
* :mod:`~ctxpolicy.engine.state` — :class:`SessionState`, everything a session decided
  that cannot be recomputed from the messages (persisted by a state store);
* :mod:`~ctxpolicy.engine.derived` — derived, rebuildable caches of the per-call path;
* :mod:`~ctxpolicy.engine.pipeline` — the layer pipeline and its escalation rule;
* :mod:`~ctxpolicy.engine.squeeze` — the last resort that makes a request fit;
* :mod:`~ctxpolicy.engine.own` — the engine's own messages (ledger, handover).
"""

from ctxpolicy.engine.own import HANDOVER_MARK, LEDGER_MARK
from ctxpolicy.engine.session import ContextOverflowError, Session, prepare
from ctxpolicy.engine.state import PreparedStats, SessionState

__all__ = [
    "HANDOVER_MARK",
    "LEDGER_MARK",
    "ContextOverflowError",
    "PreparedStats",
    "Session",
    "SessionState",
    "prepare",
]
