"""LiteLLM adapter (extra ``litellm``): ``completion`` wrappers and a proxy pre-call hook.

In code::

    from ctxpolicy.integrations import litellm as ctx_litellm

    session = ctxpolicy.Session(policy, conv_id="user-42")   # one per conversation
    resp = ctx_litellm.completion(session, model="openai/gpt-4o", messages=history, tools=tools)

:func:`completion` / :func:`acompletion` call ``litellm.completion`` /
``litellm.acompletion`` with ``session.prepare(messages, tools)``, record
``usage.prompt_tokens``, and answer a context overflow (LiteLLM's
``ContextWindowExceededError``, or any error whose text says so) with
``session.on_error`` and a retry, bounded by the policy's ``on_overflow.retries``.

On a LiteLLM proxy, :class:`ContextPolicyHook` (a ``CustomLogger``) prepares every
chat request in ``async_pre_call_hook``. The conversation is the request's own
``litellm_session_id`` (or ``metadata.session_id``, or the ``x-ctxpolicy-conversation``
header); a request without one is prepared by a fresh private session that lives
for that request only — nothing is shared between unrelated callers.
``async_post_call_failure_hook`` shows a provider overflow error to the
conversation's session, which learns the real window, so the client's retry fits.
``engine_processes=N`` (or ``CTXPOLICY_ENGINE_PROCESSES``) runs the sessions in N
worker processes, so one conversation's long history never slows the proxy's other
requests (docs/integrations/litellm.md).

Recall: :func:`recall_tools` (OpenAI format, which LiteLLM accepts for every
provider) and :func:`answer_recall` for the model's calls.
"""

from __future__ import annotations

import contextlib
import hashlib
import uuid
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

from ctxpolicy.calls.driver import CallDriver, UsageOnly, off_loop
from ctxpolicy.calls.pool import SessionPool, resolve_policy
from ctxpolicy.calls.processes import engine_processes as _engine_processes
from ctxpolicy.integrations._common import (
    Message,
    as_session,
    is_given,
    require,
    to_plain,
)
from ctxpolicy.integrations.openai import answer_recall, recall_tools

if TYPE_CHECKING:  # pragma: no cover
    from ctxpolicy.engine import Session

__all__ = [
    "ContextPolicyHook",
    "acompletion",
    "answer_recall",
    "completion",
    "conversation_id",
    "recall_tools",
    "tenant_of",
]

CONVERSATION_HEADER = "x-ctxpolicy-conversation"
#: sessions a proxy hook keeps (least recently used conversations are closed)
MAX_SESSIONS = 1024
MAX_ID_CHARS = 200


def _litellm() -> Any:
    return require("litellm", "litellm")


def _split(kwargs: dict[str, Any]) -> tuple[list[Message], list[dict[str, Any]] | None]:
    messages = [to_plain(m) for m in kwargs.pop("messages")]
    tools = kwargs.get("tools")
    return messages, to_plain(list(tools)) if is_given(tools) and tools else None


def _prompt_tokens(resp: Any) -> int | None:
    tokens = getattr(getattr(resp, "usage", None), "prompt_tokens", None)
    return tokens if isinstance(tokens, int) and tokens > 0 else None


def _driver(session: Session) -> CallDriver:
    return CallDriver(session, format=UsageOnly(_prompt_tokens))


def completion(session: Session | Any, **kwargs: Any) -> Any:
    """``litellm.completion(**kwargs)`` with ``messages`` prepared by ``session``."""
    litellm = _litellm()
    sess = as_session(session)
    messages, tools = _split(kwargs)
    return _driver(sess).call(messages, tools, lambda p: litellm.completion(messages=p, **kwargs))


async def acompletion(session: Session | Any, **kwargs: Any) -> Any:
    """``litellm.acompletion(**kwargs)`` with ``messages`` prepared by ``session`` (the
    engine runs in a worker thread, never on the event loop)."""
    litellm = _litellm()
    sess = as_session(session)
    messages, tools = _split(kwargs)

    async def send(prepared: list[Message]) -> Any:
        return await litellm.acompletion(messages=prepared, **kwargs)

    return await _driver(sess).acall(messages, tools, send)


def tenant_of(user_api_key_dict: Any) -> str:
    """The tenant of a proxy request: a digest of the caller's API key (LiteLLM's
    hashed ``token``, else the key), never the key itself; ``""`` without one."""
    key: Any = None
    for attr in ("token", "api_key"):
        key = getattr(user_api_key_dict, attr, None)
        if key is None and isinstance(user_api_key_dict, Mapping):
            key = user_api_key_dict.get(attr)
        if isinstance(key, str) and key:
            break
    if not isinstance(key, str) or not key:
        return ""
    return hashlib.sha256(b"ctxpolicy-litellm-tenant\0" + key.encode()).hexdigest()[:24]


def _conversation(model: Any, conv: str) -> str:
    """The conversation part of a hook's key: the model and the session id (a model
    with another window never shares, or shrinks, this conversation's state)."""
    name = model if isinstance(model, str) and model else "-"
    return f"{quote(name, safe='')}/{conv}"


def conversation_id(data: Mapping[str, Any]) -> str | None:
    """The conversation a proxy request names (see the module docstring), or None."""
    candidates: list[Any] = [data.get("litellm_session_id")]
    for key in ("metadata", "litellm_metadata"):
        meta = data.get(key)
        if isinstance(meta, Mapping):
            candidates.append(meta.get("session_id"))
            headers = meta.get("headers")
            if isinstance(headers, Mapping):
                candidates.append(headers.get(CONVERSATION_HEADER))
    proxy = data.get("proxy_server_request")
    if isinstance(proxy, Mapping) and isinstance(proxy.get("headers"), Mapping):
        candidates.append(proxy["headers"].get(CONVERSATION_HEADER))
    for c in candidates:
        if isinstance(c, str) and c.strip() and len(c) <= MAX_ID_CHARS:
            return c.strip()
    return None


