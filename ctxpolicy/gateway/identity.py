"""Who is calling, and which conversation a request continues.

**Tenant.** The credential a request carries: the gateway token (``X-Ctxpolicy-Token``,
or the request's own key when the gateway holds the provider key), else the provider key
it sends (``Authorization`` or ``x-api-key``). It only enters a keyed hash (BLAKE2b, keyed by the
gateway secret); the credential itself is never stored, logged or put in an id. When the
gateway sends its own provider key (``--api-key-env``), a request without a credential of
its own is refused (HTTP 401): keyless clients never share one tenant. With
``--client-token-env`` every request must present one of the gateway's tokens.

**Conversation**, in this order, always scoped by tenant and agent:

1. ``X-Ctxpolicy-Conversation``;
2. the client's own session id: the headers of :data:`SESSION_HEADERS` (Claude Code,
   Codex, opencode; more with ``--session-header``), then the body fields of
   :data:`SESSION_FIELDS` (Codex's ``prompt_cache_key``, the SDKs' ``metadata.user_id``
   and ``user``);
3. continuity: the conversation whose last history (the messages of its last request) is
   a prefix of this request's messages. The last history of each conversation is kept as
   a digest in a bounded index per tenant and agent, in the worker's memory; a request
   that continues none starts a new conversation. Two sessions with identical openings
   share a conversation only while their requests are identical, and become two at their
   first divergence: the one that moves first keeps it, the other starts anew.

Workers of one fleet must share the secret (``CTXPOLICY_GATEWAY_SECRET``) to compute the
same ids for 1 and 2; continuity is per worker (send a session id across a fleet).
"""

from __future__ import annotations

import hashlib
import hmac
import json
import re
import secrets
import threading
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple

__all__ = [
    "CONVERSATION_HEADER",
    "SESSION_FIELDS",
    "SESSION_HEADERS",
    "TOKEN_HEADER",
    "Conversation",
    "Identity",
    "Refused",
]

CONVERSATION_HEADER = "x-ctxpolicy-conversation"
TOKEN_HEADER = "x-ctxpolicy-token"

#: Request headers holding a client's own session id, first present wins.
SESSION_HEADERS: tuple[tuple[str, str], ...] = (
    ("x-claude-code-session-id", "Claude Code"),
    ("session-id", "Codex CLI"),
    ("session_id", "Codex CLI (older)"),
    ("x-session-id", "opencode"),
)
#: Body fields holding a session (or end-user) id, after the headers: ``a.b`` is a path.
SESSION_FIELDS: tuple[tuple[str, str], ...] = (
    ("prompt_cache_key", "Codex CLI, OpenAI SDK"),
    ("metadata.user_id", "Anthropic SDK, Claude Code"),
    ("user", "OpenAI SDK"),
)

_SAFE = re.compile(r"[^A-Za-z0-9._-]")
_HEADER_NAME = re.compile(r"^[A-Za-z0-9!#$%&'*+.^_`|~-]{1,128}$")
MAX_ID_CHARS = 128
#: Longest session id read (longer ones are cut; they are only hashed).
MAX_SESSION_VALUE = 1024


class Refused(Exception):
    """A request the gateway does not serve without a credential (HTTP 401)."""


class Conversation(NamedTuple):
    """A request's conversation id and how it was found (``header``, ``session``,
    ``continuity``)."""

    id: str
    source: str


def valid_header_name(name: str) -> bool:
    """True for a plausible HTTP header name (``--session-header``)."""
    return bool(_HEADER_NAME.match(name))


def _digest(secret: bytes, *parts: str) -> str:
    """A keyed BLAKE2b of ``parts`` (each length-prefixed, so no two part lists collide)."""
    key = secret if len(secret) <= 64 else hashlib.sha256(secret).digest()
    data = b"".join(
        len(b).to_bytes(8, "big") + b for b in (p.encode("utf-8", "surrogatepass") for p in parts)
    )
    return hashlib.blake2b(data, key=key, digest_size=32).hexdigest()


def _field(body: Mapping[str, Any], path: str) -> str | None:
    cur: Any = body
    for part in path.split("."):
        if not isinstance(cur, Mapping):
            return None
        cur = cur.get(part)
    if isinstance(cur, str) and cur.strip():
        return cur[:MAX_SESSION_VALUE]
    return None


def _bearer(value: str) -> str:
    v = value.strip()
    return v[7:].strip() if v[:7].lower() == "bearer " else v


def history_digests(messages: Sequence[Any]) -> list[bytes]:
    """Chained digests of a message list: ``out[i]`` stands for ``messages[: i + 1]``."""
    out: list[bytes] = []
    prev = b""
    for m in messages:
        text = json.dumps(m, ensure_ascii=False, sort_keys=True, separators=(",", ":"), default=str)
        prev = hashlib.blake2b(
            prev + text.encode("utf-8", "surrogatepass"), digest_size=16
        ).digest()
        out.append(prev)
    return out


