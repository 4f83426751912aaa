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

Recall: :func:`recall_tools` (OpenAI format, which LiteLLM accepts for every
provider) and :func:`answer_recall` for the model's calls.
"""

from __future__ import annotations

import contextlib
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from ctxpolicy.integrations._common import (
    Message,
    acall_with_retry,
    as_session,
    call_with_retry,
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


def _usage(session: Session, resp: Any) -> None:
    tokens = getattr(getattr(resp, "usage", None), "prompt_tokens", None)
    if isinstance(tokens, int) and tokens > 0:
        session.record_usage(tokens)


def completion(session: Session | Any, **kwargs: Any) -> Any:
    """``litellm.completion(**kwargs)`` with ``messages`` prepared by ``session``."""
    litellm = _litellm()
    sess = as_session(session)
    messages, tools = _split(kwargs)

    def send(prepared: list[Message]) -> Any:
        resp = litellm.completion(messages=prepared, **kwargs)
        _usage(sess, resp)
        return resp

    return call_with_retry(sess, messages, tools, send)


async def acompletion(session: Session | Any, **kwargs: Any) -> Any:
    """``litellm.acompletion(**kwargs)`` with ``messages`` prepared by ``session``."""
    litellm = _litellm()
    sess = as_session(session)
    messages, tools = _split(kwargs)

    async def send(prepared: list[Message]) -> Any:
        resp = await litellm.acompletion(messages=prepared, **kwargs)
        _usage(sess, resp)
        return resp

    return await acall_with_retry(sess, messages, tools, send)


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
        ``session_options`` go to every :class:`~ctxpolicy.Session` it makes.
        """

        def __init__(self, policy: Any, *, agent: str = "default", **session_options: Any):
            super().__init__()
            if isinstance(policy, str) or hasattr(policy, "__fspath__"):
                from ctxpolicy import load_policy

                policy = load_policy(policy, agent=agent)
            self.policy = policy
            self.session_options = session_options
            self.sessions: OrderedDict[str, Session] = OrderedDict()

        def session_for(self, data: Mapping[str, Any]) -> tuple[Session, bool]:
            """(the session of the request's conversation, whether it is kept)."""
            conv = conversation_id(data)
            if conv is None:
                return as_session(self.policy, **self.session_options), False
            sess = self.sessions.get(conv)
            if sess is None:
                sess = as_session(self.policy, conv_id=conv, **self.session_options)
                self.sessions[conv] = sess
                while len(self.sessions) > MAX_SESSIONS:
                    self.sessions.popitem(last=False)[1].close()
            else:
                self.sessions.move_to_end(conv)
            return sess, True

        async def async_pre_call_hook(
            self, user_api_key_dict: Any, cache: Any, data: dict[str, Any], call_type: Any
        ) -> dict[str, Any]:
            messages = data.get("messages")
            if not isinstance(messages, Sequence) or isinstance(messages, str) or not messages:
                return data  # not a chat request: forwarded unchanged
            sess, kept = self.session_for(data)
            tools = data.get("tools")
            plain = [to_plain(m) for m in messages]
            data["messages"] = sess.prepare(plain, tools=to_plain(list(tools)) if tools else None)
            if not kept:
                sess.close()
            return data

        async def async_post_call_failure_hook(
            self,
            request_data: dict[str, Any],
            original_exception: Exception,
            user_api_key_dict: Any,
            traceback_str: str | None = None,
        ) -> Any:
            from ctxpolicy.engine import ContextOverflowError
            from ctxpolicy.engine.overflow import is_context_overflow

            conv = conversation_id(request_data)
            if conv is None or conv not in self.sessions:
                return None
            if not is_context_overflow(original_exception):
                return None
            messages = request_data.get("messages") or []
            # learns the window, so the client's retry is prepared under it; the error
            # goes back to the client unchanged either way
            with contextlib.suppress(ContextOverflowError):
                self.sessions[conv].on_error(original_exception, [to_plain(m) for m in messages])
            return None

    return ContextPolicyHook


if TYPE_CHECKING:  # pragma: no cover
    #: built on first use (it subclasses LiteLLM's ``CustomLogger``)
    ContextPolicyHook: type[Any]


def __getattr__(name: str) -> Any:
    if name == "ContextPolicyHook":
        cls = _make_hook()
        globals()["ContextPolicyHook"] = cls
        return cls
    raise AttributeError(name)