def _make_hook() -> type:
    base = require("litellm.integrations.custom_logger", "litellm").CustomLogger

    class ContextPolicyHook(base):  # type: ignore[misc,valid-type]
        """ctxpolicy on a LiteLLM proxy (``litellm_settings.callbacks``).

        ``policy`` is a resolved policy or a policy file (``agent`` names the agent);
        ``session_options`` go to every :class:`~ctxpolicy.Session` it makes. A
        conversation is keyed by the agent, the caller's API key (a digest of it:
        :func:`tenant_of`), the model and the session id, so another key or another
        model reusing a session id never resets or shrinks this one. The engine runs
        in a worker thread, never on the proxy's event loop; ``engine_processes=N``
        (default: ``CTXPOLICY_ENGINE_PROCESSES``, else 0) runs the sessions in N worker
        processes instead, so one long history does not slow the other requests by
        holding the proxy's interpreter lock.
        """

        def __init__(
            self,
            policy: Any,
            *,
            agent: str = "default",
            max_sessions: int = MAX_SESSIONS,
            engine_processes: int | None = None,
            **session_options: Any,
        ):
            super().__init__()
            self.policy = resolve_policy(policy, agent, who="ContextPolicyHook")
            self.session_options = session_options
            self.sessions = SessionPool(
                self.policy,
                max_sessions=max_sessions,
                engine_processes=_engine_processes(engine_processes),
                **session_options,
            )

        def session_for(
            self, data: Mapping[str, Any], user_api_key_dict: Any = None, token: str = ""
        ) -> tuple[Session, bool]:
            """(the session of the request's conversation, whether it is kept); a
            request without a conversation gets a private one (``token`` names it in a
            pool with engine processes)."""
            conv = conversation_id(data)
            if conv is None:
                if self.sessions.processes is not None:  # closed after the request
                    return self.sessions.private(token or uuid.uuid4().hex), False
                return as_session(self.policy, **self.session_options), False
            key = _conversation(data.get("model"), conv)
            return self.sessions.get(key, tenant=tenant_of(user_api_key_dict)), True

        def _prepare(
            self, data: dict[str, Any], user_api_key_dict: Any, messages: Sequence[Any]
        ) -> list[Message]:
            tools = data.get("tools")
            plain = [to_plain(m) for m in messages]
            schemas = to_plain(list(tools)) if tools else None
            conv = conversation_id(data)
            if conv is not None:  # in use for the step: never evicted under it
                key = _conversation(data.get("model"), conv)
                with self.sessions.held(key, tenant=tenant_of(user_api_key_dict)) as sess:
                    return sess.prepare(plain, tools=schemas)
            if self.sessions.processes is not None:  # private, closed after the request
                token = uuid.uuid4().hex
                try:
                    with self.sessions.held(token, private=True) as sess:
                        return sess.prepare(plain, tools=schemas)
                finally:
                    self.sessions.close_private(token)
            sess = as_session(self.policy, **self.session_options)
            try:
                return sess.prepare(plain, tools=schemas)
            finally:
                sess.close()

        async def async_pre_call_hook(
            self, user_api_key_dict: Any, cache: Any, data: dict[str, Any], call_type: Any
        ) -> dict[str, Any]:
            messages = data.get("messages")
            if not isinstance(messages, Sequence) or isinstance(messages, str) or not messages:
                return data  # not a chat request: forwarded unchanged
            data["messages"] = await off_loop(self._prepare, data, user_api_key_dict, messages)
            return data

        async def async_post_call_failure_hook(
            self,
            request_data: dict[str, Any],
            original_exception: Exception,
            user_api_key_dict: Any,
            traceback_str: str | None = None,
        ) -> Any:
            from ctxpolicy.engine.overflow import is_context_overflow

            conv = conversation_id(request_data)
            if conv is None or not is_context_overflow(original_exception):
                return None
            key = _conversation(request_data.get("model"), conv)
            messages = [to_plain(m) for m in request_data.get("messages") or []]
            # learns the window, so the client's retry is prepared under it; the error
            # goes back to the client unchanged either way
            tenant = tenant_of(user_api_key_dict)
            await off_loop(self._learn, key, tenant, original_exception, messages)
            return None

        def _learn(self, key: str, tenant: str, exc: Exception, messages: list[Message]) -> None:
            """``on_error`` on the conversation's open session (none open: nothing to
            learn), in use meanwhile."""
            with self.sessions.using(key, tenant=tenant):
                sess = self.sessions.peek(key, tenant=tenant)
                if sess is not None:
                    _learn(sess, exc, messages)

    return ContextPolicyHook


def _learn(session: Session, exc: Exception, messages: list[Message]) -> None:
    from ctxpolicy.engine import ContextOverflowError

    with contextlib.suppress(ContextOverflowError):
        session.on_error(exc, messages)


if TYPE_CHECKING:  # pragma: no cover
    #: built on first use (it subclasses LiteLLM's ``CustomLogger``)
    ContextPolicyHook: type[Any]


def __getattr__(name: str) -> Any:
    if name == "ContextPolicyHook":
        cls = _make_hook()
        globals()["ContextPolicyHook"] = cls
        return cls
    raise AttributeError(name)
