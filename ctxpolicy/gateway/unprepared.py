"""Why a request was forwarded without being prepared, and the path it is counted under.

Every request the gateway forwards unchanged is counted in
``ctxpolicy_gateway_forwarded_total{path, reason}``. ``path`` is the API resource
(``/v1/models``, ``/v1/embeddings``, ``/v1/messages/count_tokens``, …) or ``other``,
never the raw path: a client cannot grow the metric without bound. Reasons:

* ``not a model call`` — not a ``POST``, or a resource that holds no conversation
  (models, embeddings, files, batches, token counts, …);
* ``api not prepared`` — a model call through an API the gateway does not prepare
  (OpenAI Responses, the legacy completions endpoints);
* ``other path`` — a path outside the providers' APIs.

A front end that forwards a model call of a prepared API unprepared (a Responses
request continued by ``previous_response_id``, say) counts it with its own reason.
"""

from __future__ import annotations

from ctxpolicy.gateway.routing import API_RESOURCES

__all__ = ["API_NOT_PREPARED", "NOT_A_MODEL_CALL", "OTHER_PATH", "classify"]

NOT_A_MODEL_CALL = "not a model call"
API_NOT_PREPARED = "api not prepared"
OTHER_PATH = "other path"

#: Model calls through APIs the gateway does not prepare (first segment after /v1/).
_MODEL_CALLS = frozenset({"responses", "completions", "complete"})
#: Second segments kept in the label (``/v1/messages/count_tokens``, ...).
_SUB = frozenset({"completions", "count_tokens", "batches"})


def classify(method: str, path: str) -> tuple[str, str]:
    """``(path label, reason)`` of a forwarded request (``path`` without the
    ``/agents/{name}`` prefix)."""
    parts = path.split("/", 4)
    if len(parts) < 3 or parts[0] != "" or parts[1] != "v1" or parts[2] not in API_RESOURCES:
        return "other", OTHER_PATH
    label = "/v1/" + parts[2]
    if len(parts) > 3 and parts[3] in _SUB:
        label += "/" + parts[3]
    if method.upper() == "POST" and parts[2] in _MODEL_CALLS and len(parts) == 3:
        return label, API_NOT_PREPARED
    return label, NOT_A_MODEL_CALL
