"""How one model call goes through a Session, for every front end.

* :mod:`.driver` — the call protocol once: :class:`CallDriver` (prepare → send →
  bounded overflow retry → usage → recall rounds; ``call`` and ``acall``; a
  :class:`WireFormat` and a relay for a host that speaks the wire itself, like the
  gateway: failures as replies, streamed answers settled, the answer relayed),
  :class:`CallSteps` for callback frameworks, :func:`off_loop` (the one place an async
  front end hands the engine to a worker thread);
* :mod:`.pool` — :class:`SessionPool`, the one session pool keyed by
  ``(agent, tenant, conversation)``, bounded, sharing one state store (and its
  bounded connections) per store location; :func:`conversation_key`.

The gateway (``ctxpolicy serve``) and every adapter in ``ctxpolicy.integrations`` go
through this package; the engine never imports it.
"""

from __future__ import annotations

from ctxpolicy.calls.driver import (
    RECALL_NAMES,
    CallDriver,
    CallSteps,
    Record,
    ResponseFormat,
    ToolCallRef,
    UsageOnly,
    WireFormat,
    off_loop,
)
from ctxpolicy.calls.pool import Key, SessionPool, conversation_key, resolve_policy

__all__ = [
    "RECALL_NAMES",
    "CallDriver",
    "CallSteps",
    "Key",
    "Record",
    "ResponseFormat",
    "SessionPool",
    "ToolCallRef",
    "UsageOnly",
    "WireFormat",
    "conversation_key",
    "off_loop",
    "resolve_policy",
]
