"""What compaction did, seen from the engine's events (docs/observability.md).

:mod:`ctxpolicy.observe.views` folds events into per-conversation series and totals
(the gateway's ``/dashboard`` and ``ctxpolicy report`` show the same views);
:mod:`ctxpolicy.observe.page` serves and renders the one static page.
"""
