"""``ctxpolicy serve``: the engine behind OpenAI- and Anthropic-compatible endpoints.

Modules: :mod:`.app` (routes, limits, health, metrics), :mod:`.routing` (agent type),
:mod:`.identity` (conversation id), :mod:`.sessions` (one Session per conversation),
:mod:`.recall` (answering ``ctx_recall``/``ctx_search`` inside the gateway),
:mod:`.metrics` (Prometheus text); the provider formats are :mod:`ctxpolicy.wire`'s.
Needs the ``gateway`` extra (starlette, uvicorn, httpx).
"""

from __future__ import annotations

__all__ = ["GatewayConfig", "create_app"]


def __getattr__(name: str) -> object:
    if name in __all__:
        from ctxpolicy.gateway import app

        return getattr(app, name)
    raise AttributeError(name)
