"""How one model call goes through a Session, for every front end.

* :mod:`.driver` — the call protocol once: :class:`CallDriver` (prepare → send →
  bounded overflow retry → usage → recall rounds; ``call`` and ``acall``; a
  :class:`WireFormat` and a relay for a host that speaks the wire itself, like the
  gateway: failures as replies, streamed answers settled, the answer relayed),
  :class:`CallSteps` for callback frameworks, :func:`off_loop` (the one place an async
  front end hands the engine to a worker thread);
* :mod:`.pool` — :class:`SessionPool`, the one session pool keyed by
  ``(agent, tenant, conversation)``, bounded, sharing one state store (and its
  bounded connections) per store location; :func:`conversation_key`;
* :mod:`.processes` — the engine in worker processes (``SessionPool(...,
  engine_processes=N)``): a conversation moves to its engine process at its first
  heavy step, so a long history never holds the interpreter lock of the process that
  serves the others; :func:`run_on` runs a function where a session lives.

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
from ctxpolicy.calls.processes import (
    EngineProcesses,
    EngineWorkerError,
    PlacedSession,
    RemoteSession,
    engine_processes,
    run_on,
)

__all__ = [
    "RECALL_NAMES",
    "CallDriver",
    "CallSteps",
    "EngineProcesses",
    "EngineWorkerError",
    "Key",
    "PlacedSession",
    "Record",
    "RemoteSession",
    "ResponseFormat",
    "SessionPool",
    "ToolCallRef",
    "UsageOnly",
    "WireFormat",
    "conversation_key",
    "engine_processes",
    "off_loop",
    "resolve_policy",
    "run_on",
]