class Identity:
    """Tenants and conversation ids of one gateway worker (thread-safe)."""

    def __init__(
        self,
        secret: bytes,
        *,
        session_headers: Sequence[str] = (),
        client_tokens: Sequence[str] = (),
        max_scopes: int = 4096,
        per_scope: int = 256,
    ) -> None:
        self.secret = secret
        extra = [h.lower() for h in session_headers]
        self.session_headers = tuple(dict.fromkeys([*extra, *(h for h, _ in SESSION_HEADERS)]))
        self._tokens = tuple(t.encode() for t in client_tokens if t)
        self.max_scopes = max(1, max_scopes)
        self.per_scope = max(1, per_scope)
        # (tenant, agent) -> {digest of a conversation's last history: conversation id}
        self._index: OrderedDict[tuple[str, str], OrderedDict[bytes, str]] = OrderedDict()
        self._lock = threading.Lock()

    # -- tenant ---------------------------------------------------------------------------
    def tenant(self, headers: Mapping[str, str], *, server_key: bool) -> str:
        """The tenant of a request (a keyed digest; empty for a keyless request when the
        client's own key goes upstream). Raises :class:`Refused`."""
        token = (headers.get(TOKEN_HEADER) or "").strip()
        own = _bearer(headers.get("authorization") or "") or (headers.get("x-api-key") or "")
        own = own.strip()
        if self._tokens:
            given = token or (own if server_key else "")
            ok = False
            for t in self._tokens:  # every token compared: the time says nothing
                ok |= hmac.compare_digest(t, given.encode("utf-8", "surrogatepass"))
            if not ok:
                raise Refused(
                    "this gateway requires a gateway token: send it as the API key "
                    "(when the gateway holds the provider key) or in the X-Ctxpolicy-Token "
                    "header (ctxpolicy serve --client-token-env)"
                )
            return _digest(self.secret, "t", given)[:32]
        credential = token or own
        if not credential:
            if server_key:
                raise Refused(
                    "this gateway sends its own provider key, so a client must present a "
                    "credential of its own (its API key, or X-Ctxpolicy-Token) to keep its "
                    "conversations apart from other clients' (ctxpolicy serve --client-token-env "
                    "restricts it to known tokens)"
                )
            return ""
        return _digest(self.secret, "t", credential)[:32]

    # -- conversation -----------------------------------------------------------------------
    def session_of(self, headers: Mapping[str, str], body: Mapping[str, Any]) -> str | None:
        """The client's own session id (``name=value``), or None."""
        for name in self.session_headers:
            v = headers.get(name)
            if v and v.strip():
                return f"{name}={v.strip()[:MAX_SESSION_VALUE]}"
        for path, _ in SESSION_FIELDS:
            v = _field(body, path)
            if v is not None:
                return f"{path}={v}"
        return None

    def conversation(
        self,
        headers: Mapping[str, str],
        agent: str,
        tenant: str,
        body: Mapping[str, Any],
        messages: Sequence[Any],
    ) -> Conversation:
        """The conversation of a request (its id is safe as a file name and a state key)."""
        given = headers.get(CONVERSATION_HEADER)
        if given:
            label = _SAFE.sub("_", given)[:64]
            return Conversation(
                f"{label}-{_digest(self.secret, 'h', tenant, agent, given)[:16]}", "header"
            )
        session = self.session_of(headers, body)
        if session is not None:
            return Conversation(
                "s-" + _digest(self.secret, "s", tenant, agent, session)[:32], "session"
            )
        return Conversation(self.continue_(tenant, agent, messages), "continuity")

    def continue_(self, tenant: str, agent: str, messages: Sequence[Any]) -> str:
        """The conversation whose last history is the longest prefix of ``messages``
        (it now ends at ``messages``), or a new one."""
        digests = history_digests(messages)
        if not digests:
            return "c-" + secrets.token_hex(16)
        scope_key = (tenant, agent)
        with self._lock:
            scope = self._index.get(scope_key)
            if scope is None:
                scope = self._index[scope_key] = OrderedDict()
                while len(self._index) > self.max_scopes:
                    self._index.popitem(last=False)
            else:
                self._index.move_to_end(scope_key)
            conv = None
            for d in reversed(digests):
                conv = scope.pop(d, None)
                if conv is not None:
                    break
            if conv is None:
                conv = "c-" + secrets.token_hex(16)
            scope[digests[-1]] = conv
            while len(scope) > self.per_scope:
                scope.popitem(last=False)
            return conv
