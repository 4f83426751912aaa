"""Conversation identity: a header, else a keyed digest of tenant + agent + pinned prefix.

The tenant is the credential the request carries (``Authorization`` or ``x-api-key``).
It only enters an HMAC-SHA256 keyed by the gateway secret; the credential itself is
never stored, logged or put in a conversation id. Two tenants sending byte-identical
prompts therefore get two conversations, and nobody who lacks the secret can derive a
conversation id from a credential. Workers of one fleet must share the secret
(``CTXPOLICY_GATEWAY_SECRET``) to compute the same ids.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import re
from collections.abc import Mapping, Sequence
from typing import Any

__all__ = ["CONVERSATION_HEADER", "conversation_id", "pinned_prefix", "tenant_of"]

CONVERSATION_HEADER = "x-ctxpolicy-conversation"
_SAFE = re.compile(r"[^A-Za-z0-9._-]")
MAX_ID_CHARS = 128


def tenant_of(headers: Mapping[str, str]) -> str:
    """The credential of the request (empty when there is none); never log this."""
    auth = headers.get("authorization") or ""
    if auth:
        return auth.strip()
    return (headers.get("x-api-key") or "").strip()


def pinned_prefix(messages: Sequence[Mapping[str, Any]]) -> list[Any]:
    """The system message(s) before the first user message, and that first user message."""
    out: list[Any] = []
    for m in messages:
        if not isinstance(m, Mapping):
            continue
        role = m.get("role")
        if role in ("system", "developer"):
            out.append([role, m.get("content")])
            continue
        if role == "user":
            out.append(["user", m.get("content")])
            break
    return out


def _digest(secret: bytes, *parts: str) -> str:
    mac = hmac.new(secret, digestmod=hashlib.sha256)
    for p in parts:
        data = p.encode("utf-8", "surrogatepass")
        mac.update(len(data).to_bytes(8, "big"))
        mac.update(data)
    return mac.hexdigest()[:32]


def conversation_id(
    headers: Mapping[str, str],
    agent: str,
    messages: Sequence[Mapping[str, Any]],
    secret: bytes,
) -> str:
    """The conversation a request belongs to (safe as a file name and a state key).

    A given ``X-Ctxpolicy-Conversation`` is still scoped by tenant and agent, so one
    tenant cannot name (and resume) another tenant's conversation.
    """
    tenant = tenant_of(headers)
    given = headers.get(CONVERSATION_HEADER)
    if given:
        label = _SAFE.sub("_", given)[:64]
        return f"{label}-{_digest(secret, 'h', tenant, agent, given)[:16]}"
    prefix = json.dumps(pinned_prefix(messages), ensure_ascii=False, sort_keys=True, default=str)
    return "gw-" + _digest(secret, "p", tenant, agent, prefix)
